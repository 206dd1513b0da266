// attn_bwd.cpp — backward of softmax attention on the CPU, for both algorithms.
//
//   FUSED (kExact = false): P = exp(scale·QKᵀ + bias − LSE) recomputed per tile from LSE.
//   EXACT (kExact = true):  P read from the materialized probabilities the forward saved.
// Everything else is shared, so the two arms differ only in where P comes from.
//
// Scheme (no float atomics, fixed order, linear memory):
//   1. delta_i = Σ_d dO_id · O_id per (query head, row), f32, d in order.
//   2. One task per (sequence, kv head, kv chunk). A chunk is the kv tiles kt ≡ c (mod nchunks);
//      for each of its kv tiles the task loops over the query heads of the GQA group, then the q
//      tiles, in a fixed order, and builds P, dP = dO Vᵀ, dS = P ∘ (dP − delta) per tile pair:
//        dV += Pᵀ dO,  dK += dSᵀ (scale·Q)   into the tile's private f32 accumulators;
//        dQ_c += dS K                         into chunk c's private f32 dQ partial.
//      GQA is reduced natively (the group loop), K/V are never expanded.
//   3. dQ = scale · Σ_c dQ_c in chunk order. nchunks depends on the shapes only (bwd_chunks), so
//      the bits do not depend on the thread count; it exists so that a problem with few
//      (sequence, kv head) pairs still has several tasks, at the cost of nchunks dQ partials.
// This is the "deterministic 2-pass" dQ: no recompute of S for dQ, one pass over all tile pairs.
//
// dbias (optional, f32, the bias's shape reduced over its broadcast dims): zeroed first, then every
// element gets its dS contributions added in a fixed order by exactly one task, never by two:
//   - owned (dbias_owned): when every contribution to an element comes from one main-loop task
//     (the bias is per batch or B = 1 or varlen, and per head or Hkv = 1), that task adds its dS
//     tile as it goes, in its own order (query head of the group, then q tile, then row);
//   - otherwise (a bias shared by the batches of a dense call, or by the heads of several kv
//     heads) a second pass, one task per dbias tile (cell, kv tile), recomputes the dS tiles that
//     reach it (the first two GEMMs of the main loop) in the order sequence, head, q tile, row.
// No partial buffers, no atomics, no workspace beyond the main loop's scratch slots; the other
// outputs are computed exactly as without dbias.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/parallel.h"
#include "cpu/attn_impl.h"

namespace fattn::cpu::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// delta = rowsum(dO ∘ O) for every (query head, packed row) of every sequence; with a bias also
// lse' = lse − ceiling (attn_impl.h; rows with a large ceiling are recomputed afterwards). Also
// packs scale · Q and dO (f32, ws.ldq / ws.ldo per row) for the main loop.
void compute_delta(const AttnBwdParams &p, const Workspace &ws, float *delta, float *lse_rel) {
    const int64_t hdv = p.dim_v;
    TaskIndex ti;
    ti.build(p, [](const AttnFwdParams &pp, const SeqRange &r) { return pp.hq * cdiv(r.q_len, kBQ); });
    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        SeqRange r = seq_range(p, s);
        int64_t nqt = cdiv(r.q_len, kBQ), h = rem / nqt, i0 = (rem % nqt) * kBQ;
        int64_t i1 = std::min(r.q_len, i0 + kBQ);
        const int64_t prow = (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;  // packed row
        load_tile(elem(p.q, p.dtype, r.batch_index * p.q_sb + (r.q_begin + i0) * p.q_ss + h * p.q_sh), p.dtype,
                  p.q_ss, int(i1 - i0), int(p.d), p.scale, ws.qs + prow * ws.ldq, ws.ldq);
        load_tile(elem(p.dout, p.dtype, r.batch_index * p.do_sb + (r.q_begin + i0) * p.do_ss + h * p.do_sh),
                  p.dtype, p.do_ss, int(i1 - i0), int(hdv), 1.0f, ws.dos + prow * ws.ldo, ws.ldo);
        for (int64_t i = i0; i < i1; ++i) {
            int64_t orow = r.batch_index * p.o_sb + (r.q_begin + i) * p.o_ss + h * p.o_sh;
            const float *dorow = ws.dos + (prow + i - i0) * ws.ldo;  // dO, converted above
            float acc = 0.0f;
            for (int64_t d = 0; d < hdv; ++d) acc += dorow[d] * load_f32(p.o, p.dtype, orow + d);
            delta[(r.batch_index * p.hq + h) * p.total_q + r.q_begin + i] = acc;
        }
        if (lse_rel) {
            const float *cl = ceil_row(p, ws, r, h, i0);
            const float *lse = p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin;
            float *out = lse_rel + (r.batch_index * p.hq + h) * p.total_q + r.q_begin;
            for (int64_t i = i0; i < i1; ++i) out[i] = lse[i] - cl[i - i0];
        }
    });
}

