// attn_math_isa.h — the per-ISA bodies of attn_math.cpp: GEMM microkernel, vector exp, row and
// column helpers. NOT a normal header: attn_math.cpp includes it once per ISA, inside a namespace
// that first defines
//   kIsaName  the name fattn_cpu_isa() reports
//   kVW       floats per native vector register (4 SSE, 8 AVX2, 16 AVX-512)
//   kMR, kNV  the GEMM register block: kMR rows × kNV vectors of C stay in registers while k runs
// and optionally the macros FATTN_ISA_MIN / FATTN_ISA_VEC (the ISA's minps intrinsic and its type),
// and under a target pragma for that ISA, so every function (and template) below is compiled for
// it with vectors of its native width. A wider type than the ISA's registers (e.g. 16 floats on
// AVX2) has no register form: GCC then keeps the accumulators on the stack.
//
// Results do not depend on kVW or on the blocking: the GEMM sums k in order per element, exp is
// element-wise, and column sums run over keys in order.

// Register value, and the same type with alignment 4 for loads/stores straight from float arrays.
typedef float V __attribute__((vector_size(kVW * 4)));
typedef int32_t VI __attribute__((vector_size(kVW * 4)));
typedef uint32_t VUI __attribute__((vector_size(kVW * 4)));
typedef float VU __attribute__((vector_size(kVW * 4), aligned(4), may_alias));

inline __attribute__((always_inline)) V ld(const float *p) { return *reinterpret_cast<const VU *>(p); }
inline __attribute__((always_inline)) void st(float *p, V v) { *reinterpret_cast<VU *>(p) = v; }
// Broadcast (not V{} + x: adding 0 is not a no-op in IEEE arithmetic, so the compiler keeps it).
inline __attribute__((always_inline)) V splat(float x) {
    V v;
#pragma GCC unroll 16
    for (int l = 0; l < kVW; ++l) v[l] = x;
    return v;
}

// min(a, b) with a NaN b kept (a is a NaN-free constant): one minps, where the same select
// written with vector extensions compiles to a compare and a blend.
inline __attribute__((always_inline)) V min_keep_nan(V a, V b) {
#ifdef FATTN_ISA_MIN
    return reinterpret_cast<V>(FATTN_ISA_MIN(reinterpret_cast<FATTN_ISA_VEC>(a), reinterpret_cast<FATTN_ISA_VEC>(b)));
#else
    return a < b ? a : b;  // NaN b: the comparison is false, b is kept
#endif
}

// ---- GEMM ----

// kTransA: A is stored transposed ([K, M], element (r, k) at A[k * lda + r]) — lets the
// backward use Pᵀ / dSᵀ and the forward use Sᵀ without ever transposing a tile.
// kMax: also fold the column maxima of the block into cmax[0, W·kVW) (see gemm_nn_max).
template <int R, int W, bool kTransA, bool kMax = false>
inline __attribute__((always_inline)) void block(int K, const float *A, int64_t lda, const float *B,
                                                 int64_t ldb, float *C, int64_t ldc, bool accumulate,
                                                 float *cmax = nullptr) {
    V c[R][W];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int w = 0; w < W; ++w) c[r][w] = accumulate ? ld(C + r * ldc + w * kVW) : V{};
    for (int k = 0; k < K; ++k) {
        V b[W];
#pragma GCC unroll 16
        for (int w = 0; w < W; ++w) b[w] = ld(B + k * ldb + w * kVW);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const float a = kTransA ? A[k * lda + r] : A[r * lda + k];  // broadcast by the multiply
#pragma GCC unroll 16
            for (int w = 0; w < W; ++w) c[r][w] += a * b[w];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int w = 0; w < W; ++w) st(C + r * ldc + w * kVW, c[r][w]);
    if (kMax) {  // rows in order, `v > m ? v : m` from the running max: col_max's result exactly
#pragma GCC unroll 16
        for (int w = 0; w < W; ++w) {
            V m = ld(cmax + w * kVW);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) m = c[r][w] > m ? c[r][w] : m;
            st(cmax + w * kVW, m);
        }
    }
}

