// attn_exact.cpp — the EXACT (materialized) forward of softmax attention on the CPU.
//
// The A/B arm of the fused kernels: the probabilities (B·Hq·Sq·Skv f32) are written to `saved`
// and kept for the backward (attn_bwd.cpp reads them instead of recomputing). Built from the same
// packed tiles, GEMM microkernel, exp and tile skipping as the fused forward, so "fused vs exact"
// compares the algorithms: one task per (sequence, query head, q tile) writes the logits of its
// queries, runs a three-pass softmax over them (max, exp + sum, normalize), then O = P V.
// Biases enter relative to each row's ceiling, as in the fused kernels (attn_impl.h).
// Layout of `saved`: Pᵀ, [B, Hq, Skv, Sq] (keys × queries, like the fused kernels' Sᵀ tiles), so
// a task's queries are contiguous in every key row. Varlen: max lengths ([num_seqs, Hq, max_kv,
// max_q]); padding cells are never read.
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

fattn_status exact_fwd(const AttnFwdParams &p, float *saved, Workspace &ws) {
    TaskIndex ti;
    ti.build(p, fwd_tasks_of);
    SlotPool pool(ws.nslots);
    const int64_t dvp = pad_n(p.dim_v), group = p.group();
    const int64_t ldp = p.seqlen_q;  // row stride of Pᵀ (one row per key)

    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        const SeqRange r = seq_range(p, s);
        const int64_t nqt = cdiv(r.q_len, kBQ), nkt = cdiv(r.kv_len, kBK);
        const int64_t h = rem / nqt, qt = rem % nqt, hk = h / group;
        const int64_t i0 = qt * kBQ;
        const int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
        const int nq = int(pad_n(rows));
        float *pcol = saved + (s * p.hq + h) * p.seqlen_kv * ldp + i0;  // Pᵀ[:, i0 : i0 + rows]
        const float *cl = ceil_row(p, ws, r, h, i0);  // bias ceilings of the task's rows

        int slot = pool.acquire();
        FwdScratch sc = carve_fwd(p, ws.slots + size_t(slot) * ws.slot_bytes);
        load_tile_t(elem(p.q, p.dtype, r.batch_index * p.q_sb + (r.q_begin + i0) * p.q_ss + h * p.q_sh),
                    p.dtype, p.q_ss, rows, int(p.d), sc.qt, sc.ldt);
        for (int64_t d = 0; d < p.d; ++d) scale_row(sc.qt + d * sc.ldt, p.scale, nq);

        // The task's Pᵀ block [kv_len, nq] is built in the slot's scratch (L2-sized for moderate
        // Skv), softmaxed there and written to `saved` once: the materialization costs one write
        // of P, not repeated passes over memory.
        float *blk = sc.blk;
        const int nk = int(r.kv_len);

        // Pass 1: logits (-inf where masked or skipped).
        for (int64_t kt = 0; kt < nkt; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            float *st = blk + j0 * kBQ;
            bool live = tile_may_touch(p, r, i0, rows, j0, bk) && ws.map.active(s, h, qt, kt, nkt) &&
                        tile_rows(p, r, i0, rows, j0, bk, sc.tr) == kTileActive;
            if (!live) {
                std::fill(st, st + bk * kBQ, kNegInf);
                continue;
            }
            load_tile(elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh),
                      p.dtype, p.k_ss, bk, int(p.d), 1.0f, sc.kr, sc.ldk);
            if (p.bias) prefetch_bias(p, r, h, i0, rows, j0, bk);
            gemm(bk, nq, int(p.d), sc.kr, sc.ldk, sc.qt, sc.ldt, st, kBQ, false);  // Sᵀ [bk, nq]
            for (int i = 0; i < rows; ++i) {
                int a = sc.tr->a[i], b = sc.tr->b[i];
                if (a < b && p.bias)
                    add_bias_t(bias_at(p, r, h, i0 + i, j0), p.bias_dtype, st + i, kBQ, a, b, cl[i]);
                for (int j = 0; j < a; ++j) st[j * kBQ + i] = kNegInf;
                for (int j = std::max(a, b); j < bk; ++j) st[j * kBQ + i] = kNegInf;
            }
        }

        // Pass 2: softmax down each column (= query row); LSE = m + log l.
        col_max(blk, kBQ, nk, nq, sc.mx);
        for (int i = 0; i < nq; ++i) sc.shift[i] = sc.mx[i] == kNegInf ? 0.0f : sc.mx[i];
        col_exp_sum(blk, kBQ, nk, nq, sc.shift, blk, kBQ, sc.sum);
        float *lse = p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin + i0;
        for (int i = 0; i < nq; ++i) {
            bool seen = i < rows && sc.sum[i] != 0.0f;  // no visible key: P = 0, LSE = -inf (NaN: seen)
            sc.alpha[i] = seen ? 1.0f / sc.sum[i] : 0.0f;
            if (i < rows) lse[i] = seen ? (cl ? cl[i] : 0.0f) + (sc.mx[i] + std::log(sc.sum[i])) : kNegInf;
        }
        col_scale(blk, kBQ, nk, nq, sc.alpha);

        // Pass 3: O = P V over the tiles that hold probability, then save P.
        std::fill(sc.acc, sc.acc + rows * dvp, 0.0f);
        for (int64_t kt = 0; kt < nkt; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            if (!tile_may_touch(p, r, i0, rows, j0, bk) || !ws.map.active(s, h, qt, kt, nkt)) continue;
            load_tile(elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh),
                      p.dtype, p.v_ss, bk, int(p.dim_v), 1.0f, sc.v, sc.ldv);
            gemm_tn(rows, int(dvp), bk, blk + j0 * kBQ, kBQ, sc.v, sc.ldv, sc.acc, dvp, true);
        }
        for (int j = 0; j < nk; ++j) std::copy(blk + j * kBQ, blk + j * kBQ + rows, pcol + j * ldp);
        store_tile(elem(p.o, p.dtype, r.batch_index * p.o_sb + (r.q_begin + i0) * p.o_ss + h * p.o_sh),
                   p.dtype, p.o_ss, rows, int(p.dim_v), sc.acc, dvp, 1.0f);
        pool.release(slot);
    });
    return FATTN_OK;
}

}  // namespace fattn::cpu::detail