// True when every dS contribution to a dbias element comes from one main-loop task (see top).
bool dbias_owned(const AttnBwdParams &p) {
    const bool shared_b = !p.cu_seqlens_q && p.bias_sb == 0 && p.batch > 1;
    const bool shared_h = p.bias_sh == 0 && p.hkv > 1;
    return !shared_b && !shared_h;
}

// dbias rows (b, h, i) of a dS tile: dst[j] += ds[j], rows in order (a row broadcast over the
// queries, dbias_si = 0, takes them one after the other).
inline void add_dbias_tile(const AttnBwdParams &p, const SeqRange &r, int64_t h, int64_t i0, int rows,
                           int64_t j0, int bk, const float *ds, int64_t ld) {
    for (int i = 0; i < rows; ++i) {
        float *dst = p.dbias + r.batch_index * p.dbias_sb + h * p.dbias_sh +
                     (r.q_begin + i0 + i) * p.dbias_si + r.kv_begin + j0;
        const float *src = ds + i * ld;
        for (int j = 0; j < bk; ++j) dst[j] += src[j];
    }
}

// Zero every dbias element (each task one row of the reduced [B|1, Hq|1, Sq|1, Skv] view).
void zero_dbias(const AttnBwdParams &p) {
    const int64_t nb = p.bias_sb ? (p.cu_seqlens_q ? 1 : p.batch) : 1;
    const int64_t nh = p.bias_sh ? p.hq : 1, ni = p.bias_si ? p.total_q : 1;
    parallel_for(nb * nh * ni, p.nthreads, [&](int64_t t) {
        const int64_t b = t / (nh * ni), h = (t / ni) % nh, i = t % ni;
        std::memset(p.dbias + b * p.dbias_sb + h * p.dbias_sh + i * p.dbias_si, 0, size_t(p.total_kv) * 4);
    });
}

