// attn_math.cpp — the inner loops of the CPU attention kernels: the GEMM microkernel (plain and
// transposed A), a vectorizable exp and per-query (column) max / exp / sum.
//
// Plain C++ with GCC/Clang vector types (16 floats); element-wise functions are compiled for
// AVX-512, AVX2+FMA and baseline x86-64 (target_clones), the GEMM per ISA with its own register
// block; both are picked once by the CPU, so the library needs no -march flag. Results are
// deterministic on one machine: every reduction has a fixed order that does not depend on the
// vector width (the GEMM sums k in order per element, column sums run over keys in order).
// Different ISAs may differ in the last bit (the baseline clone has no FMA).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/attn_impl.h"

// The vector helpers below are always inlined, so the AVX-512 "ABI changes" note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
#define FATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FATTN_CLONES
#endif

namespace fattn::cpu::detail {

namespace {

// One kNR-float vector (GCC/Clang vector extension): 4 SSE, 2 AVX2 or 1 AVX-512 register
// depending on the clone. aligned(4) + may_alias: loads/stores straight from float arrays.
typedef float vf __attribute__((vector_size(kNR * 4), aligned(4), may_alias));
typedef int32_t vi __attribute__((vector_size(kNR * 4), aligned(4), may_alias));

// kTransA: A is stored transposed ([K, M], element (r, k) at A[k * lda + r]) — lets the
// backward use Pᵀ / dSᵀ and the forward use Sᵀ without ever transposing a tile.
// Register block: R rows × W·kNR columns of C stay in registers while k runs.
template <int R, int W, bool kTransA>
inline __attribute__((always_inline)) void block(int K, const float *A, int64_t lda, const float *B,
                                                 int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    vf c[R][W];
    for (int r = 0; r < R; ++r)
        for (int w = 0; w < W; ++w)
            c[r][w] = accumulate ? *reinterpret_cast<const vf *>(C + r * ldc + w * kNR) : vf{};
    for (int k = 0; k < K; ++k) {
        vf b[W];
        for (int w = 0; w < W; ++w) b[w] = *reinterpret_cast<const vf *>(B + k * ldb + w * kNR);
        for (int r = 0; r < R; ++r) {
            float a = kTransA ? A[k * lda + r] : A[r * lda + k];
            for (int w = 0; w < W; ++w) c[r][w] += a * b[w];
        }
    }
    for (int r = 0; r < R; ++r)
        for (int w = 0; w < W; ++w) *reinterpret_cast<vf *>(C + r * ldc + w * kNR) = c[r][w];
}

// Rows of one column panel (W vectors wide): MR-row blocks, then 2- and 1-row tails.
template <int MR, int W, bool kTransA>
inline __attribute__((always_inline)) void panel(int M, int K, const float *A, int64_t lda,
                                                 const float *B, int64_t ldb, float *C, int64_t ldc,
                                                 bool accumulate) {
    const int64_t rstep = kTransA ? 1 : lda;  // distance between consecutive rows of A
    int i = 0;
    for (; i + MR <= M; i += MR) block<MR, W, kTransA>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate);
    for (; i + 2 <= M; i += 2) block<2, W, kTransA>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate);
    for (; i < M; ++i) block<1, W, kTransA>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate);
}

// Column panels outermost: one K × (W·kNR) panel of B is reused by every row block; a last
// kNR-wide panel when N is not a multiple of W·kNR. Each C element sums k in order whatever the
// blocking, so the choice of (MR, W) never changes a result.
template <int MR, int W, bool kTransA>
inline __attribute__((always_inline)) void gemm_body(int M, int N, int K, const float *A, int64_t lda,
                                                     const float *B, int64_t ldb, float *C,
                                                     int64_t ldc, bool accumulate) {
    int j0 = 0;
    for (; j0 + W * kNR <= N; j0 += W * kNR)
        panel<MR, W, kTransA>(M, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate);
    for (; j0 < N; j0 += kNR) panel<MR, 1, kTransA>(M, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate);
}

// exp(x - shift) for one vector; see exp_shift.
inline __attribute__((always_inline)) vf exp_vec(vf x, vf shift) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-6f;
    const float round_magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    vf t = x - shift;
    vi zero = !(t >= -87.0f);  // -inf and underflow (and NaN) give exactly 0
    vf tc = t > 88.0f ? vf{} + 88.0f : t;
    tc = zero ? vf{} : tc;
    vf kf = (tc * log2e + round_magic) - round_magic;
    vf r = tc - kf * ln2_hi;
    r = r - kf * ln2_lo;
    vf p = vf{} + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vi bits = (__builtin_convertvector(kf, vi) + 127) << 23;
    vf two_k = reinterpret_cast<vf &>(bits);
    return zero ? vf{} : p * two_k;
}

