// mma.cuh — the PTX building blocks of the tensor-core kernels (sm_80+): cp.async 16-byte copies
// with zero fill, ldmatrix (plain and transposed), mma.sync.m16n8k16 for bf16/f16 and m16n8k8 for
// tf32 with fp32 accumulation, the fragment policy MmaOp<T> the kernels are written against, and
// the shared-memory tile loader.
//
// Fragment maps of m16n8k16 (g = lane / 4, t = lane % 4), from the PTX ISA:
//   A 16x16: reg0 (g, 2t..2t+1)  reg1 (g+8, 2t..)  reg2 (g, 2t+8..)  reg3 (g+8, 2t+8..)
//   B 16x8 : reg0 (k 2t..2t+1, n g)  reg1 (k 2t+8.., n g)
//   C 16x8 : c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// So the accumulators of two adjacent n8 tiles of S are exactly the A fragment of one k16 slice
// of P (FlashAttention-2's register reuse): P never goes through shared memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/attn/common.cuh"
#include "cuda/attn/tiles.h"

namespace fattn::cuda::attn {

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 4-byte variant (cp.async.ca: .cg takes 16 bytes only), for per-row f32 values such as lse.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
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
__device__ __forceinline__ void mma1688_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
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

// 2^x on the SFU (ex2.approx.ftz: ~2 ulp, -inf -> +0). The tensor-core paths round P to
// bf16/f16/tf32 right after, so the accurate exp2f's extra instructions buy nothing there.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
#else
// The CPU emulation (emu.h): a shared address is the offset into the block's buffer.
inline uint32_t smem_u32(const void *p) { return uint32_t(static_cast<const char *>(p) - emu::smem()); }
inline void cp_async16(uint32_t dst, const void *src, int src_bytes) { emu::cp16(emu::smem() + dst, src, src_bytes); }
inline void cp_async4(uint32_t dst, const void *src, int src_bytes) { emu::cp4(emu::smem() + dst, src, src_bytes); }
inline void cp_async_commit() { emu::cp_commit(); }
template <int N> inline void cp_async_wait() { emu::cp_wait(N); }
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { emu::ldsm4(r, emu::smem() + addr, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { emu::ldsm4(r, emu::smem() + addr, true); }
template <typename T> inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu::mma(c, a, b0, b1, std::is_same<T, __half>::value ? emu::MMA_F16 : emu::MMA_BF16);
}
inline void mma1688_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu::mma(c, a, b0, b1, emu::MMA_TF32);
}
template <typename T> inline uint32_t pack2(float lo, float hi) {
    const T a = from_f<T>(lo), b = from_f<T>(hi);
    return uint32_t(a.bits) | uint32_t(b.bits) << 16;
}
inline float fast_exp2(float x) { return exp2f(x); }
inline uint32_t to_tf32(float x) { return emu::f32_to_tf32_bits(x); }
#endif

// Shared address of the ldmatrix row this lane supplies for an A-style 16x16 block at (r0, c0) of
// a row-major tile (matrices: rows 0-7/8-15 × cols 0-7/8-15, in A-fragment register order).
template <int ST, typename E>
__device__ __forceinline__ uint32_t a_addr(const E *base, int r0, int c0, int lane) {
    return smem_u32(base + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + c0 + (lane >> 4) * 8);
}
// Same for a B operand read from rows n (non-transposed): regs {0,1} = n-tile r0, {2,3} = r0 + 8.
template <int ST, typename E>
__device__ __forceinline__ uint32_t b_addr(const E *base, int r0, int c0, int lane) {
    return smem_u32(base + (r0 + (lane & 7) + (lane >> 4) * 8) * ST + c0 + ((lane >> 3) & 1) * 8);
}

// MmaOp<T>: the fragment policy one kernel body is written against. K = the mma's k depth.
//   load_a  (a, tile, r0, k0): A fragment of rows r0..r0+15, cols k0..k0+K-1 of a row-major tile
//   load_b2 (b, tile, n0, k0): B fragments of n-tiles n0 and n0+8 from a tile whose rows are n
//                              (b[0..1] and b[2..3]); B[k][n] = tile[n][k]
//   load_bt2(b, tile, k0, n0): same from a tile whose rows are k; B[k][n] = tile[k][n]
//   a_from_acc(a, s, kk)     : A fragment of the kk-th K-wide column slice of accumulators s
//   mma(c, a, b0, b1)
template <typename T> struct MmaOp;

// bf16/f16: m16n8k16 with ldmatrix; two adjacent accumulator n-tiles are one A fragment.
template <typename T> struct MmaOp16 {
    static constexpr int K = 16;
    template <int ST> __device__ static void load_a(uint32_t (&a)[4], const T *t, int r0, int k0, int lane) {
        ldsm_x4(a, a_addr<ST>(t, r0, k0, lane));
    }
    template <int ST> __device__ static void load_b2(uint32_t (&b)[4], const T *t, int n0, int k0, int lane) {
        ldsm_x4(b, b_addr<ST>(t, n0, k0, lane));
    }
    template <int ST> __device__ static void load_bt2(uint32_t (&b)[4], const T *t, int k0, int n0, int lane) {
        ldsm_x4_t(b, a_addr<ST>(t, k0, n0, lane));
    }
    template <int N> __device__ static void a_from_acc(uint32_t (&a)[4], const float (&s)[N][4], int kk, int) {
        a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        mma16816<T>(c, a, b0, b1);
    }
};
template <> struct MmaOp<__nv_bfloat16> : MmaOp16<__nv_bfloat16> {};
template <> struct MmaOp<__half> : MmaOp16<__half> {};

// f32 inputs: tf32 m16n8k8 (round-to-nearest into tf32 on the way to the tensor core). Maps:
//   A 16x8: a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4);  B 8x8: b0 (k t, n g)  b1 (k t+4, n g)
// The A map is NOT the accumulator map (LESSONS.md): a_from_acc moves values with shuffles.
template <> struct MmaOp<float> {
    static constexpr int K = 8;
    template <int ST> __device__ static void load_a(uint32_t (&a)[4], const float *t, int r0, int k0, int lane) {
        // ldmatrix on 32-bit data: each 8x8 b16 matrix is 8 rows × 4 floats and hands lane
        // (g, t) the float (g, t) — exactly the tf32 A map, one matrix per register.
        ldsm_x4(a, smem_u32(t + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + k0 + (lane >> 4) * 4));
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = to_tf32(__uint_as_float(a[i]));
    }
    template <int ST> __device__ static void load_b2(uint32_t (&b)[4], const float *t, int n0, int k0, int lane) {
        ldsm_x4(b, smem_u32(t + (n0 + (lane & 7) + (lane >> 4) * 8) * ST + k0 + ((lane >> 3) & 1) * 4));
#pragma unroll
        for (int i = 0; i < 4; ++i) b[i] = to_tf32(__uint_as_float(b[i]));
    }
    template <int ST> __device__ static void load_bt2(uint32_t (&b)[4], const float *t, int k0, int n0, int lane) {
        const int g = lane >> 2, q = lane & 3;
        const float *p = t + (k0 + q) * ST + n0 + g;
        b[0] = to_tf32(p[0]);
        b[1] = to_tf32(p[4 * ST]);
        b[2] = to_tf32(p[8]);
        b[3] = to_tf32(p[4 * ST + 8]);
    }
    // Lane (g, t) needs columns t and t+4 of n-tile kk; the accumulator holds columns 2t', 2t'+1
    // at lane (g, t'), so they come from lanes (g, t/2) and (g, t/2 + 2), element t & 1.
    template <int N> __device__ static void a_from_acc(uint32_t (&a)[4], const float (&s)[N][4], int kk, int lane) {
        const int src1 = (lane & ~3) | ((lane & 3) >> 1), src2 = src1 + 2;
        const bool odd = lane & 1;
        float x0 = __shfl_sync(0xffffffffu, s[kk][0], src1), x1 = __shfl_sync(0xffffffffu, s[kk][1], src1);
        float y0 = __shfl_sync(0xffffffffu, s[kk][2], src1), y1 = __shfl_sync(0xffffffffu, s[kk][3], src1);
        a[0] = to_tf32(odd ? x1 : x0);
        a[1] = to_tf32(odd ? y1 : y0);
        x0 = __shfl_sync(0xffffffffu, s[kk][0], src2);
        x1 = __shfl_sync(0xffffffffu, s[kk][1], src2);
        y0 = __shfl_sync(0xffffffffu, s[kk][2], src2);
        y1 = __shfl_sync(0xffffffffu, s[kk][3], src2);
        a[2] = to_tf32(odd ? x1 : x0);
        a[3] = to_tf32(odd ? y1 : y0);
    }
    __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        mma1688_tf32(c, a, b0, b1);
    }
};