// The second dbias pass (dbias not owned): one task per (cell, kv tile). A cell is one dbias
// slice and q tile: its sequences (all batches when the bias is shared by them, else one), its
// heads (all when shared, else one), its q tiles (all when the bias broadcasts over the queries,
// else one). The task recomputes P and dS of every tile pair of the cell, as the main loop does,
// and adds them in order (sequence, head, q tile, row). Uses the main loop's packed scale · Q,
// dO, delta and lse' (still in the workspace) and its scratch slots.
// P [rows, n] of a tile (query rows i0 .., keys j0 .. j0 + bk of head h in sequence s): from the
// saved Pᵀ [B, Hq, Skv, Sq] (exact) or as scale·Q Kᵀ + bias, shifted by lse' and exponentiated;
// zero outside each row's valid keys and for rows that saw none. The main loop and the dbias
// pass build it this one way.
template <bool kExact>
void p_tile(const AttnBwdParams &p, const float *saved, const SeqRange &r, int64_t s, int64_t h, int64_t i0, int rows,
            int64_t j0, int bk, int n, const float *qs, int64_t ldq, const float *lse, const float *cl,
            BwdScratch &sc, const TilePrefetch *pf) {
    if (kExact) {
        const float *pcol = saved + ((s * p.hq + h) * p.seqlen_kv + j0) * p.seqlen_q + i0;
        transpose(pcol, p.seqlen_q, bk, rows, sc.pm, sc.ldt);
        for (int i = 0; i < rows; ++i) std::fill(sc.pm + i * sc.ldt + bk, sc.pm + i * sc.ldt + n, 0.0f);
        return;
    }
    gemm(rows, n, int(p.d), qs, ldq, sc.kt, sc.ldt, sc.pm, sc.ldt, false, pf);
    for (int i = 0; i < rows; ++i) {
        float *pr = sc.pm + i * sc.ldt;
        const int a = sc.tr->a[i], b = sc.tr->b[i];
        if (a >= b || lse[i] == kNegInf) {
            std::fill(pr, pr + n, 0.0f);
            continue;
        }
        if (p.bias) add_bias(bias_at(p, r, h, i0 + i, j0), p.bias_dtype, pr, a, b, cl[i]);
        std::fill(pr, pr + a, 0.0f);
        std::fill(pr + b, pr + n, 0.0f);
        exp_shift(pr + a, lse[i], pr + a, b - a);
    }
}

template <bool kExact>
void dbias_pass(const AttnBwdParams &p, const float *saved, Workspace &ws) {
    const bool sum_b = !p.cu_seqlens_q && p.bias_sb == 0;  // dense: every batch has batch 0's lengths
    const bool sum_h = p.bias_sh == 0, sum_i = p.bias_si == 0;
    const int64_t ncs = sum_b ? 1 : p.batch, nhc = sum_h ? 1 : p.hq, group = p.group();
    const int64_t hdv = p.dim_v;
    TaskIndex ti;
    ti.off.assign(size_t(ncs) + 1, 0);
    for (int64_t cs = 0; cs < ncs; ++cs) {
        const SeqRange r = seq_range(p, cs);
        const int64_t nq = sum_i ? (r.q_len > 0 ? 1 : 0) : cdiv(r.q_len, kBQ);
        ti.off[size_t(cs) + 1] = ti.off[size_t(cs)] + nhc * nq * cdiv(r.kv_len, kBK);
    }
    SlotPool pool(ws.nslots);
    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t cs, rem;
        ti.locate(t, &cs, &rem);
        const SeqRange r0 = seq_range(p, cs);
        const int64_t nqt = cdiv(r0.q_len, kBQ), nkt = cdiv(r0.kv_len, kBK), nqc = sum_i ? 1 : nqt;
        const int64_t kt = rem % nkt, qc = (rem / nkt) % nqc, hc = rem / (nkt * nqc);
        const int64_t s_lo = sum_b ? 0 : cs, s_hi = sum_b ? p.batch : cs + 1;
        const int64_t h_lo = sum_h ? 0 : hc, h_hi = sum_h ? p.hq : hc + 1;
        const int64_t qt_lo = sum_i ? 0 : qc, qt_hi = sum_i ? nqt : qc + 1;
        const int64_t j0 = kt * kBK;
        const int bk = int(std::min<int64_t>(kBK, r0.kv_len - j0));
        const int n = int(pad_n(bk));
        int slot = pool.acquire();
        BwdScratch sc = carve_bwd(p, ws.slots + size_t(slot) * ws.slot_bytes);
        int64_t loaded = -1;  // (sequence, kv head) whose K/V tile the scratch holds
        for (int64_t s = s_lo; s < s_hi; ++s) {
            const SeqRange r = seq_range(p, s);
            for (int64_t h = h_lo; h < h_hi; ++h) {
                const int64_t hk = h / group;
                for (int64_t qt = qt_lo; qt < qt_hi; ++qt) {
                    const int64_t i0 = qt * kBQ;
                    const int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
                    if (!tile_may_touch(p, r, i0, rows, j0, bk)) continue;
                    if (!ws.map.active(s, h, qt, kt, nkt)) continue;
                    if (tile_rows(p, r, i0, rows, j0, bk, sc.tr) == kTileSkip) continue;
                    if (loaded != s * p.hkv + hk) {
                        const int64_t krow = r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh;
                        const int64_t vrow = r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh;
                        if (!kExact) load_tile_t(elem(p.k, p.dtype, krow), p.dtype, p.k_ss, bk, int(p.d), sc.kt, sc.ldt);
                        load_tile_t(elem(p.v, p.dtype, vrow), p.dtype, p.v_ss, bk, int(hdv), sc.vt, sc.ldt);
                        loaded = s * p.hkv + hk;
                    }
                    const int64_t prow = (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;
                    const float *qs = ws.qs + prow * ws.ldq, *dout = ws.dos + prow * ws.ldo;
                    const float *lse = ws.lse_rel + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;
                    const float *cl = ceil_row(p, ws, r, h, i0);
                    const float *delta = ws.delta + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;
                    p_tile<kExact>(p, saved, r, s, h, i0, rows, j0, bk, n, qs, ws.ldq, lse, cl, sc, nullptr);
                    gemm(rows, n, int(hdv), dout, ws.ldo, sc.vt, sc.ldt, sc.dp, sc.ldt, false);
                    for (int i = 0; i < rows; ++i) dsoftmax_row(sc.dp + i * sc.ldt, sc.pm + i * sc.ldt, delta[i], n);
                    add_dbias_tile(p, r, h, i0, rows, j0, bk, sc.dp, sc.ldt);
                }
            }
        }
        pool.release(slot);
    });
}

}  // namespace