// Walks the lines of a TilePrefetch, a few per register block: `per_block` lines each step. The
// next tile goes to L2 (prefetcht1), not L1: at D128 it is as large as L1, and pulled into L1 it
// evicted the operands the GEMM is reading (AVX2, fwd S2048 D128, 1 thread, min of 6 alternated
// runs: 133 -> 127 ms).
struct PrefetchCursor {
    const char *base = nullptr;
    int64_t stride = 0, bytes = 0;
    int rows = 0, lines = 0, r = 0, l = 0, per_block = 0;
    PrefetchCursor(const TilePrefetch *pf, int blocks) {
        if (!pf || !pf->base || pf->rows <= 0 || pf->bytes <= 0) return;
        base = pf->base;
        stride = pf->stride;
        bytes = pf->bytes;
        rows = pf->rows;
        lines = int((bytes + 63) / 64) + 1;  // + 1: a row that does not start on a line
        per_block = (rows * lines + blocks - 1) / (blocks > 0 ? blocks : 1);
    }
    inline __attribute__((always_inline)) void step() {
        for (int i = 0; i < per_block && r < rows; ++i) {
            const char *row = base + int64_t(r) * stride;
            const int64_t off = int64_t(l) * 64 < bytes ? int64_t(l) * 64 : bytes - 1;
            __builtin_prefetch(row + off, 0, 2);  // to L2: L1 holds the tiles in use
            if (++l == lines) l = 0, ++r;
        }
    }
};

// Rows of one column panel (W vectors wide): kMR-row blocks, then 4-, 2- and 1-row tails. The
// 4-row tail keeps 8 accumulators in flight (two FMA ports × 4-cycle latency), so a 64-row tile
// on AVX2 (10 × 6 + 4) loses little to its tail.
template <int W, bool kTransA, bool kMax>
inline __attribute__((always_inline)) void panel(int M, int K, const float *A, int64_t lda,
                                                 const float *B, int64_t ldb, float *C, int64_t ldc,
                                                 bool accumulate, PrefetchCursor &pf, float *cmax) {
    const int64_t rstep = kTransA ? 1 : lda;  // distance between consecutive rows of A
    int i = 0;
    for (; i + kMR <= M; i += kMR) {
        pf.step();
        block<kMR, W, kTransA, kMax>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate, cmax);
    }
    if (kMR > 4)
        for (; i + 4 <= M; i += 4)
            block<4, W, kTransA, kMax>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate, cmax);
    for (; i + 2 <= M; i += 2)
        block<2, W, kTransA, kMax>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate, cmax);
    for (; i < M; ++i) block<1, W, kTransA, kMax>(K, A + i * rstep, lda, B, ldb, C + i * ldc, ldc, accumulate, cmax);
}

// Column panels outermost: one K × (kNV·kVW) panel of B is reused by every row block; kVW-wide
// panels for the rest of N (N is a multiple of kNR, hence of kVW). On AVX-512 (kNV = 4) such a
// panel has only kMR = 4 accumulators, half what the FMA ports need: a D of 80-112 or a partial
// q tile pays it on its last 16-48 columns (a 2-vector panel there made GCC spill loop bounds).
template <bool kTransA, bool kMax = false>
inline __attribute__((always_inline)) void gemm_body(int M, int N, int K, const float *A, int64_t lda,
                                                     const float *B, int64_t ldb, float *C,
                                                     int64_t ldc, bool accumulate, const TilePrefetch *tp,
                                                     float *cmax = nullptr) {
    const int panels = N / (kNV * kVW) + (N % (kNV * kVW)) / kVW;
    PrefetchCursor pf(tp, panels * (M / kMR > 0 ? M / kMR : 1));  // lines spread over full blocks
    int j0 = 0;
    for (; j0 + kNV * kVW <= N; j0 += kNV * kVW)
        panel<kNV, kTransA, kMax>(M, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate, pf, cmax + (kMax ? j0 : 0));
    for (; j0 < N; j0 += kVW)
        panel<1, kTransA, kMax>(M, K, A, lda, B + j0, ldb, C + j0, ldc, accumulate, pf, cmax + (kMax ? j0 : 0));
    pf.per_block = 1 << 30;  // small M (no full block): whatever is left, at the end
    pf.step();
}

