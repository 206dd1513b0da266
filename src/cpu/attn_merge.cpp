// attn_merge.cpp — CPU kernel of fattn_attn_merge (see attn_merge.h and fattn.h).
//
// Per row, with the running (acc_o, acc_lse) started by the first part whose lse is not -inf:
//   m = max(acc_lse, l); wa = exp(acc_lse - m); wb = exp(l - m); t = wa + wb
//   acc_lse = m + log(t);  acc_o = acc_o * (wa / t) + o * (wb / t)
// A part whose lse is -inf contributes nothing (its o is not read); a row where every part is
// -inf gives o = 0, lse = -inf. NaN propagates. The products and the sum are separate roundings
// (no fused multiply-add), so the result is the same on every CPU ISA of one compiler.
#include "cpu/attn_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/parallel.h"

namespace fattn::cpu {
namespace {

constexpr int kCols = 256;  // columns of a row kept in one pass (the weights are recomputed per pass)

template <fattn_dtype T>
inline float ld(const void *base, int64_t i) {
    return load_f32(base, T, i);
}

template <fattn_dtype T>
void start(float *acc, const void *o, int64_t off, int n) {
    for (int j = 0; j < n; ++j) acc[j] = ld<T>(o, off + j);
}

template <fattn_dtype T>
void fold(float *acc, const void *o, int64_t off, int n, float a, float b) {
    for (int j = 0; j < n; ++j) {
        const float x = acc[j] * a;
        const float y = ld<T>(o, off + j) * b;
        acc[j] = x + y;
    }
}

void start_any(float *acc, const MergePart &q, int64_t off, int n) {
    switch (q.dtype) {
    case FATTN_F32: start<FATTN_F32>(acc, q.o, off, n); return;
    case FATTN_F16: start<FATTN_F16>(acc, q.o, off, n); return;
    default: start<FATTN_BF16>(acc, q.o, off, n); return;
    }
}

void fold_any(float *acc, const MergePart &q, int64_t off, int n, float a, float b) {
    switch (q.dtype) {
    case FATTN_F32: fold<FATTN_F32>(acc, q.o, off, n, a, b); return;
    case FATTN_F16: fold<FATTN_F16>(acc, q.o, off, n, a, b); return;
    default: fold<FATTN_BF16>(acc, q.o, off, n, a, b); return;
    }
}

void merge_row(const MergeParams &p, int64_t row) {
    const int64_t h = row % p.heads, s = (row / p.heads) % p.seq, b = row / (p.heads * p.seq);
    const float ninf = -std::numeric_limits<float>::infinity();
    float acc[kCols];
    const int64_t dv = p.dim_v;
    // Dv == 0: one pass all the same, for lse.
    for (int64_t d0 = 0; d0 < std::max<int64_t>(dv, 1); d0 += kCols) {
        const int n = int(std::min<int64_t>(kCols, dv - d0));
        bool started = false;
        float L = ninf;
        for (int64_t i = 0; i < p.n_parts; ++i) {
            const MergePart &q = p.parts[i];
            const float l = q.lse[b * q.lse_sb + h * q.lse_sh + s];
            if (l == ninf) continue;
            const int64_t off = b * q.o_sb + s * q.o_ss + h * q.o_sh + d0;
            if (!started) {
                start_any(acc, q, off, n);
                L = l;
                started = true;
                continue;
            }
            const float m = L >= l ? L : l;  // l NaN: m NaN; L NaN: exp(NaN) below
            const float wa = std::exp(L - m), wb = std::exp(l - m);
            const float t = wa + wb;
            fold_any(acc, q, off, n, wa / t, wb / t);
            L = m + std::log(t);
        }
        if (!started) std::fill(acc, acc + std::max(n, 0), 0.0f);
        const int64_t out = b * p.o_sb + s * p.o_ss + h * p.o_sh + d0;
        for (int j = 0; j < n; ++j) store_f32(p.o, p.o_dtype, out + j, acc[j]);
        if (d0 == 0) p.lse[b * p.lse_sb + h * p.lse_sh + s] = L;
    }
}

}  // namespace

void attn_merge(const MergeParams &p) {
    const int64_t rows = p.batch * p.seq * p.heads;
    if (rows <= 0) return;
    // Tasks of whole rows, about 16K output elements each; a row belongs to one task.
    const int64_t per = std::max<int64_t>(1, 16384 / std::max<int64_t>(p.dim_v * p.n_parts, 1));
    const int64_t ntasks = (rows + per - 1) / per;
    parallel_for(ntasks, p.nthreads, [&](int64_t t) {
        const int64_t r1 = std::min(rows, (t + 1) * per);
        for (int64_t r = t * per; r < r1; ++r) merge_row(p, r);
    });
}

}  // namespace fattn::cpu
