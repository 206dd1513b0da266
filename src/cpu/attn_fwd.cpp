// attn_fwd.cpp — fused (flash) forward of softmax attention on the CPU.
//
// One task per (sequence, query head, group of fwd_q_group consecutive q tiles of kBQ rows). It
// streams the kv tiles of the group's windows, loading each once for the group, and keeps per q
// tile a running max m and denominator l per row (online softmax) and an f32 accumulator of the
// unnormalized output; only O and LSE are written. Scores are computed transposed
// (Sᵀ = K Qᵀ, keys × queries): K and V tiles are packed as rows (once per group), each q tile
// transposed (once per task), and the per-query max/exp/sum run as vector work across queries.
// Tiles outside the causal/window band are never visited, tiles the bias map marks all -inf are
// skipped. Every output element is produced by exactly one task in a fixed kv order, so results
// do not depend on the thread count (nor on the group size, which the thread count sets).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "cpu/attn_impl.h"

namespace fattn::cpu::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The state of one q tile of a task: its rows, bias ceilings, kv tile band, and its slice of the
// scratch (packed Qᵀ, accumulator, running max and sum).
struct QTile {
    int64_t qt, i0;
    int rows, nq;
    const float *cl;
    int64_t kt_begin, kt_end;
    float *qt_t, *acc, *m, *l;
    bool run;
};

}  // namespace