// Entry points: not inlined, so each ISA's GEMM is one named function (scripts/check-spills.py
// reads their inner loops in the object file).
__attribute__((noinline)) void gemm_nn(int M, int N, int K, const float *A, int64_t lda, const float *B,
                                       int64_t ldb, float *C, int64_t ldc, bool accumulate,
                                       const TilePrefetch *pf) {
    gemm_body<false>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, pf);
}
__attribute__((noinline)) void gemm_tn(int M, int N, int K, const float *At, int64_t lda, const float *B,
                                       int64_t ldb, float *C, int64_t ldc, bool accumulate,
                                       const TilePrefetch *pf) {
    gemm_body<true>(M, N, K, At, lda, B, ldb, C, ldc, accumulate, pf);
}
// C (+)= A · B and cmax[j] = max over the M rows of the result's column j (col_max's semantics),
// in the same pass: the forward's Sᵀ tile needs its per-query maxima, and reading them from the
// registers saves a pass over the tile.
__attribute__((noinline)) void gemm_nn_max(int M, int N, int K, const float *A, int64_t lda,
                                           const float *B, int64_t ldb, float *C, int64_t ldc,
                                           bool accumulate, float *cmax, const TilePrefetch *pf) {
    for (int j = 0; j < N; ++j) cmax[j] = -__builtin_inff();
    gemm_body<false, true>(M, N, K, A, lda, B, ldb, C, ldc, accumulate, pf, cmax);
}

// ---- exp ----

// exp(x - shift) per lane: exp(t) = 2^k · e^r with k = round(t / ln2), r = t - k ln2 in
// [-ln2/2, ln2/2]; degree-6 Taylor for e^r (relative error ~1e-7, about 1 ulp). Below -87 the
// result would be subnormal: exactly 0, so masked (-inf) entries carry exactly zero probability.
// A NaN t (a NaN score, or +inf - +inf in a row whose max overflowed) gives NaN, so the row's
// sum and output are NaN (docs/CONTRACT.md, "Overflow and NaN"), never a silent 0.
// All selects are vector masks of the native width (a wider type would be split into scalars).
// Op count matters here (the forward's softmax is ~15% of its time): the clamps are written
// so that a NaN t passes through them (max/min with the constant first), k is read from the
// rounding sum's mantissa instead of a float→int conversion, and NaN needs no select of its own
// (every step of the polynomial carries it).
inline __attribute__((always_inline)) V exp_vec(V x, V shift) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-6f;
    const float round_magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    V t = x - shift;
    VI zero = t < -87.0f;  // -inf and underflow give exactly 0 (whatever the steps below make of them)
    V tc = min_keep_nan(splat(88.0f), t);  // the only clamp needed: k <= 127 keeps 2^k finite
    // y = k + round_magic exactly (|k| <= 127 < 2^22), so y's low mantissa bits hold k + 2^22.
    V y = tc * log2e + round_magic;
    V kf = y - round_magic;
    V r = tc - kf * ln2_hi;
    r = r - kf * ln2_lo;
    V p = splat(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^k: the exponent field k + 127 = the low 9 bits of (bits(y) + 127), since bits(y) =
    // bits(round_magic) + k and bits(round_magic)'s low 23 bits are 2^22, a multiple of 512.
    VUI bits;  // unsigned: the shift drops the high bits by design
    __builtin_memcpy(&bits, &y, sizeof bits);
    bits = (bits + 127u) << 23;
    V two_k;
    __builtin_memcpy(&two_k, &bits, sizeof two_k);
    return zero ? V{} : p * two_k;
}

