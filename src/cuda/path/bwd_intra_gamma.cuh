// bwd_intra_gamma.cuh — KIntraGamma (intra_split_at, params.h): seg-intra's chain of gamma steps,
// one CTA per query chunk, its pairs' scores from KIntraScores.
//
// Per (segment r, query head, query chunk ci = 8r + i, 1 <= i <= 7), gamma = dLoss/dQh of chunk ci
// (from KSegInter), for the key chunks cj = 8r + j, j = 0 .. i-1 in order:
//   if r >= 1 or j >= 1:  GU = gamma U_cj^T,  XW = X W_cj^T  (X: the pair's state, from KHist)
//       dU_cj -= XW^T gamma,  dW_cj -= GU^T X
//       gamma -= GU W_cj
//   gamma += dS K~_cj,  dG rows += dS's row sums  (dS: the pair's, from KIntraScores)
// then gamma (now dLoss/dQ~ of chunk ci) into p.gam and the dG row sums into p.dgs.
// The chunks' gamma chains are independent; only the adds to a key chunk's dU and dW are shared.
// They are made in a fixed order, query chunk 7 of the segment first, down to j + 1: a counter per
// (segment, query head, key chunk), p.icnt, zeroed before the launch, counts the adds done, and
// the CTA of chunk i waits until it reads (last query chunk of the segment) - i. Chunk i's CTA has
// a lower block index than chunk i - 1's, so it waits only on CTAs that started before it.
//
// 16-bit tiles: U, X (the walk type, f16, as stored), W (rounded to f16 from the f32 input: the
// 10-bit mantissa the tf32 products read anyway), K~ and dS (input dtype); gamma and the 64 x 64
// products f32. An f32 tile times a 16-bit one is a tf32 product (warp_gemm2), X W^T an f16 one.
// 101 KiB: two CTAs per SM.
#pragma once

#include "cuda/path/common.cuh"