fattn_status fused_fwd(const AttnFwdParams &p, Workspace &ws, float *lse_rel) {
    const int G = fwd_q_group(p);
    TaskIndex ti;
    ti.build(p, [](const AttnFwdParams &pp, const SeqRange &r) {
        return pp.hq * cdiv(cdiv(r.q_len, kBQ), fwd_q_group(pp));
    });
    SlotPool pool(ws.nslots);
    const int64_t dvp = pad_n(p.dim_v), group = p.group();

    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        const SeqRange r = seq_range(p, s);
        const int64_t nqt = cdiv(r.q_len, kBQ), nkt = cdiv(r.kv_len, kBK), ngr = cdiv(nqt, G);
        const int64_t h = rem / ngr, qt0 = (rem % ngr) * G, hk = h / group;
        const int ng = int(std::min<int64_t>(G, nqt - qt0));

        int slot = -1;
        FwdScratch sc{};
        QTile tiles[kMaxQGroup];
        int64_t kt_lo = nkt, kt_hi = 0;  // the union of the tiles' kv bands
        for (int g = 0; g < ng; ++g) {
            QTile &q = tiles[g];
            q.qt = qt0 + g;
            q.i0 = q.qt * kBQ;
            q.rows = int(std::min<int64_t>(kBQ, r.q_len - q.i0));
            q.nq = int(pad_n(q.rows));
            q.cl = ceil_row(p, ws, r, h, q.i0);  // bias ceilings of the tile's rows
            // stats mode: only tiles with a row whose lse − ceiling is not exact run
            q.run = !lse_rel || std::any_of(q.cl, q.cl + q.rows, [](float c) { return !(std::fabs(c) <= kCeilExact); });
            if (!q.run) continue;
            if (slot < 0) {
                slot = pool.acquire();
                sc = carve_fwd(p, ws.slots + size_t(slot) * ws.slot_bytes);
            }
            q.qt_t = sc.qt + int64_t(g) * p.d * sc.ldt;
            q.acc = sc.acc + int64_t(g) * kBQ * dvp;
            q.m = sc.m + g * kBQ;
            q.l = sc.l + g * kBQ;
            // Qᵀ packed once per tile; every kv tile then computes Sᵀ = K (scale·Q)ᵀ [bk, nq] with
            // K in rows, and the per-query softmax runs down the columns as vector work.
            load_tile_t(elem(p.q, p.dtype, r.batch_index * p.q_sb + (r.q_begin + q.i0) * p.q_ss + h * p.q_sh),
                        p.dtype, p.q_ss, q.rows, int(p.d), q.qt_t, sc.ldt);
            for (int64_t d = 0; d < p.d; ++d) scale_row(q.qt_t + d * sc.ldt, p.scale, q.nq);
            std::fill(q.m, q.m + q.nq, kNegInf);
            std::fill(q.l, q.l + q.nq, 0.0f);
            std::fill(q.acc, q.acc + q.rows * dvp, 0.0f);
            // The band of kv tiles this q tile can see: from the first row's lo to the last row's hi.
            int64_t lo0, hi0, lo1, hi1;
            key_range(p, q.i0, r.q_len, r.kv_len, &lo0, &hi0);
            key_range(p, q.i0 + q.rows - 1, r.q_len, r.kv_len, &lo1, &hi1);
            q.kt_begin = std::max<int64_t>(lo0, 0) / kBK;
            q.kt_end = hi1 < 0 ? 0 : std::min(nkt, hi1 / kBK + 1);
            kt_lo = std::min(kt_lo, q.kt_begin);
            kt_hi = std::max(kt_hi, q.kt_end);
        }
        if (slot < 0) return;

        // Each kv tile is loaded (K and V packed) once for the whole group; the
        // q tiles then use it in order. Every q tile's arithmetic is what it would be alone, so
        // the group size (fwd_q_group) never changes a bit of the results.
        for (int64_t kt = kt_lo; kt < kt_hi; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            bool loaded = false;
            TilePrefetch pf_k, pf_v;  // the next kv tile, fetched during the first user's GEMMs
            for (int g = 0; g < ng; ++g) {
                QTile &q = tiles[g];
                if (!q.run || kt < q.kt_begin || kt >= q.kt_end) continue;
                if (!ws.map.active(s, h, q.qt, kt, nkt)) continue;
                if (tile_rows(p, r, q.i0, q.rows, j0, bk, sc.tr) == kTileSkip) continue;
                if (!loaded) {
                    // K and V are packed into the slot (converted to f32) with conflict-free rows.
                    // In place, at a token stride of 1-2 KiB, a tile's rows fall into 16 of L1's
                    // 64 sets and evict each other and the other operand on every panel sweep:
                    // packed V and, at D128, packed K measured faster (AVX2, AVX-512).
                    const void *ksrc = elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh);
                    const void *vsrc = elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh);
                    load_tile(ksrc, p.dtype, p.k_ss, bk, int(p.d), 1.0f, sc.kr, sc.ldk);
                    load_tile(vsrc, p.dtype, p.v_ss, bk, int(p.dim_v), 1.0f, sc.v, sc.ldv);
                    if (kt + 1 < kt_hi) {
                        const int64_t j1 = j0 + kBK;
                        const int bk1 = int(std::min<int64_t>(kBK, r.kv_len - j1));
                        pf_k = tile_prefetch(elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j1) * p.k_ss + hk * p.k_sh),
                                             p.dtype, p.k_ss, bk1, int(p.d));
                        pf_v = tile_prefetch(elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j1) * p.v_ss + hk * p.v_sh),
                                             p.dtype, p.v_ss, bk1, int(p.dim_v));
                    }
                    loaded = true;
                }
                if (p.bias) prefetch_bias(p, r, h, q.i0, q.rows, j0, bk);
                // Sᵀ = K (scale · Q)ᵀ   [bk, nq]; a tile every row sees whole (no bias, no key
                // outside a window) gets its per-query maxima from the GEMM's registers.
                bool whole = !p.bias;
                for (int i = 0; i < q.rows && whole; ++i) whole = sc.tr->a[i] == 0 && sc.tr->b[i] == bk;
                if (whole) {
                    gemm_max(bk, q.nq, int(p.d), sc.kr, sc.ldk, q.qt_t, sc.ldt, sc.st, sc.ldt, sc.mx, &pf_k);
                } else {
                    gemm(bk, q.nq, int(p.d), sc.kr, sc.ldk, q.qt_t, sc.ldt, sc.st, sc.ldt, false, &pf_k);
                    for (int i = 0; i < q.rows; ++i) {  // bias, then -inf outside each query's window
                        int a = sc.tr->a[i], b = sc.tr->b[i];
                        if (a < b && p.bias)
                            add_bias_t(bias_at(p, r, h, q.i0 + i, j0), p.bias_dtype, sc.st + i, sc.ldt, a, b, q.cl[i]);
                        for (int j = 0; j < a; ++j) sc.st[j * sc.ldt + i] = kNegInf;
                        for (int j = std::max(a, b); j < bk; ++j) sc.st[j * sc.ldt + i] = kNegInf;
                    }
                    col_max(sc.st, sc.ldt, bk, q.nq, sc.mx);
                }
                // Online softmax per query: new max, rescale factor, probabilities, their sum.
                for (int i = 0; i < q.nq; ++i) {
                    float m_new = std::max(q.m[i], sc.mx[i]);
                    sc.shift[i] = m_new == kNegInf ? 0.0f : m_new;  // all -inf so far: exp gives 0
                    sc.alpha[i] = (q.m[i] == kNegInf || q.m[i] == m_new) ? 1.0f : std::exp(q.m[i] - m_new);
                    q.m[i] = m_new;
                }
                col_exp_sum(sc.st, sc.ldt, bk, q.nq, sc.shift, sc.st, sc.ldt, sc.sum);
                for (int i = 0; i < q.rows; ++i) {
                    if (sc.alpha[i] != 1.0f) {
                        q.l[i] *= sc.alpha[i];
                        scale_row(q.acc + i * dvp, sc.alpha[i], int(dvp));
                    }
                    q.l[i] += sc.sum[i];
                }
                // acc += P V with P read from Pᵀ   [rows, dvp]
                gemm_tn(q.rows, int(dvp), bk, sc.st, sc.ldt, sc.v, sc.ldv, q.acc, dvp, true, &pf_v);
                pf_k = TilePrefetch(), pf_v = TilePrefetch();  // issued once per kv tile
            }
        }

        // O = acc / l, LSE = ceiling + m + log l; a row that saw no key (l = 0): O = 0, LSE = -inf.
        // l is NaN after a +inf or NaN score: the test is l != 0 so that NaN reaches O and LSE
        // (docs/CONTRACT.md, "Overflow and NaN") instead of passing for a fully masked row.
        for (int g = 0; g < ng; ++g) {
            QTile &q = tiles[g];
            if (!q.run) continue;
            if (lse_rel) {  // stats mode: lse' only
                float *out = lse_rel + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + q.i0;
                for (int i = 0; i < q.rows; ++i) out[i] = q.l[i] != 0.0f ? q.m[i] + std::log(q.l[i]) : kNegInf;
                continue;
            }
            float *lse = p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin + q.i0;
            for (int i = 0; i < q.rows; ++i) {
                float *arow = q.acc + i * dvp;
                if (q.l[i] != 0.0f) {
                    scale_row(arow, 1.0f / q.l[i], int(dvp));
                    lse[i] = (q.cl ? q.cl[i] : 0.0f) + (q.m[i] + std::log(q.l[i]));
                } else {
                    std::fill(arow, arow + dvp, 0.0f);
                    lse[i] = kNegInf;
                }
            }
            store_tile(elem(p.o, p.dtype, r.batch_index * p.o_sb + (r.q_begin + q.i0) * p.o_ss + h * p.o_sh),
                       p.dtype, p.o_ss, q.rows, int(p.dim_v), q.acc, dvp, 1.0f);
        }
        pool.release(slot);
    });
    return FATTN_OK;
}

}  // namespace fattn::cpu::detail
