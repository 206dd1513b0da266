// attn_exact.cpp — the EXACT (materialized) forward of softmax attention on the CPU.
//
// The A/B arm of the fused kernels: P [B, Hq, Sq, Skv] f32 is written to `saved` and kept for the
// backward (attn_bwd.cpp reads it instead of recomputing). Built from the same packed tiles,
// GEMM microkernel, exp and tile skipping as the fused forward, so "fused vs exact" compares the
// algorithms: one task per (sequence, query head, q tile) writes S for its rows, runs a
// three-pass row softmax over the materialized rows (max, exp + sum, normalize) and then O = P V.
// Varlen: P uses the max lengths ([num_seqs, Hq, max_q, max_kv]); padding cells are never read.
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
    const int64_t dp = pad_n(p.d), dvp = pad_n(p.dv), group = p.group();
    const int64_t ldp = p.seqlen_kv;  // row stride of P

    parallel_for(ti.total(), p.nthreads, [&](int64_t t) {
        int64_t s, rem;
        ti.locate(t, &s, &rem);
        const SeqRange r = seq_range(p, s);
        const int64_t nqt = cdiv(r.q_len, kBQ), nkt = cdiv(r.kv_len, kBK);
        const int64_t h = rem / nqt, qt = rem % nqt, hk = h / group;
        const int64_t i0 = qt * kBQ;
        const int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
        float *prow = saved + ((s * p.hq + h) * p.seqlen_q + i0) * ldp;  // [rows, kv_len] of P

        int slot = pool.acquire();
        FwdScratch sc = carve_fwd(p, ws.slots + size_t(slot) * ws.slot_bytes);
        load_tile(elem(p.q, p.dtype, r.batch_index * p.q_sb + (r.q_begin + i0) * p.q_ss + h * p.q_sh),
                  p.dtype, p.q_ss, rows, int(p.d), p.scale, sc.qs, dp);

        // Pass 1: logits into P (-inf where masked or skipped).
        for (int64_t kt = 0; kt < nkt; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            bool live = tile_may_touch(p, r, i0, rows, j0, bk) && ws.map.active(s, h, qt, kt, nkt) &&
                        tile_rows(p, r, i0, rows, j0, bk, sc.tr) == kTileActive;
            if (!live) {
                for (int i = 0; i < rows; ++i) std::fill(prow + i * ldp + j0, prow + i * ldp + j0 + bk, kNegInf);
                continue;
            }
            load_tile_t(elem(p.k, p.dtype, r.batch_index * p.k_sb + (r.kv_begin + j0) * p.k_ss + hk * p.k_sh),
                        p.dtype, p.k_ss, bk, int(p.d), sc.kt, kBK);
            gemm(rows, int(pad_n(bk)), int(p.d), sc.qs, dp, sc.kt, kBK, sc.s, kBK, false);
            for (int i = 0; i < rows; ++i) {
                float *srow = sc.s + i * kBK;
                int a = sc.tr->a[i], b = sc.tr->b[i];
                if (a < b && p.bias) add_bias(bias_at(p, r, h, i0 + i, j0), p.bias_dtype, srow, a, b);
                std::fill(srow, srow + a, kNegInf);
                std::fill(srow + b, srow + bk, kNegInf);
                std::copy(srow, srow + bk, prow + i * ldp + j0);
            }
        }

        // Pass 2: softmax of each materialized row; LSE = m + log l.
        float *lse = p.lse + r.batch_index * p.lse_sb + h * p.lse_sh + r.q_begin + i0;
        const int n = int(r.kv_len);
        for (int i = 0; i < rows; ++i) {
            float *x = prow + i * ldp;
            float m = row_max(x, n);
            if (m == kNegInf) {
                std::fill(x, x + n, 0.0f);
                lse[i] = kNegInf;
                continue;
            }
            exp_shift(x, m, x, n);
            float l = row_sum(x, n);
            scale_row(x, 1.0f / l, n);
            lse[i] = m + std::log(l);
        }

        // Pass 3: O = P V over the tiles that hold probability.
        std::fill(sc.acc, sc.acc + rows * dvp, 0.0f);
        for (int64_t kt = 0; kt < nkt; ++kt) {
            const int64_t j0 = kt * kBK;
            const int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            if (!tile_may_touch(p, r, i0, rows, j0, bk) || !ws.map.active(s, h, qt, kt, nkt)) continue;
            load_tile(elem(p.v, p.dtype, r.batch_index * p.v_sb + (r.kv_begin + j0) * p.v_ss + hk * p.v_sh),
                      p.dtype, p.v_ss, bk, int(p.dv), 1.0f, sc.v, dvp);
            gemm(rows, int(dvp), bk, prow + j0, ldp, sc.v, dvp, sc.acc, dvp, true);
        }
        store_tile(elem(p.o, p.dtype, r.batch_index * p.o_sb + (r.q_begin + i0) * p.o_ss + h * p.o_sh),
                   p.dtype, p.o_ss, rows, int(p.dv), sc.acc, dvp, 1.0f);
        pool.release(slot);
    });
    return FATTN_OK;
}

}  // namespace fattn::cpu::detail