// Rows [0, ROWS) of a tile starting at g (row stride rstride) into shared s [ROWS, ST]; rows >=
// rows_valid and columns >= cols_valid are zero; NT = the CTA's threads (compile-time, so the
// copy loop unrolls). vec: 16-byte cp.async (caller commits/waits);
// otherwise element loads (for views whose strides or pointers are not 16-byte aligned).
template <typename T, int ROWS, int DB, int NT>
__device__ __forceinline__ void mma_load_tile(T *s, const T *g, int64_t rstride, int64_t rows_valid,
                                              int64_t cols_valid, bool vec) {
    constexpr int EPC = 16 / int(sizeof(T)), ST = mma_stride(DB, sizeof(T)), CH = DB / EPC;
    if (vec) {
        for (int e = threadIdx.x; e < ROWS * CH; e += NT) {
            const int r = e / CH, c = (e % CH) * EPC;
            const bool ok = r < rows_valid && c < cols_valid;
            cp_async16(smem_u32(s + r * ST + c), ok ? static_cast<const void *>(g + r * rstride + c) : g,
                       ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < ROWS * DB; e += NT) {
            const int r = e / DB, c = e % DB;
            s[r * ST + c] = (r < rows_valid && c < cols_valid) ? g[r * rstride + c] : from_f<T>(0.f);
        }
    }
}

}  // namespace fattn::cuda::attn
