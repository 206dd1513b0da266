// attn_math.cpp — the inner loops of the CPU attention kernels (GEMM microkernel, vector exp,
// row and column helpers), compiled once per x86 ISA with vectors of that ISA's native width and
// picked once at first use by CPU feature, so the library needs no -march flag:
//
//   isa      vector        GEMM register block (C accumulators)
//   avx512   16 floats     4 × 64  (16 zmm of 32: two FMA ports × 4-cycle latency need >= 8;
//                                   26 µops per 16 FMAs where 8 × 32 took 30: the Xeon's 4-wide
//                                   rename kept 8 × 32 short of its FMA ports)
//   avx2      8 floats     6 × 16  (12 ymm of 16; 2 for B, 1 broadcast of A)
//   base      4 floats     4 × 8   (8 xmm of 16; SSE2 has no FMA: each step needs a product temp)
//
// The bodies live in attn_math_isa.h, included below inside one namespace per ISA under a target
// pragma (GCC: `#pragma GCC target`, Clang: `#pragma clang attribute`). Every function there,
// including the always-inline vector helpers, then carries the ISA's target, so vector arguments
// never cross from one target to another (Clang rejects that as an ABI change) and the vector
// types always have a register form (a 64-byte type under AVX2 is kept on the stack).
//
// FATTN_CPU_ISA=avx512|avx2|base (environment, read once) caps the choice below what the CPU has;
// tests use it to run the lower paths on a bigger machine. It never selects an ISA the CPU lacks.
//
// Results are deterministic on one machine: every reduction has a fixed order that does not
// depend on the vector width or the blocking. Different ISAs may differ in the last bit (the
// baseline has no FMA); avx2 and avx512 use the same FMA sequence per element.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#ifdef __SSE__
#include <immintrin.h>  // FATTN_ISA_MIN below (each ISA's intrinsic, used under its target)
#endif

#include "cpu/attn_impl.h"
#include "fattn/fattn.h"

// Sanitizer builds dispatch too (a plain function pointer, no ifunc), so ASan checks the AVX paths.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FATTN_X86_DISPATCH 1
#endif