template <bool kExact>
fattn_status attn_bwd_impl(const AttnBwdParams &p, const float *saved, Workspace &ws) {
    const int64_t hdv = p.dim_v;
    const int64_t dp = pad_n(p.d), dvp = pad_n(hdv), group = p.group(), nch = ws.nchunks;
    // Buffers are [nb, Hq, total_q] per chunk: nb = B dense (each batch its own rows), 1 varlen.
    const int64_t nb = p.cu_seqlens_q ? 1 : p.batch;

    // Zero the dQ partials (parallel: nchunks × nb × Hq row blocks) and compute delta.
    parallel_for(nch * nb * p.hq, p.nthreads, [&](int64_t t) {
        std::memset(ws.dq_part + t * p.total_q * dp, 0, size_t(p.total_q * dp) * 4);
    });
    compute_delta(p, ws, ws.delta, ws.lse_rel);
    const bool dbias_in_loop = p.dbias && dbias_owned(p);
    if (p.dbias) zero_dbias(p);
    // Rows whose bias ceiling is large: their lse − ceiling may have lost log Σ; recompute it.
    if (!kExact && any_large_ceiling(p, ws)) fused_fwd(p, ws, ws.lse_rel);

    TaskIndex ti;
    ti.off.assign(size_t(p.batch) + 1, 0);
    for (int64_t s = 0; s < p.batch; ++s) ti.off[size_t(s) + 1] = ti.off[size_t(s)] + p.hkv * nch;
    SlotPool pool(ws.nslots);

    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        const SeqRange r = seq_range(p, s);
        const int64_t hk = rem / nch, c = rem % nch;
        const int64_t nqt = cdiv(r.q_len, kBQ), nkt = cdiv(r.kv_len, kBK);
        int slot = pool.acquire();
        BwdScratch sc = carve_bwd(p, ws.slots + size_t(slot) * ws.slot_bytes);

        for (int64_t kt = c; kt < nkt; kt += nch) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            const int n = int(pad_n(bk));
            const int64_t krow = r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh;
            const int64_t vrow = r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh;
            if (!kExact) load_tile_t(elem(p.k, p.dtype, krow), p.dtype, p.k_ss, bk, int(p.d), sc.kt, sc.ldt);
            load_tile_t(elem(p.v, p.dtype, vrow), p.dtype, p.v_ss, bk, int(hdv), sc.vt, sc.ldt);
            load_tile(elem(p.k, p.dtype, krow), p.dtype, p.k_ss, bk, int(p.d), 1.0f, sc.kr, sc.ldd);
            std::fill(sc.dk, sc.dk + bk * sc.ldd, 0.0f);
            std::fill(sc.dv, sc.dv + bk * sc.ldo, 0.0f);

            for (int64_t g = 0; g < group; ++g) {
                const int64_t h = hk * group + g;
                for (int64_t qt = 0; qt < nqt; ++qt) {
                    const int64_t i0 = qt * kBQ;
                    const int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
                    if (!tile_may_touch(p, r, i0, rows, j0, bk)) continue;
                    if (!ws.map.active(s, h, qt, kt, nkt)) continue;
                    if (tile_rows(p, r, i0, rows, j0, bk, sc.tr) == kTileSkip) continue;

                    // scale · Q and dO of the tile, packed once per call (compute_delta)
                    const int64_t prow = (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;
                    const float *qs = ws.qs + prow * ws.ldq, *dout = ws.dos + prow * ws.ldo;
                    if (!kExact && p.bias) prefetch_bias(p, r, h, i0, rows, j0, bk);
                    // The next q tile of this kv tile (same head, or the group's next head) is
                    // fetched while this pair computes (see TilePrefetch): Q during the first
                    // GEMM, dO during dP, its dQ partial rows (a contiguous block the dQ GEMM
                    // reads and writes, from L3 at long S) during dK.
                    TilePrefetch pf_q, pf_do, pf_dq;
                    {
                        int64_t g1 = g, qt1 = qt + 1;
                        if (qt1 == nqt) g1 = g + 1, qt1 = 0;
                        const int64_t i1 = qt1 * kBQ;
                        const int rows1 = int(std::min<int64_t>(kBQ, r.q_len - i1));
                        if (g1 < group && tile_may_touch(p, r, i1, rows1, j0, bk)) {
                            const int64_t h1 = hk * group + g1;
                            const int64_t prow1 = (r.batch_index * p.hq + h1) * p.total_q + r.q_begin + i1;
                            pf_q = tile_prefetch(ws.qs + prow1 * ws.ldq, FATTN_F32, ws.ldq, rows1, int(p.d));
                            pf_do = tile_prefetch(ws.dos + prow1 * ws.ldo, FATTN_F32, ws.ldo, rows1, int(hdv));
                            pf_dq = tile_prefetch(ws.dq_part + (((c * nb + r.batch_index) * p.hq + h1) * p.total_q + r.q_begin + i1) * dp,
                                                  FATTN_F32, dp, rows1, int(dp));
                        }
                    }
                    // lse' (relative to the bias ceilings) with a bias, else the saved lse.
                    const float *lse = p.bias ? ws.lse_rel + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0
                                              : p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin + i0;
                    const float *cl = ceil_row(p, ws, r, h, i0);
                    const float *delta = ws.delta + (r.batch_index * p.hq + h) * p.total_q + r.q_begin + i0;

                    p_tile<kExact>(p, saved, r, s, h, i0, rows, j0, bk, n, qs, ws.ldq, lse, cl, sc, &pf_q);
                    // dP = dO Vᵀ, then dS = P ∘ (dP − delta) in place   [rows, n]
                    gemm(rows, n, int(hdv), dout, ws.ldo, sc.vt, sc.ldt, sc.dp, sc.ldt, false, &pf_do);
                    for (int i = 0; i < rows; ++i) dsoftmax_row(sc.dp + i * sc.ldt, sc.pm + i * sc.ldt, delta[i], n);

                    // dV += Pᵀ dO,  dK += dSᵀ (scale·Q)  (A read transposed),  dQ_c += dS K
                    gemm_tn(bk, int(dvp), rows, sc.pm, sc.ldt, dout, ws.ldo, sc.dv, sc.ldo, true, kExact ? &pf_q : nullptr);
                    gemm_tn(bk, int(dp), rows, sc.dp, sc.ldt, qs, ws.ldq, sc.dk, sc.ldd, true, &pf_dq);
                    float *dq = ws.dq_part + (((c * nb + r.batch_index) * p.hq + h) * p.total_q + r.q_begin + i0) * dp;
                    gemm(rows, int(dp), bk, sc.dp, sc.ldt, sc.kr, sc.ldd, dq, dp, true);
                    if (dbias_in_loop) add_dbias_tile(p, r, h, i0, rows, j0, bk, sc.dp, sc.ldt);
                }
            }
            store_tile(elem(p.dk, p.dtype, r.batch_index * p.dk_sb + (r.kv_begin + j0) * p.dk_ss + hk * p.dk_sh),
                       p.dtype, p.dk_ss, bk, int(p.d), sc.dk, sc.ldd, 1.0f);
            store_tile(elem(p.dv, p.dtype, r.batch_index * p.dv_sb + (r.kv_begin + j0) * p.dv_ss + hk * p.dv_sh),
                       p.dtype, p.dv_ss, bk, int(hdv), sc.dv, sc.ldo, 1.0f);
        }
        pool.release(slot);
    });

    // dQ = scale · Σ_c dQ_c, chunk order fixed. One task per (batch, query head, block of rows);
    // packed rows outside every sequence (varlen) get 0 from the zeroed partials.
    const int64_t nblk = cdiv(p.total_q, kBQ);
    const size_t chunk_stride = size_t(nb * p.hq * p.total_q * dp);
    parallel_for(nb * p.hq * nblk, p.nthreads, [&](int64_t t) {
        const int64_t bh = t / nblk, b = bh / p.hq, h = bh % p.hq;
        const int64_t i0 = (t % nblk) * kBQ, i1 = std::min(p.total_q, i0 + kBQ);
        float *sum = ws.dq_part + (bh * p.total_q + i0) * dp;  // chunk 0's rows hold the sum
        for (int64_t c = 1; c < nch; ++c) {
            const float *part = sum + size_t(c) * chunk_stride;
            for (int64_t x = 0; x < (i1 - i0) * dp; ++x) sum[x] += part[x];
        }
        store_tile(elem(p.dq, p.dtype, b * p.dq_sb + i0 * p.dq_ss + h * p.dq_sh), p.dtype, p.dq_ss,
                   int(i1 - i0), int(p.d), sum, dp, p.scale);
    });
    if (p.dbias && !dbias_in_loop) dbias_pass<kExact>(p, saved, ws);
    if (p.cu_seqlens_kv) {  // dK/dV rows that belong to no sequence
        const int64_t kv_lo = p.cu_seqlens_kv[0], kv_hi = p.cu_seqlens_kv[p.batch];
        for (int64_t hk = 0; hk < p.hkv; ++hk) {
            zero_rows(elem(p.dk, p.dtype, hk * p.dk_sh), p.dtype, p.dk_ss, 0, kv_lo, int(p.d));
            zero_rows(elem(p.dk, p.dtype, hk * p.dk_sh), p.dtype, p.dk_ss, kv_hi, p.total_kv, int(p.d));
            zero_rows(elem(p.dv, p.dtype, hk * p.dv_sh), p.dtype, p.dv_ss, 0, kv_lo, int(hdv));
            zero_rows(elem(p.dv, p.dtype, hk * p.dv_sh), p.dtype, p.dv_ss, kv_hi, p.total_kv, int(hdv));
        }
    }
    return FATTN_OK;
}

template fattn_status attn_bwd_impl<false>(const AttnBwdParams &, const float *, Workspace &);
template fattn_status attn_bwd_impl<true>(const AttnBwdParams &, const float *, Workspace &);

}  // namespace fattn::cpu::detail