// The GEMM is compiled per ISA with its own register block (a target_clones body cannot differ
// per clone) and picked once by CPU feature:
//   AVX-512: 8 × 32 (16 zmm accumulators: two FMA ports × 4-cycle latency need >= 8 in flight)
//   AVX2:    6 × 16 (12 ymm accumulators of the 16 registers)
//   baseline 4 × 16
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define FATTN_GEMM_DISPATCH 1
template <bool kTransA>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void gemm_avx512(int M, int N, int K, const float *A, int64_t lda,
                                                            const float *B, int64_t ldb, float *C,
                                                            int64_t ldc, bool accumulate) {
    gemm_body<8, 2, kTransA>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
template <bool kTransA>
__attribute__((target("avx2,fma"))) void gemm_avx2(int M, int N, int K, const float *A, int64_t lda,
                                                   const float *B, int64_t ldb, float *C, int64_t ldc,
                                                   bool accumulate) {
    gemm_body<6, 1, kTransA>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
#endif
template <bool kTransA>
void gemm_base(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
               int64_t ldc, bool accumulate) {
    gemm_body<4, 1, kTransA>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

using GemmFn = void (*)(int, int, int, const float *, int64_t, const float *, int64_t, float *,
                        int64_t, bool);

template <bool kTransA>
GemmFn pick_gemm() {
#ifdef FATTN_GEMM_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return gemm_avx512<kTransA>;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return gemm_avx2<kTransA>;
#endif
    return gemm_base<kTransA>;
}

}  // namespace

void gemm(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
          int64_t ldc, bool accumulate) {
    static const GemmFn fn = pick_gemm<false>();
    fn(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_tn(int M, int N, int K, const float *At, int64_t lda, const float *B, int64_t ldb,
             float *C, int64_t ldc, bool accumulate) {
    static const GemmFn fn = pick_gemm<true>();
    fn(M, N, K, At, lda, B, ldb, C, ldc, accumulate);
}

FATTN_CLONES
void exp_shift(const float *x, float shift, float *y, int n) {
    // exp(t) = 2^k · e^r with k = round(t / ln2), r = t - k ln2 in [-ln2/2, ln2/2]; degree-6
    // Taylor for e^r (relative error ~1e-7, about 1 ulp). Below -87 the result would be
    // subnormal: return exactly 0 so masked (-inf) entries carry exactly zero probability.
    // The tail goes through the same vector code (via a local copy), so every element of a row
    // is computed identically wherever it sits.
    int j = 0;
    for (; j + kNR <= n; j += kNR)
        *reinterpret_cast<vf *>(y + j) = exp_vec(*reinterpret_cast<const vf *>(x + j), vf{} + shift);
    if (j < n) {
        float tmp[kNR] = {};
        for (int l = 0; l < n - j; ++l) tmp[l] = x[j + l];
        vf e = exp_vec(*reinterpret_cast<const vf *>(tmp), vf{} + shift);
        for (int l = 0; l < n - j; ++l) y[j + l] = e[l];
    }
}

FATTN_CLONES
void scale_row(float *x, float a, int n) {
    for (int j = 0; j < n; ++j) x[j] *= a;
}

FATTN_CLONES
void dsoftmax_row(float *ds, const float *p, float delta, int n) {
    for (int j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta);
}

// ---- column (per-query) helpers for tiles stored keys × queries ----

FATTN_CLONES
void col_max(const float *x, int64_t ld, int nj, int n, float *mx) {
    for (int i = 0; i < n; ++i) mx[i] = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < nj; ++j) {
        const float *row = x + j * ld;
        for (int i = 0; i < n; ++i) mx[i] = row[i] > mx[i] ? row[i] : mx[i];
    }
}

FATTN_CLONES
void col_exp_sum(const float *x, int64_t ld, int nj, int n, const float *shift, float *y,
                 int64_t ldy, float *sum) {
    for (int i = 0; i < n; ++i) sum[i] = 0.0f;
    for (int j = 0; j < nj; ++j) {
        const float *xr = x + j * ld;
        float *yr = y + j * ldy;
        int i = 0;
        for (; i + kNR <= n; i += kNR) {
            vf e = exp_vec(*reinterpret_cast<const vf *>(xr + i), *reinterpret_cast<const vf *>(shift + i));
            *reinterpret_cast<vf *>(yr + i) = e;
            *reinterpret_cast<vf *>(sum + i) += e;
        }
        if (i < n) {  // same vector code on a local copy: a column's bits never depend on n
            float tx[kNR] = {}, ts[kNR] = {};
            for (int l = 0; l < n - i; ++l) tx[l] = xr[i + l], ts[l] = shift[i + l];
            vf e = exp_vec(*reinterpret_cast<const vf *>(tx), *reinterpret_cast<const vf *>(ts));
            for (int l = 0; l < n - i; ++l) yr[i + l] = e[l], sum[i + l] += e[l];
        }
    }
}

FATTN_CLONES
void col_scale(float *x, int64_t ld, int nj, int n, const float *a) {
    for (int j = 0; j < nj; ++j)
        for (int i = 0; i < n; ++i) x[j * ld + i] *= a[i];
}

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
