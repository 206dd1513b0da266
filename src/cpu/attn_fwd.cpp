// attn_fwd.cpp — fused (flash) forward of softmax attention on the CPU.
//
// One task per (sequence, query head, q tile of kBQ rows). It streams the kv tiles of its window,
// keeping a running max m and denominator l per row (online softmax) and an f32 accumulator of
// the unnormalized output; only O and LSE are written. Scores are computed transposed
// (Sᵀ = K Qᵀ, keys × queries): K and V tiles are then used as loaded, only the q tile is packed
// transposed (once per task), and the per-query max/exp/sum run as vector work across queries.
// Tiles outside the causal/window band are never visited, tiles the bias map marks all -inf are
// skipped. Every output element is produced by exactly one task in a fixed kv order, so results
// do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "cpu/attn_impl.h"

namespace fattn::cpu::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t fwd_tasks_of(const AttnFwdParams &p, const SeqRange &r) { return p.hq * cdiv(r.q_len, kBQ); }

}  // namespace

fattn_status fused_fwd(const AttnFwdParams &p, Workspace &ws, float *lse_rel) {
    TaskIndex ti;
    ti.build(p, fwd_tasks_of);
    SlotPool pool(ws.nslots);
    const int64_t dp = pad_n(p.d), dvp = pad_n(p.dim_v), group = p.group();
    const bool f32_in_place = p.dtype == FATTN_F32;  // K and V tiles read where they are

    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        const SeqRange r = seq_range(p, s);
        const int64_t nqt = cdiv(r.q_len, kBQ), nkt = cdiv(r.kv_len, kBK);
        const int64_t h = rem / nqt, qt = rem % nqt, hk = h / group;
        const int64_t i0 = qt * kBQ;
        const int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
        const float *cl = ceil_row(p, ws, r, h, i0);  // bias ceilings of the task's rows
        if (lse_rel && !std::any_of(cl, cl + rows, [](float c) { return !(std::fabs(c) <= kCeilExact); }))
            return;  // stats mode: lse − ceiling is exact for every row of this tile

        int slot = pool.acquire();
        FwdScratch sc = carve_fwd(p, ws.slots + size_t(slot) * ws.slot_bytes);

        // Qᵀ packed once per task; every kv tile then computes Sᵀ = K (scale·Q)ᵀ [bk, nq] with K
        // loaded as is, and the per-query softmax runs down the columns as vector work.
        const int nq = int(pad_n(rows));
        load_tile_t(elem(p.q, p.dtype, r.batch_index * p.q_sb + (r.q_begin + i0) * p.q_ss + h * p.q_sh),
                    p.dtype, p.q_ss, rows, int(p.d), sc.qt, sc.ldt);
        for (int64_t d = 0; d < p.d; ++d) scale_row(sc.qt + d * sc.ldt, p.scale, nq);
        std::fill(sc.m, sc.m + nq, kNegInf);
        std::fill(sc.l, sc.l + nq, 0.0f);
        std::fill(sc.acc, sc.acc + rows * dvp, 0.0f);

        // The band of kv tiles this q tile can see: from the first row's lo to the last row's hi.
        int64_t lo0, hi0, lo1, hi1;
        key_range(p, i0, r.q_len, r.kv_len, &lo0, &hi0);
        key_range(p, i0 + rows - 1, r.q_len, r.kv_len, &lo1, &hi1);
        int64_t kt_begin = std::max<int64_t>(lo0, 0) / kBK;
        int64_t kt_end = hi1 < 0 ? 0 : std::min(nkt, hi1 / kBK + 1);

        for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            if (!ws.map.active(s, h, qt, kt, nkt)) continue;
            if (tile_rows(p, r, i0, rows, j0, bk, sc.tr) == kTileSkip) continue;
            // f32 K is read in place (its rows are the Sᵀ GEMM's A rows, a few at a time); other
            // dtypes, and V always, are converted into the slot. V in place is the PV GEMM's B,
            // reused by every row block: at a token stride of 1-2 KiB its panel's rows share a few
            // L1 sets and thrash (packed V measured faster than in-place on AVX2 and AVX-512).
            const float *ka = sc.kr;
            int64_t ldk = dp;
            const void *ksrc = elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh);
            const void *vsrc = elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh);
            if (f32_in_place) ka = static_cast<const float *>(ksrc), ldk = p.k_ss;
            else load_tile(ksrc, p.dtype, p.k_ss, bk, int(p.d), 1.0f, sc.kr, dp);
            load_tile(vsrc, p.dtype, p.v_ss, bk, int(p.dim_v), 1.0f, sc.v, sc.ldv);
            // The next kv tile's K and V arrive while this one computes (see TilePrefetch).
            TilePrefetch pf_k, pf_v;
            if (kt + 1 < kt_end) {
                const int64_t j1 = j0 + kBK;
                const int bk1 = int(std::min<int64_t>(kBK, r.kv_len - j1));
                pf_k = tile_prefetch(elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j1) * p.k_ss + hk * p.k_sh),
                                     p.dtype, p.k_ss, bk1, int(p.d));
                pf_v = tile_prefetch(elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j1) * p.v_ss + hk * p.v_sh),
                                     p.dtype, p.v_ss, bk1, int(p.dim_v));
            }
            if (p.bias) prefetch_bias(p, r, h, i0, rows, j0, bk);
            // Sᵀ = K (scale · Q)ᵀ   [bk, nq]; a tile every row sees whole (no bias, no key
            // outside a window) gets its per-query maxima from the GEMM's registers.
            bool whole = !p.bias;
            for (int i = 0; i < rows && whole; ++i) whole = sc.tr->a[i] == 0 && sc.tr->b[i] == bk;
            if (whole) {
                gemm_max(bk, nq, int(p.d), ka, ldk, sc.qt, sc.ldt, sc.st, sc.ldt, sc.mx, &pf_k);
            } else {
                gemm(bk, nq, int(p.d), ka, ldk, sc.qt, sc.ldt, sc.st, sc.ldt, false, &pf_k);
                for (int i = 0; i < rows; ++i) {  // bias, then -inf outside each query's window
                    int a = sc.tr->a[i], b = sc.tr->b[i];
                    if (a < b && p.bias)
                        add_bias_t(bias_at(p, r, h, i0 + i, j0), p.bias_dtype, sc.st + i, sc.ldt, a, b, cl[i]);
                    for (int j = 0; j < a; ++j) sc.st[j * sc.ldt + i] = kNegInf;
                    for (int j = std::max(a, b); j < bk; ++j) sc.st[j * sc.ldt + i] = kNegInf;
                }
                col_max(sc.st, sc.ldt, bk, nq, sc.mx);
            }
            // Online softmax per query: new max, rescale factor, probabilities, their sum.
            for (int i = 0; i < nq; ++i) {
                float m_new = std::max(sc.m[i], sc.mx[i]);
                sc.shift[i] = m_new == kNegInf ? 0.0f : m_new;  // all -inf so far: exp gives 0
                sc.alpha[i] = (sc.m[i] == kNegInf || sc.m[i] == m_new) ? 1.0f : std::exp(sc.m[i] - m_new);
                sc.m[i] = m_new;
            }
            col_exp_sum(sc.st, sc.ldt, bk, nq, sc.shift, sc.st, sc.ldt, sc.sum);
            for (int i = 0; i < rows; ++i) {
                if (sc.alpha[i] != 1.0f) {
                    sc.l[i] *= sc.alpha[i];
                    scale_row(sc.acc + i * dvp, sc.alpha[i], int(dvp));
                }
                sc.l[i] += sc.sum[i];
            }
            // acc += P V with P read from Pᵀ   [rows, dvp]
            gemm_tn(rows, int(dvp), bk, sc.st, sc.ldt, sc.v, sc.ldv, sc.acc, dvp, true, &pf_v);
        }

        // O = acc / l, LSE = ceiling + m + log l; a row that saw no key (l = 0): O = 0, LSE = -inf.
        // l is NaN after a +inf or NaN score: the test is l != 0 so that NaN reaches O and LSE
        // (docs/CONTRACT.md, "Overflow and NaN") instead of passing for a fully masked row.
        if (lse_rel) {  // stats mode: lse' only
            float *out = lse_rel + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;
            for (int i = 0; i < rows; ++i) out[i] = sc.l[i] != 0.0f ? sc.m[i] + std::log(sc.l[i]) : kNegInf;
            pool.release(slot);
            return;
        }
        float *lse = p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin + i0;
        for (int i = 0; i < rows; ++i) {
            float *arow = sc.acc + i * dvp;
            if (sc.l[i] != 0.0f) {
                scale_row(arow, 1.0f / sc.l[i], int(dvp));
                lse[i] = (cl ? cl[i] : 0.0f) + (sc.m[i] + std::log(sc.l[i]));
            } else {
                std::fill(arow, arow + dvp, 0.0f);
                lse[i] = kNegInf;
            }
        }
        store_tile(elem(p.o, p.dtype, r.batch_index * p.o_sb + (r.q_begin + i0) * p.o_ss + h * p.o_sh),
                   p.dtype, p.o_ss, rows, int(p.dim_v), sc.acc, dvp, 1.0f);
        pool.release(slot);
    });
    return FATTN_OK;
}

}  // namespace fattn::cpu::detail