// A tail of fewer than kVW lanes goes through the same vector code on a local copy, so every
// element is computed identically wherever it sits.
inline __attribute__((always_inline)) V ld_part(const float *p, int n) {
    float t[kVW] = {};
    for (int l = 0; l < n; ++l) t[l] = p[l];
    return ld(t);
}
inline __attribute__((always_inline)) void st_part(float *p, V v, int n) {
    float t[kVW];
    st(t, v);
    for (int l = 0; l < n; ++l) p[l] = t[l];
}

void exp_shift(const float *x, float shift, float *y, int n) {
    const V s = splat(shift);
    int j = 0;
    for (; j + kVW <= n; j += kVW) st(y + j, exp_vec(ld(x + j), s));
    if (j < n) st_part(y + j, exp_vec(ld_part(x + j, n - j), s), n - j);
}

// ---- rows ----

void scale_row(float *x, float a, int n) {
    const V va = splat(a);
    int j = 0;
    for (; j + kVW <= n; j += kVW) st(x + j, ld(x + j) * va);
    for (; j < n; ++j) x[j] *= a;
}

void dsoftmax_row(float *ds, const float *p, float delta, int n) {
    const V vd = splat(delta);
    int j = 0;
    for (; j + kVW <= n; j += kVW) st(ds + j, ld(p + j) * (ld(ds + j) - vd));
    for (; j < n; ++j) ds[j] = p[j] * (ds[j] - delta);
}

// ---- columns of [keys, queries] tiles ----

void col_max(const float *x, int64_t ld_, int nj, int n, float *mx) {
    int i = 0;
    for (; i + kVW <= n; i += kVW) {
        V m = splat(-__builtin_inff());
        for (int j = 0; j < nj; ++j) {
            V v = ld(x + j * ld_ + i);
            m = v > m ? v : m;
        }
        st(mx + i, m);
    }
    for (; i < n; ++i) {
        float m = -__builtin_inff();
        for (int j = 0; j < nj; ++j) m = x[j * ld_ + i] > m ? x[j * ld_ + i] : m;
        mx[i] = m;
    }
}

// y may alias x. Column sums run over j in order, one accumulator per column.
void col_exp_sum(const float *x, int64_t ld_, int nj, int n, const float *shift, float *y,
                 int64_t ldy, float *sum) {
    int i = 0;
    for (; i + kVW <= n; i += kVW) {
        const V s = ld(shift + i);
        V acc = V{};
        for (int j = 0; j < nj; ++j) {
            V e = exp_vec(ld(x + j * ld_ + i), s);
            st(y + j * ldy + i, e);
            acc += e;
        }
        st(sum + i, acc);
    }
    if (i < n) {
        const int m = n - i;
        const V s = ld_part(shift + i, m);
        V acc = V{};
        for (int j = 0; j < nj; ++j) {
            V e = exp_vec(ld_part(x + j * ld_ + i, m), s);
            st_part(y + j * ldy + i, e, m);
            acc += e;
        }
        st_part(sum + i, acc, m);
    }
}

void col_scale(float *x, int64_t ld_, int nj, int n, const float *a) {
    int i = 0;
    for (; i + kVW <= n; i += kVW) {
        const V va = ld(a + i);
        for (int j = 0; j < nj; ++j) st(x + j * ld_ + i, ld(x + j * ld_ + i) * va);
    }
    for (; i < n; ++i)
        for (int j = 0; j < nj; ++j) x[j * ld_ + i] *= a[i];
}

// k block of the GEMM wrappers (attn_math.cpp): a B panel of kKBlock rows is at most 16 KiB.
constexpr int kKBlock = 16384 / (kNV * kVW * 4);
const MathKernels kKernels = {kIsaName, kKBlock, gemm_nn, gemm_tn, gemm_nn_max, exp_shift, scale_row, dsoftmax_row,
                              col_max, col_exp_sum, col_scale};

// the including ISA block's parameters end here (the next block defines its own)
#undef FATTN_ISA_MIN
#undef FATTN_ISA_VEC