namespace fattn::pathk {

template <typename Tin, int D> struct KIntraGamma {
    using Tw = walk_t<Tin>;
    static_assert(sizeof(Tin) == 2, "16-bit inputs (intra_split_at)");
    static constexpr int kThreads = 256, NW = 8, kMinBlocks = 2;
    using FT = F32Tiles<D>;
    static constexpr int SD = FT::SD, S64 = FT::S64, NB = FT::NB, NB64 = FT::NB64;
    static constexpr int STi = tile_stride<Tin>(D), STw = tile_stride<Tw>(D), ST64 = tile_stride<Tin>(kC);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D);
    // layout: gamma (f32 64 x D) | X, then K~ | W | U, then XW (f32 64 x 64), then dS | GU (f32 64 x 64) | dG rows
    static_assert(TI == tile_bytes<Tw>(kC, D) && TI == FT::SMALL && tile_bytes<Tin>(kC, kC) <= TI, "the tiles' places");
    static constexpr size_t OFF_X = FT::BIG, OFF_W = OFF_X + TI, OFF_U = OFF_W + TI, OFF_M2 = OFF_U + TI, OFF_DG = OFF_M2 + TI;
    static constexpr size_t smem() { return OFF_DG + kC * 4; }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const IntraItem it = intra_chunk_major(p);
        const int64_t gs = it.gs;
        const int i = kNcs - 1 - it.c, hq = it.hq, h = hq / p.grp;
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0, nc = ceil_div(sq.len, kC), ci = r * kNcs + i;
        if (ci >= nc) return;
        const int last = int(nc - 1 - r * kNcs < kNcs - 1 ? nc - 1 - r * kNcs : kNcs - 1);  // the segment's last query chunk
        float *sG = reinterpret_cast<float *>(smem), *M1 = reinterpret_cast<float *>(smem + OFF_U),
              *M2 = reinterpret_cast<float *>(smem + OFF_M2), *dgr = reinterpret_cast<float *>(smem + OFF_DG);
        Tw *X16 = reinterpret_cast<Tw *>(smem + OFF_X), *W16 = reinterpret_cast<Tw *>(smem + OFF_W), *U16 = reinterpret_cast<Tw *>(smem + OFF_U);
        Tin *k16 = reinterpret_cast<Tin *>(smem + OFF_X), *ds16 = reinterpret_cast<Tin *>(smem + OFF_U);
        const int64_t c0 = ci * kC, qrow = sq.row0 + c0, hd = int64_t(p.h) * D, hqd = int64_t(p.hq) * D;
        const int nq = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        const int64_t pairs = (gs * p.hq + hq) * int64_t(kIntraPairs);
        int *cnt = p.icnt + (gs * p.hq + hq) * kNcs;
        load_tile<float, kThreads>(sG, SD, p.gam + (qrow * p.hq + hq) * D, hqd, kC, D, nq, D, true);
        for (int a = tid(); a < kC; a += kThreads) dgr[a] = 0.f;
        for (int j = 0; j < i; ++j) {
            const int64_t cj = r * kNcs + j, krow = sq.row0 + cj * kC, slot = pairs + intra_slot(i, j);
            sync();  // the previous pair's K~ and dS read
            // the pair's K~ and dS into the places of X and XW (cp.async; the caller commits)
            auto issue_kd = [&] {
                load_tile<Tin, kThreads>(k16, STi, static_cast<const Tin *>(p.kt) + (krow * p.h + h) * D, hd, kC, D, kC, D, true);
                load_tile<Tin, kThreads>(ds16, ST64, static_cast<const Tin *>(p.dsi) + slot * kC * kC, kC, kC, kC, kC, kC, true);
            };
            if (r >= 1 || j >= 1) {
                // the pair's state, U and W (whole chunks: chunk ci follows cj)
                load_tile<Tw, kThreads>(X16, STw, static_cast<const Tw *>(p.qts) + slot * kC * D, D, kC, D, kC, D, true);
                load_tile<Tw, kThreads>(U16, STw, static_cast<const Tw *>(p.uw) + (krow * p.h + h) * D, hd, kC, D, kC, D, true);
                load_tile_cvt<Tw, float, kThreads, false, 4>(W16, STw, p.w + sq.b * p.w_sb + (sq.begin + cj * kC) * p.w_ss + h * p.w_sh,
                                                            p.w_ss, kC, D, kC, p.K, p.vec_w);
                cp_landed();
                // GU = gamma U^T
                cta_gemm<float, false, false, NB64, NW, 0, Tw>(kC, kC, D, sG, SD, U16, STw, [&](int a, int b, float v) { M2[a * S64 + b] = tf32_round(v); });
                sync();  // U read: XW takes its place
                cta_gemm<Tw, false, false, NB64, NW>(kC, kC, D, X16, STw, W16, STw, [&](int a, int b, float v) { M1[a * S64 + b] = tf32_round(v); });
                // the later query chunks' adds to dU_cj and dW_cj are done
                if (tid() == 0) counter_wait_eq(cnt + j, last - i);
                sync();
                cta_gemm_rmw<float, true, true, NB, NW, kRA>(kC, D, kC, M1, S64, sG, SD, p.du + (krow * p.hq + hq) * D, hqd, -1.f, kC);
                cta_gemm_rmw<float, true, true, NB, NW, kRA, Tw>(kC, D, kC, M2, S64, X16, STw, p.dwacc + (krow * p.hq + hq) * D, hqd, -1.f, kC);
                sync();
                if (tid() == 0) counter_release_inc(cnt + j);
                // X and XW read: K~ and dS take their places while gamma -= GU W runs
                issue_kd();
                cp_commit();
                cta_gemm<float, false, true, NB, NW, kRA, Tw>(kC, D, kC, M2, S64, W16, STw, [&](int a, int c, float v) { sG[a * SD + c] -= v; });
            } else {  // no gamma step (r = 0, j = 0)
                issue_kd();
            }
            cp_landed();
            cta_gemm<Tin, false, true, NB, NW>(kC, D, kC, ds16, ST64, k16, STi, [&](int a, int c, float v) { sG[a * SD + c] += v; });
            if (tid() < kC) dgr[tid()] += p.rsi[slot * kC + tid()];
        }
        sync();
        for (int e = tid(); e < nq * D; e += kThreads) p.gam[((qrow + e / D) * p.hq + hq) * D + e % D] = sG[(e / D) * SD + e % D];
        for (int a = tid(); a < nq; a += kThreads) p.dgs[(qrow + a) * p.hq + hq] += dgr[a];
    }
};

}  // namespace fattn::pathk
