// bwd_intra_scores.cuh — KIntraScores (intra_split_at, params.h): the scores of seg-intra's pairs
// in a kernel of their own, key chunk by key chunk, every CTA independent of the others.
//
// Per (segment r, query head, key chunk cj = 8r + j, j < 7), K~_cj and V_cj loaded once, for the
// query chunks ci = 8r + i, i = j + 1 .. 7 in order:
//   X = the pair's state (KHist's slot intra_slot(i, j)),
//   P = exp(scale (X K~^T + G_t - G_j) - lse),  dS = scale P (dO V^T - delta),
//   dK~_cj += dS^T X, dV_cj += P^T dO: summed over i in shared memory, added to the workspace once;
//   chunk cj's dG entries -= dS's column sums, pair after pair;
//   the pair's dS (input dtype) and its row sums into p.dsi / p.rsi, from which KIntraGamma adds
//   gamma += dS K~ and the dG rows in its chain of gamma steps.
// The same products in the same types as KSegIntra::scores16 (pair_scores16; 16-bit inputs only).
#pragma once

#include "cuda/path/bwd_intra.cuh"

namespace fattn::pathk {

template <typename Tin, int D> struct KIntraScores {
    using Tw = walk_t<Tin>;
    static_assert(sizeof(Tin) == 2, "16-bit inputs (intra_split_at)");
    // FATTN_PATH_SCORES_WIDE (params.h): sixteen warps, each a 16 x 16 block of a pair's scores
    static constexpr int NW = FATTN_PATH_SCORES_WIDE ? 16 : 8, kThreads = 32 * NW, NCB = score_col_blocks<NW>();
    using FT = F32Tiles<D, NW>;
    static constexpr int SD = FT::SD, NB = FT::NB;
    static constexpr int STi = tile_stride<Tin>(D), ST64 = tile_stride<Tin>(kC);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D), T64 = tile_bytes<Tin>(kC, kC);
    // layout: K~ | V | X, dO of a pair (Tin 64 x D) x 2 stages | P | dS (Tin 64 x 64) | the dK~ and dV
    // sums (f32 64 x D) | rsum [NCB][64], csum [4][64] | lse2, dl, gq, gk (64 floats each): 189 KiB at
    // D 128, one CTA per SM, the next pair's X and dO in flight while a pair's products run.
    // X lands in the walk type (f16) and is converted to Tin in place (bf16 inputs).
    static_assert(TI == tile_bytes<Tw>(kC, D), "X in either type");
    static constexpr size_t OFF_P = 6 * TI, OFF_ACC = OFF_P + 2 * T64, OFF_SUM = OFF_ACC + 2 * FT::BIG,
                            OFF_ROW = OFF_SUM + (NCB + 4) * kC * 4;
    static constexpr size_t smem() { return OFF_ROW + 4 * kC * 4; }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const IntraItem it = intra_chunk_major(p);
        const int64_t gs = it.gs;
        const int j = it.c, hq = it.hq, h = hq / p.grp;
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0, nc = ceil_div(sq.len, kC), cj = r * kNcs + j;
        if (cj + 1 >= nc) return;  // no query chunk of the segment after it
        Tin *k16 = reinterpret_cast<Tin *>(smem), *v16 = k16 + TI / sizeof(Tin);
        // stage b: X at smem + (2 + 2b) TI, dO after it
        auto x_of = [&](int b) { return smem + (2 + 2 * b) * TI; };
        Tin *p16 = reinterpret_cast<Tin *>(smem + OFF_P), *ds16 = p16 + T64 / sizeof(Tin);
        float *accK = reinterpret_cast<float *>(smem + OFF_ACC), *accV = accK + FT::BIG / sizeof(float);
        float *rsum = reinterpret_cast<float *>(smem + OFF_SUM), *csum = rsum + NCB * kC;  // [NCB][64], [4][64]
        float *lse2 = reinterpret_cast<float *>(smem + OFF_ROW), *dl = lse2 + kC, *gq = dl + kC, *gk = gq + kC;
        const int64_t krow = sq.row0 + cj * kC, hqd = int64_t(p.hq) * D, pairs = (gs * p.hq + hq) * int64_t(kIntraPairs);
        const Tw *states = static_cast<const Tw *>(p.qts) + pairs * kC * D;
        Tin *dsg = static_cast<Tin *>(p.dsi) + pairs * kC * kC;
        float *rsg = p.rsi + pairs * kC;
        // the key chunk (whole: a query chunk follows it) and the sums
        load_tile<Tin, kThreads>(k16, STi, static_cast<const Tin *>(p.kt) + (krow * p.h + h) * D, int64_t(p.h) * D, kC, D, kC, D,
                                 true);
        load_tile<Tin, kThreads>(v16, STi, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + (sq.begin + cj * kC) * p.v_ss + h * p.v_sh,
                                 p.v_ss, kC, D, kC, p.V, p.vec_v);
        zero_tile<float, kThreads>(accK, SD, kC, D);
        zero_tile<float, kThreads>(accV, SD, kC, D);
        for (int b = tid(); b < kC; b += kThreads) gk[b] = p.has_gate ? p.gsum[(krow + b) * p.hq + hq] : 0.f;
        const int64_t iend = nc - r * kNcs < kNcs ? nc - r * kNcs : kNcs;  // the query chunks: i < iend
        // pair i's X (as stored) and dO into stage b (cp.async; the caller commits)
        auto issue = [&](int64_t i, int b) {
            const int64_t c0 = (r * kNcs + i) * kC, t0 = sq.begin + c0;
            const int nq = int(sq.len - c0 < kC ? sq.len - c0 : kC);
            load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(x_of(b)), STi, states + int64_t(intra_slot(i, j)) * kC * D, D, kC, D, kC, D,
                                    true);
            load_tile<Tin, kThreads>(reinterpret_cast<Tin *>(x_of(b) + TI), STi,
                                     static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh, p.do_ss, kC, D,
                                     nq, p.V, p.vec_do);
        };
        issue(j + 1, 0);
        cp_commit();
        for (int64_t i = j + 1; i < iend; ++i) {
            const int64_t c0 = (r * kNcs + i) * kC, t0 = sq.begin + c0, qrow = sq.row0 + c0;
            const int nq = int(sq.len - c0 < kC ? sq.len - c0 : kC), slot = intra_slot(i, j), st = int(i - j - 1) & 1;
            Tin *x16 = reinterpret_cast<Tin *>(x_of(st)), *dO16 = x16 + TI / sizeof(Tin);
            sync();  // the previous pair's stage, P, dS, sums and row statistics read
            if (i + 1 < iend) issue(i + 1, st ^ 1);
            cp_commit();
            cp_wait<1>();
            query_row_stats<kThreads>(p, sq, hq, t0, qrow, nq, lse2, dl, gq);
            sync();
            if constexpr (!std::is_same<Tw, Tin>::value) {  // X to the input dtype in place, element by element
                const Tw *xw = reinterpret_cast<const Tw *>(x16);
                for (int e = tid(); e < kC * D; e += kThreads) {
                    const int a = e / D, c = e % D;
                    const float x = to_f(xw[a * STi + c]);
                    x16[a * STi + c] = from_f<Tin>(x);
                }
                sync();
            }
            pair_scores16<Tin, D, NW>(p, x16, k16, dO16, v16, p16, ds16, nq, lse2, dl, gq, gk, rsum, csum);
            sync();
            cta_gemm_rmw<Tin, true, true, NB, NW>(kC, D, kC, ds16, ST64, x16, STi, accK, SD, 1.f, kC);
            cta_gemm_rmw<Tin, true, true, NB, NW>(kC, D, kC, p16, ST64, dO16, STi, accV, SD, 1.f, kC);
            // the pair's dS and dS row sums for seg-intra; chunk cj's dG columns
            for (int e = tid(); e < kC * kC / 8; e += kThreads) {
                const int a = e / (kC / 8), c = (e % (kC / 8)) * 8;
                st16(dsg + (int64_t(slot) * kC + a) * kC + c, ld16(ds16 + a * ST64 + c));
            }
            if (tid() < kC) {
                rsg[int64_t(slot) * kC + tid()] = ds_row_sum<NW>(rsum, tid());
            } else if (tid() < 2 * kC) {
                const int b = tid() - kC;
                p.dgs[(krow + b) * p.hq + hq] -= ds_col_sum(csum, b);
            }
        }
        sync();
        add_tile_f32<D, kThreads>(dkt_of<D>(p, krow) + hq * D, hqd, accK, SD, kC, 1.f);
        add_tile_f32<D, kThreads>(p.dvacc + (krow * p.hq + hq) * D, hqd, accV, SD, kC, 1.f);
    }
};

}  // namespace fattn::pathk
