// dev.cuh — what a PaTH kernel body may use besides plain C++: thread and block ids, barriers,
// warp shuffles, ldmatrix, mma.sync (bf16/f16 m16n8k16, tf32 m16n8k8), cp.async, the 16-bit
// storage types and conversions, exp2. Compiled by nvcc these are the CUDA intrinsics and PTX;
// compiled by a host compiler they are the CPU emulation of src/emu (emu.h), so the same kernel
// source runs on the CPU against the float64 oracle (tests/test_path_emu.cpp).
//
// Rules for kernel code: shared memory is the dynamic buffer the body receives; every warp-level
// primitive is called by all 32 lanes (convergent); no other CUDA API in kernel bodies.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define PK_DEV __device__ __forceinline__
#define PK_HD __host__ __device__ __forceinline__
#else
#include <cmath>

#include "emu/emu.h"
#define PK_DEV inline
#define PK_HD inline
#endif

namespace fattn::pathk {

// ---- 16-bit storage types ----
#if defined(__CUDACC__)
using f16_t = __half;
using bf16_t = __nv_bfloat16;
#else
struct f16_t {
    uint16_t bits;
};
struct bf16_t {
    uint16_t bits;
};
#endif
}  // namespace fattn::pathk

#if !defined(__CUDACC__)
template <> struct fattn::emu::MmaKindOf<fattn::pathk::f16_t> {
    static constexpr MmaKind kind = MMA_F16;
};
template <> struct fattn::emu::MmaKindOf<fattn::pathk::bf16_t> {
    static constexpr MmaKind kind = MMA_BF16;
};
#endif

namespace fattn::pathk {

PK_DEV float to_f(float x) { return x; }
#if defined(__CUDACC__)
PK_DEV float to_f(f16_t x) { return __half2float(x); }
PK_DEV float to_f(bf16_t x) { return __bfloat162float(x); }
template <typename T> PK_DEV T from_f(float x);
template <> PK_DEV float from_f<float>(float x) { return x; }
template <> PK_DEV f16_t from_f<f16_t>(float x) { return __float2half_rn(x); }
template <> PK_DEV bf16_t from_f<bf16_t>(float x) { return __float2bfloat16_rn(x); }
#else
PK_DEV float to_f(f16_t x) { return emu::f16_bits_to_f32(x.bits); }
PK_DEV float to_f(bf16_t x) { return emu::bf16_bits_to_f32(x.bits); }
template <typename T> PK_DEV T from_f(float x);
template <> PK_DEV float from_f<float>(float x) { return x; }
template <> PK_DEV f16_t from_f<f16_t>(float x) { return f16_t{emu::f32_to_f16_bits(x)}; }
template <> PK_DEV bf16_t from_f<bf16_t>(float x) { return bf16_t{emu::f32_to_bf16_bits(x)}; }
#endif

// Two floats as one 32-bit register of T (lo in the low half: the lower column/k index).
template <typename T> PK_DEV uint32_t pack2(float lo, float hi) {
    T a = from_f<T>(lo), b = from_f<T>(hi);
    uint16_t x, y;
    std::memcpy(&x, &a, 2);
    std::memcpy(&y, &b, 2);
    return uint32_t(x) | uint32_t(y) << 16;
}

PK_DEV float as_float(uint32_t u) {
#if defined(__CUDACC__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

PK_DEV uint32_t to_tf32(float x) {
#if defined(__CUDACC__)
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#else
    return emu::f32_to_tf32_bits(x);
#endif
}

// x rounded to tf32 (as an f32): for tiles read only as tf32 operands, rounded once when stored.
PK_DEV float tf32_round(float x) { return as_float(to_tf32(x)); }

// ---- ids, barriers ----
#if defined(__CUDACC__)
PK_DEV int tid() { return int(threadIdx.x); }
PK_DEV int bid_x() { return int(blockIdx.x); }
PK_DEV int bid_y() { return int(blockIdx.y); }
PK_DEV void sync() { __syncthreads(); }
PK_DEV int sync_or(int v) { return __syncthreads_or(v); }  // the barrier, then 1 if any thread passed non-zero
#else
PK_DEV int tid() { return emu::tid(); }
PK_DEV int bid_x() { return emu::bid(0); }
PK_DEV int bid_y() { return emu::bid(1); }
PK_DEV void sync() { emu::sync(); }
PK_DEV int sync_or(int v) { return emu::sync_or(v); }
#endif
PK_DEV int lane_id() { return tid() & 31; }
PK_DEV int warp_id() { return tid() >> 5; }

// ---- warp shuffles (full mask) ----
PK_DEV float shfl(float v, int src) {
#if defined(__CUDACC__)
    return __shfl_sync(0xffffffffu, v, src);
#else
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = emu::shfl(u, src);
    float r;
    std::memcpy(&r, &u, 4);
    return r;
#endif
}
PK_DEV float shfl_xor(float v, int mask) { return shfl(v, lane_id() ^ mask); }

// ---- ldmatrix (this lane supplies the row address for matrix lane/8, row lane%8) ----
PK_DEV void ldsm4(uint32_t (&r)[4], const void *row) {
#if defined(__CUDACC__)
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
    emu::ldsm4(r, row, false);
#endif
}
PK_DEV void ldsm4_t(uint32_t (&r)[4], const void *row) {
#if defined(__CUDACC__)
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
    emu::ldsm4(r, row, true);
#endif
}

// ---- mma.sync, f32 accumulate: c += a b ----
// m16n8k16 (T = f16_t / bf16_t) fragment maps (g = lane / 4, t = lane % 4):
//   A: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B: b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)        C: c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..)
// m16n8k8 tf32: A: a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4);  B: b0 (k t, n g) b1 (k t+4, n g)
template <typename T> PK_DEV void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> PK_DEV void mma<bf16_t>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDACC__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    emu::mma(c, a, b0, b1, emu::MMA_BF16);
#endif
}
template <> PK_DEV void mma<f16_t>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDACC__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    emu::mma(c, a, b0, b1, emu::MMA_F16);
#endif
}
template <> PK_DEV void mma<float>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDACC__)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    emu::mma(c, a, b0, b1, emu::MMA_TF32);
#endif
}

