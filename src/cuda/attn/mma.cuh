// mma.cuh — the PTX building blocks of the tensor-core kernels (sm_80+): cp.async 16-byte copies
// with zero fill, ldmatrix (plain and transposed), mma.sync.m16n8k16 for bf16/f16 with fp32
// accumulation, packing two floats into a bf16x2/f16x2 register, and the shared-memory tile loader.
//
// Fragment maps of m16n8k16 (g = lane / 4, t = lane % 4), from the PTX ISA:
//   A 16x16: reg0 (g, 2t..2t+1)  reg1 (g+8, 2t..)  reg2 (g, 2t+8..)  reg3 (g+8, 2t+8..)
//   B 16x8 : reg0 (k 2t..2t+1, n g)  reg1 (k 2t+8.., n g)
//   C 16x8 : c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// So the accumulators of two adjacent n8 tiles of S are exactly the A fragment of one k16 slice
// of P (FlashAttention-2's register reuse): P never goes through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attn/common.cuh"
#include "cuda/attn/tiles.h"

namespace fattn::cuda::attn {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// Shared address of the ldmatrix row this lane supplies for an A-style 16x16 block at (r0, c0) of
// a row-major tile (matrices: rows 0-7/8-15 × cols 0-7/8-15, in A-fragment register order).
template <int ST>
__device__ __forceinline__ uint32_t a_addr(const void *base, int r0, int c0, int lane, int esize) {
    return smem_u32(static_cast<const char *>(base) +
                    size_t((r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + c0 + (lane >> 4) * 8) * esize);
}
// Same for a B operand read from rows n (non-transposed): regs {0,1} = n-tile r0, {2,3} = r0 + 8.
template <int ST>
__device__ __forceinline__ uint32_t b_addr(const void *base, int r0, int c0, int lane, int esize) {
    return smem_u32(static_cast<const char *>(base) +
                    size_t((r0 + (lane & 7) + (lane >> 4) * 8) * ST + c0 + ((lane >> 3) & 1) * 8) * esize);
}
// Transposed B read from rows k (ldmatrix.trans): regs {0,1} = n-tile c0, {2,3} = c0 + 8.
// The lane-to-row map is the A-style one.

// Rows [0, ROWS) of a tile starting at g (row stride rstride) into shared s [ROWS, ST]; rows >=
// rows_valid and columns >= cols_valid are zero. vec: 16-byte cp.async (caller commits/waits);
// otherwise element loads (for views whose strides or pointers are not 16-byte aligned).
template <typename T, int ROWS, int DB>
__device__ __forceinline__ void mma_load_tile(T *s, const T *g, int64_t rstride, int64_t rows_valid,
                                              int64_t cols_valid, bool vec) {
    constexpr int ST = mma_stride(DB), CH = DB / 8;
    if (vec) {
        for (int e = threadIdx.x; e < ROWS * CH; e += mma_threads()) {
            const int r = e / CH, c = (e % CH) * 8;
            const bool ok = r < rows_valid && c < cols_valid;
            cp_async16(smem_u32(s + r * ST + c), ok ? static_cast<const void *>(g + r * rstride + c) : g,
                       ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < ROWS * DB; e += mma_threads()) {
            const int r = e / DB, c = e % DB;
            s[r * ST + c] = (r < rows_valid && c < cols_valid) ? g[r * rstride + c] : from_f<T>(0.f);
        }
    }
}

}  // namespace fattn::cuda::attn