namespace fattn::cpu::detail {

namespace {

using GemmFn = void (*)(int, int, int, const float *, int64_t, const float *, int64_t, float *,
                        int64_t, bool, const TilePrefetch *);
struct MathKernels {
    const char *isa;
    int k_block;  // see k_blocks below
    GemmFn gemm, gemm_tn;
    void (*gemm_max)(int, int, int, const float *, int64_t, const float *, int64_t, float *, int64_t,
                     bool, float *, const TilePrefetch *);
    void (*exp_shift)(const float *, float, float *, int);
    void (*scale_row)(float *, float, int);
    void (*dsoftmax_row)(float *, const float *, float, int);
    void (*col_max)(const float *, int64_t, int, int, float *);
    void (*col_exp_sum)(const float *, int64_t, int, int, const float *, float *, int64_t, float *);
    void (*col_scale)(float *, int64_t, int, int, const float *);
};

namespace isa_base {
constexpr const char *kIsaName = "base";
constexpr int kVW = 4, kMR = 4, kNV = 2;
#ifdef __SSE__
#define FATTN_ISA_MIN _mm_min_ps
#define FATTN_ISA_VEC __m128
#endif
#include "cpu/attn_math_isa.h"  // undefines FATTN_ISA_MIN / FATTN_ISA_VEC
}  // namespace isa_base

#ifdef FATTN_X86_DISPATCH
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace isa_avx2 {
constexpr const char *kIsaName = "avx2";
constexpr int kVW = 8, kMR = 6, kNV = 2;
#define FATTN_ISA_MIN _mm256_min_ps
#define FATTN_ISA_VEC __m256
#include "cpu/attn_math_isa.h"  // undefines FATTN_ISA_MIN / FATTN_ISA_VEC
}  // namespace isa_avx2
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#endif
namespace isa_avx512 {
constexpr const char *kIsaName = "avx512";
constexpr int kVW = 16, kMR = 4, kNV = 4;
#define FATTN_ISA_MIN(a, b) _mm512_maskz_min_ps(0xFFFF, a, b)  // _mm512_min_ps warns in GCC 12 (its undefined src)
#define FATTN_ISA_VEC __m512
#include "cpu/attn_math_isa.h"  // undefines FATTN_ISA_MIN / FATTN_ISA_VEC
}  // namespace isa_avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // FATTN_X86_DISPATCH

// The best ISA the CPU (and the OS: __builtin_cpu_supports checks the saved register state) has,
// capped by FATTN_CPU_ISA.
const MathKernels &pick() {
#ifdef FATTN_X86_DISPATCH
    const char *cap = std::getenv("FATTN_CPU_ISA");
    const int cap_level = !cap ? 2 : std::strcmp(cap, "base") == 0 ? 0 : std::strcmp(cap, "avx2") == 0 ? 1 : 2;
    __builtin_cpu_init();
    if (cap_level >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        return isa_avx512::kKernels;
    if (cap_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return isa_avx2::kKernels;
#endif
    return isa_base::kKernels;
}

const MathKernels &K() {
    static const MathKernels &k = pick();
    return k;
}

}  // namespace

const char *isa_name() { return K().isa; }

TilePrefetch tile_prefetch(const void *src, fattn_dtype t, int64_t rs, int rows, int cols) {
    const int64_t es = t == FATTN_F32 ? 4 : 2;
    TilePrefetch pf;
    pf.base = static_cast<const char *>(src);
    pf.stride = rs * es;
    pf.bytes = int64_t(cols) * es;
    pf.rows = rows;
    return pf;
}

// k is blocked by the ISA's k_block, so that every row block of a panel sweeps a B panel of at
// most 16 KiB, which stays in L1. It matters for AVX-512's 64-wide panels at K = 128 (D128's Sᵀ,
// S and dP GEMMs): a 32 KiB panel is all of L1 and was re-read from L2 by every 4-row block. AVX2
// (16-wide, k_block 256) and the baseline never split for D <= 256. C is stored after a k block
// and reloaded by the next: f32 stores are exact, so every element still sums k = 0..K-1 in order,
// bit for bit as one pass would. The prefetch tile's rows are shared out over the calls.
namespace {

TilePrefetch part_of(const TilePrefetch *pf, int b, int nkb) {
    if (!pf || !pf->base) return TilePrefetch();
    TilePrefetch r = *pf;
    const int r0 = int(int64_t(pf->rows) * b / nkb), r1 = int(int64_t(pf->rows) * (b + 1) / nkb);
    r.base = pf->base + int64_t(r0) * pf->stride;
    r.rows = r1 - r0;
    return r;
}

// fn(k0, kk, accumulate, last, prefetch part) per k block
template <class Fn>
void k_blocks(int K_, bool accumulate, const TilePrefetch *pf, Fn &&fn) {
    const int kb = K().k_block;
    if (K_ <= kb) return fn(0, K_, accumulate, true, pf);
    const int nkb = (K_ + kb - 1) / kb;
    for (int b = 0, k0 = 0; b < nkb; ++b, k0 += kb) {
        const TilePrefetch part = part_of(pf, b, nkb);
        fn(k0, b + 1 < nkb ? kb : K_ - k0, accumulate || b > 0, b + 1 == nkb, &part);
    }
}

}  // namespace

void gemm(int M, int N, int K_, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
          int64_t ldc, bool accumulate, const TilePrefetch *pf) {
    k_blocks(K_, accumulate, pf, [&](int k0, int kk, bool acc, bool, const TilePrefetch *part) {
        K().gemm(M, N, kk, A + k0, lda, B + int64_t(k0) * ldb, ldb, C, ldc, acc, part);
    });
}

void gemm_tn(int M, int N, int K_, const float *At, int64_t lda, const float *B, int64_t ldb,
             float *C, int64_t ldc, bool accumulate, const TilePrefetch *pf) {
    k_blocks(K_, accumulate, pf, [&](int k0, int kk, bool acc, bool, const TilePrefetch *part) {
        K().gemm_tn(M, N, kk, At + int64_t(k0) * lda, lda, B + int64_t(k0) * ldb, ldb, C, ldc, acc, part);
    });
}

void gemm_max(int M, int N, int K_, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
              int64_t ldc, float *cmax, const TilePrefetch *pf) {
    k_blocks(K_, false, pf, [&](int k0, int kk, bool acc, bool last, const TilePrefetch *part) {
        if (last)  // the maxima of the finished sums
            K().gemm_max(M, N, kk, A + k0, lda, B + int64_t(k0) * ldb, ldb, C, ldc, acc, cmax, part);
        else
            K().gemm(M, N, kk, A + k0, lda, B + int64_t(k0) * ldb, ldb, C, ldc, acc, part);
    });
}

void exp_shift(const float *x, float shift, float *y, int n) { K().exp_shift(x, shift, y, n); }
void scale_row(float *x, float a, int n) { K().scale_row(x, a, n); }
void dsoftmax_row(float *ds, const float *p, float delta, int n) { K().dsoftmax_row(ds, p, delta, n); }
void col_max(const float *x, int64_t ld, int nj, int n, float *mx) { K().col_max(x, ld, nj, n, mx); }
void col_exp_sum(const float *x, int64_t ld, int nj, int n, const float *shift, float *y,
                 int64_t ldy, float *sum) {
    K().col_exp_sum(x, ld, nj, n, shift, y, ldy, sum);
}
void col_scale(float *x, int64_t ld, int nj, int n, const float *a) { K().col_scale(x, ld, nj, n, a); }

void transpose(const float *src, int64_t lds, int rows, int cols, float *dst, int64_t ldd) {
    // 8 × 8 blocks keep both sides within a few cache lines.
    for (int r0 = 0; r0 < rows; r0 += 8)
        for (int c0 = 0; c0 < cols; c0 += 8) {
            int r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int c = c0; c < c1; ++c)
                for (int r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
        }
}

}  // namespace fattn::cpu::detail

extern "C" const char *fattn_cpu_isa(void) { return fattn::cpu::detail::isa_name(); }