// ---- plain 16-byte global loads ----
struct alignas(16) V16 {
    uint32_t w[4];
};
// Element e of a 16-byte vector holding elements of T, as f32 (memcpy: no type punning).
template <typename T> PK_DEV float v16_elem(const V16 &v, int e) {
    T x;
    std::memcpy(&x, reinterpret_cast<const char *>(v.w) + e * int(sizeof(T)), sizeof(T));
    return to_f(x);
}
PK_DEV V16 ld16(const void *g) {
#if defined(__CUDACC__)
    const uint4 v = *static_cast<const uint4 *>(g);
    return V16{{v.x, v.y, v.z, v.w}};
#else
    emu::check_align(g, 16, "ld16");
    V16 v;
    std::memcpy(&v, g, 16);
    return v;
#endif
}

// ---- a counter in global memory that orders CTAs (GPU scope) ----
// Spin until *c == v; later accesses are ordered after the read (acquire). The emulation runs blocks
// one after another: a value other than v there is reported as a deadlock.
PK_DEV void counter_wait_eq(const int *c, int v) {
#if defined(__CUDACC__)
    int x;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(x) : "l"(c) : "memory");
    } while (x != v);
#else
    emu::counter_wait_eq(c, v);
#endif
}
// *c += 1, ordered after this thread's earlier accesses (release).
PK_DEV void counter_release_inc(int *c) {
#if defined(__CUDACC__)
    asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(c) : "memory");
#else
    ++*c;
#endif
}

// One 16-byte store (g 16-byte aligned).
PK_DEV void st16(void *g, const V16 &v) {
#if defined(__CUDACC__)
    *static_cast<uint4 *>(g) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
    emu::check_align(g, 16, "st16");
    std::memcpy(g, &v, 16);
#endif
}

// Four f32 in one 16-byte store (g 16-byte aligned).
PK_DEV void st16f(float *g, float a, float b, float c, float d) {
#if defined(__CUDACC__)
    *reinterpret_cast<float4 *>(g) = make_float4(a, b, c, d);
#else
    emu::check_align(g, 16, "st16f");
    g[0] = a, g[1] = b, g[2] = c, g[3] = d;
#endif
}

// ---- cp.async (16 bytes, zero fill beyond src_bytes) ----
PK_DEV void cp16(void *smem, const void *gmem, int src_bytes) {
#if defined(__CUDACC__)
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
#else
    emu::cp16(smem, gmem, src_bytes);
#endif
}
PK_DEV void cp_commit() {
#if defined(__CUDACC__)
    asm volatile("cp.async.commit_group;\n" ::);
#else
    emu::cp_commit();
#endif
}
template <int N> PK_DEV void cp_wait() {
#if defined(__CUDACC__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
    emu::cp_wait(N);
#endif
}

// ---- integer atomics (order-independent results only) ----
PK_DEV void atomic_min_u64(unsigned long long *p, unsigned long long v) {
#if defined(__CUDACC__)
    atomicMin(p, v);
#else
    if (v < *p) *p = v;  // the emulation runs one thread at a time
#endif
}

// ---- math ----
// 2^x; -inf -> 0. (ex2.approx on the GPU: ~2 ulp, which the tensor-core roundings dominate.)
PK_DEV float exp2_fast(float x) {
#if defined(__CUDACC__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#else
    return std::exp2(x);
#endif
}
PK_DEV float log2_acc(float x) {
#if defined(__CUDACC__)
    return log2f(x);
#else
    return std::log2(x);
#endif
}
PK_DEV float fmax_(float a, float b) { return a > b ? a : b; }

}  // namespace fattn::pathk
