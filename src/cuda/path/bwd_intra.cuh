// bwd_intra.cuh — the two backward kernels of the query chunks' own segment, written as tile
// algebra: every product is a cta_gemm on f32 shared tiles (tf32 tensor cores), every other step
// an elementwise pass, with a barrier between dependent steps.
//
// KSegIntra, per (segment r, query head), query chunks ci = 8r + i (i >= 1) in order; for each,
// the earlier chunks cj = 8r + j of the segment, j ascending (gamma enters as dLoss/dQh[t, r]):
//   X  = Q~_ci walked back through chunks ci-1 .. cj+1: with intra_states_at(D) (params.h: D 128
//        by default) stored by the history producer as it walks (p.qts, every pair's), else
//        walked here once, newest first, before the j loop (the states X for j = i-1 .. 1 kept in
//        p.qts, X for j = 0 in shared)
//   if r >= 1 or j >= 1 (gamma != 0):  XW = X W_cj^T, GU = gamma U_cj^T,
//       dU_cj -= XW^T gamma,  dW_cj -= GU^T X,  gamma -= GU W_cj
//   P = exp(scale (X K~_cj^T + G_t - G_j) - lse),  dS = scale P (dO V_cj^T - delta)
//   gamma += dS K~_cj,  dK~_cj += dS^T X,  dV_cj += P^T dO,  dG rows += dS, columns -= dS
// and stores gamma (now dLoss/dQ~_ci) back into p.gam.
//
// KOwn, per (query chunk ci, query head): the backward of the chunk's own UT formulas
//   QW = LT(Q W^T), A = LT(Q K^T - QW Dm), Q~ = Q - QW U, with gamma = dLoss/dQ~:
//   dA = scale P (dO V^T - delta)      dV += P^T dO       dK_own = dA^T Q       dD = -QW^T dA
//   dU += -QW^T gamma                  dQW = LT(-dA Dm^T - gamma U^T)           dW += dQW^T Q
//   dq = gamma + dA K + dQW W (final, the input dtype)
#pragma once

#include "cuda/path/common.cuh"
#include "cuda/path/prep.cuh"

// The scores of seg-intra's pairs in the input dtype for 16-bit inputs (KSegIntra::kS16).
#ifndef FATTN_PATH_SCORE16
#define FATTN_PATH_SCORE16 1
#endif
// The own-chunk kernel's 16-bit tiles at D 128 for 16-bit inputs (KOwn::kNarrow): 1 = on.
#ifndef FATTN_PATH_OWN16
#define FATTN_PATH_OWN16 1
#endif

namespace fattn::pathk {

// 64 x D f32 tile <- rows of a [rows, ., D]-strided f32 workspace buffer (rows >= n are 0).
template <int D, int NT> PK_DEV void load_ws_f32(float *s, const float *g, int64_t gstride, int n) {
    load_tile<float, NT>(s, F32Tiles<D>::SD, g, gstride, kC, D, n, D, true);
}

// The row statistics of a query chunk's rows (lse in log2 units, delta, gate sums), 0 past row n.
template <int NT>
PK_DEV void query_row_stats(const PathDev &p, const SeqInfo &sq, int hq, int64_t t0, int64_t row, int n, float *lse2, float *dl,
                            float *gq) {
    for (int a = tid(); a < kC; a += NT) {
        const bool ok = a < n;
        lse2[a] = ok ? p.lse[sq.b * p.lse_sb + hq * p.lse_sh + t0 + a] * 1.4426950408889634f : 0.f;
        dl[a] = ok ? p.delta[(row + a) * p.hq + hq] : 0.f;
        gq[a] = ok && p.has_gate ? p.gsum[(row + a) * p.hq + hq] : 0.f;
    }
}

// The scores of a chunk pair in the input dtype, one warp's part of NW (8 or 16): its 16 x W block
// (W = 32 with eight warps, in two 16 x 16 halves so fewer accumulators live at once; 16 with
// sixteen) of S = X K~^T and dP = dO V^T, P = exp(scale (S + G_t - G_j) - lse) (0 at rows >= nq)
// and dS = scale P (dP - delta) into the Tin tiles p16 and ds16 (64 x 64), and the f32 partial
// sums of dS: row sums rsum [64 / W][64] over the warp's W columns, column sums csum [4][64] over
// its 16 rows, each written once. 64 x D tiles of row stride tile_stride<Tin>(D); lse2, dl, gq: the
// query rows', gk: the key rows' gate sums.
template <int NW> constexpr int score_col_blocks() {
    static_assert(NW == 8 || NW == 16, "eight or sixteen warps");
    return NW / 4;
}
template <typename Tin, int D, int NW = 8>
PK_DEV void pair_scores16(const PathDev &p, const Tin *x16, const Tin *k16, const Tin *dO16, const Tin *v16, Tin *p16, Tin *ds16,
                          int nq, const float *lse2, const float *dl, const float *gq, const float *gk, float *rsum, float *csum) {
    constexpr int STi = tile_stride<Tin>(D), ST64 = tile_stride<Tin>(kC);
    constexpr int NCB = score_col_blocks<NW>(), W = kC / NCB, LB = NCB == 2 ? 1 : 2;  // LB = log2(NCB)
    const int w = warp_id(), m0 = (w >> LB) * 16, n0 = (w & (NCB - 1)) * W;
    float rs[2] = {0.f, 0.f};
    for (int half = 0; half < W / 16; ++half) {
        const int nh = n0 + 16 * half;
        float S[2][4], dP[2][4], cs[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        zero_acc(S);
        zero_acc(dP);
        warp_gemm<Tin, false, false, 2>(S, x16, STi, k16, STi, m0, nh, D);
        warp_gemm<Tin, false, false, 2>(dP, dO16, STi, v16, STi, m0, nh, D);
        for (int j = 0; j < 2; ++j)
            for (int hh = 0; hh < 2; ++hh) {
                const int a = m0 + acc_row(2 * hh), b = nh + acc_col(j, 0);
                float P[2], ds[2];
                for (int e = 0; e < 2; ++e) {
                    P[e] = a < nq ? exp2_fast(p.sl2 * (S[j][2 * hh + e] + gq[a] - gk[b + e]) - lse2[a]) : 0.f;
                    ds[e] = p.scale * P[e] * (dP[j][2 * hh + e] - dl[a]);
                    rs[hh] += ds[e];
                    cs[j][e] += ds[e];
                }
                st_pair<Tin>(p16, a * ST64 + b, P[0], P[1]);
                st_pair<Tin>(ds16, a * ST64 + b, ds[0], ds[1]);
            }
        // column partials over the warp's 16 rows (its 8 row lanes), each written once
        for (int j = 0; j < 2; ++j)
            for (int e = 0; e < 2; ++e) {
                float x = cs[j][e];
                x += shfl_xor(x, 4);
                x += shfl_xor(x, 8);
                x += shfl_xor(x, 16);
                if (lane_id() < 4) csum[(m0 / 16) * kC + nh + acc_col(j, e)] = x;
            }
    }
    // row partials over the warp's W columns (the quad's lanes)
    for (int hh = 0; hh < 2; ++hh) {
        const float x = quad_sum(rs[hh]);
        if ((lane_id() & 3) == 0) rsum[(n0 / W) * kC + m0 + acc_row(2 * hh)] = x;
    }
}
// dS's row sum of row a and column sum of column b from pair_scores16<.., NW>'s partials, in a fixed order.
template <int NW = 8> PK_DEV float ds_row_sum(const float *rsum, int a) {
    float s = rsum[a];
    for (int c = 1; c < score_col_blocks<NW>(); ++c) s += rsum[c * kC + a];
    return s;
}
PK_DEV float ds_col_sum(const float *csum, int b) { return ((csum[b] + csum[kC + b]) + csum[2 * kC + b]) + csum[3 * kC + b]; }

template <typename Tin, int D> struct KSegIntra {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 256, NW = 8, kMinBlocks = D <= 64 ? 2 : 1, CI = cvt_if<D>();
    using FT = F32Tiles<D>;
    static constexpr int SD = FT::SD, S64 = FT::S64, NB = FT::NB, NB64 = FT::NB64;
    // kS16: the scores of a pair (S, dP, then gamma += dS K~, dK~ += dS^T X, dV += P^T dO) in the
    // input dtype, as seg-inter and dK/dV compute the same products (16-bit inputs, with
    // FATTN_PATH_SCORE16); else on tf32 over f32 tiles
    static constexpr bool kS16 = FATTN_PATH_SCORE16 && sizeof(Tin) == 2;
    static constexpr int STi = tile_stride<Tin>(D), ST64 = tile_stride<Tin>(kC);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D), T64 = tile_bytes<Tin>(kC, kC);
    // sB (U or V) shares its space with M1, a 64 x 64 product formed once sB is read: six tiles,
    // so two CTAs share an SM at D <= 64 and every segment of a T 4096 H 32 run is resident at once.
    // kS16: dO in Tin, and the gamma step's W, U / M1, M2 (region R) give their space to the
    // scores' K~, V, X, P, dS (Tin) and the dG partial sums
    static constexpr size_t UB = FT::BIG > FT::SMALL ? FT::BIG : FT::SMALL;
    static constexpr size_t RG = FT::BIG + UB + FT::SMALL, RS = 3 * TI + 2 * T64 + 6 * kC * 4;
    // layout: dO (sDO / dO16) | sG | sX | R (RZ bytes) | lse2, dl, gq, gk, dgr (64 floats each)
    static constexpr size_t DOB = kS16 ? TI : FT::BIG, OFF_R = DOB + 2 * FT::BIG;
    static constexpr size_t RZ = kS16 && RS > RG ? RS : RG, OFF_SMALL = OFF_R + RZ;
    // kPreKV (D 128, 16-bit, FATTN_PATH_LOAD_OVERLAP): K~ and V of a pair in a region of their own
    // (one CTA per SM has the room), loaded while gamma's step runs
    static constexpr bool kPreKV = kS16 && FATTN_PATH_LOAD_OVERLAP && D > 64;
    static constexpr size_t OFF_KV = OFF_SMALL + 5 * kC * 4;
    static constexpr size_t smem() { return OFF_KV + (kPreKV ? 2 * TI : 0); }

    // The pair's K~ and V into Tin tiles at k16 and k16 + TI (cp.async; the caller commits).
    PK_DEV static void issue_kv(const PathDev &p, const Tin *gkt, const Tin *gv, Tin *k16) {
        load_tile<Tin, kThreads>(k16, STi, gkt, int64_t(p.h) * D, kC, D, kC, D, true);
        load_tile<Tin, kThreads>(k16 + TI / sizeof(Tin), STi, gv, p.v_ss, kC, D, kC, p.V, p.vec_v);
    }

    // The scores of pair (query chunk, key chunk krow) in the input dtype (kS16; the gamma step is
    // done, R is free): K~, V (cp.async; kPreKV: issued by the caller) and X (from sX) into Tin tiles,
    // then each warp its 16 x 32 block of S = X K~^T and dP = dO V^T in registers, P and dS into
    // Tin tiles and the f32 partial row / column sums of dS into rsum / csum (fixed order); then
    // gamma += dS K~, dK~ += dS^T X, dV += P^T dO and the dG sums.
    PK_DEV static void scores16(const PathDev &p, const Tin *gkt, const Tin *gv, char *smem, int nq, int64_t krow, int hq,
                                int64_t hqd) {
        const float *sX = reinterpret_cast<const float *>(smem + DOB + FT::BIG);
        float *sG = reinterpret_cast<float *>(smem + DOB);
        char *R = smem + OFF_R;
        const Tin *dO16 = reinterpret_cast<const Tin *>(smem);
        Tin *k16 = reinterpret_cast<Tin *>(kPreKV ? smem + OFF_KV : R), *v16 = k16 + TI / sizeof(Tin),
            *x16 = reinterpret_cast<Tin *>(R + 2 * TI), *p16 = reinterpret_cast<Tin *>(R + 3 * TI),
            *ds16 = reinterpret_cast<Tin *>(R + 3 * TI + T64);
        float *rsum = reinterpret_cast<float *>(R + 3 * TI + 2 * T64), *csum = rsum + 2 * kC;  // [2][64], [4][64]
        float *lse2 = reinterpret_cast<float *>(smem + OFF_SMALL), *dl = lse2 + kC, *gq = dl + kC, *gk = gq + kC,
              *dgr = gk + kC;
        if constexpr (!kPreKV) {
            issue_kv(p, gkt, gv, k16);
            cp_commit();
        }
        for (int e = tid(); e < kC * D / 2; e += kThreads) {
            const int a = e / (D / 2), c = 2 * (e % (D / 2));
            st_pair<Tin>(x16, a * STi + c, sX[a * SD + c], sX[a * SD + c + 1]);
        }
        for (int b = tid(); b < kC; b += kThreads) gk[b] = p.has_gate ? p.gsum[(krow + b) * p.hq + hq] : 0.f;
        cp_wait<0>();
        sync();
        pair_scores16<Tin, D>(p, x16, k16, dO16, v16, p16, ds16, nq, lse2, dl, gq, gk, rsum, csum);
        sync();
        cta_gemm<Tin, false, true, NB, NW>(kC, D, kC, ds16, ST64, k16, STi, [&](int a, int c, float v) { sG[a * SD + c] += v; });
        cta_gemm_rmw<Tin, true, true, NB, NW>(kC, D, kC, ds16, ST64, x16, STi, dkt_of<D>(p, krow) + hq * D, hqd, 1.f, kC);
        cta_gemm_rmw<Tin, true, true, NB, NW>(kC, D, kC, p16, ST64, dO16, STi, p.dvacc + (krow * p.hq + hq) * D, hqd, 1.f, kC);
        if (tid() < kC) {
            dgr[tid()] += ds_row_sum(rsum, tid());
        } else if (tid() < 2 * kC) {
            const int b = tid() - kC;
            p.dgs[(krow + b) * p.hq + hq] -= ds_col_sum(csum, b);
        }
    }

    // The same in tf32 over f32 tiles (K~ into sA, V into sB, then dP and P / dS into M2 / M1).
    PK_DEV static void scores_tf32(const PathDev &p, const TileRegs<Tin, D, kThreads> &rk, const TileRegs<Tin, D, kThreads> &rv,
                                   const Tin *gv, char *smem, int nq, int64_t krow, int hq, int64_t hqd) {
        float *sDO = reinterpret_cast<float *>(smem), *sG = reinterpret_cast<float *>(smem + DOB), *sX = sG + kC * SD;
        float *sA = reinterpret_cast<float *>(smem + OFF_R), *sB = sA + kC * SD, *M1 = sB;
        float *M2 = reinterpret_cast<float *>(smem + OFF_R + FT::BIG + UB);
        float *lse2 = reinterpret_cast<float *>(smem + OFF_SMALL), *dl = lse2 + kC, *gq = dl + kC, *gk = gq + kC,
              *dgr = gk + kC;
        rk.template put<true>(sA, SD);
        if (p.vec_v) rv.template put<true>(sB, SD);
        else load_tile_cvt<float, Tin, kThreads, true, CI>(sB, SD, gv, p.v_ss, kC, D, kC, p.V, false);
        for (int b = tid(); b < kC; b += kThreads) gk[b] = p.has_gate ? p.gsum[(krow + b) * p.hq + hq] : 0.f;
        sync();
        cta_gemm<float, false, false, NB64, NW, kRA | kRB>(kC, kC, D, sDO, SD, sB, SD, [&](int a, int b, float v) { M2[a * S64 + b] = v; });
        sync();  // V read: M1 (P) takes its place
        cta_gemm<float, false, false, NB64, NW, kRA | kRB>(kC, kC, D, sX, SD, sA, SD, [&](int a, int b, float v) {
            const float P = a < nq ? exp2_fast(p.sl2 * (v + gq[a] - gk[b]) - lse2[a]) : 0.f;
            M1[a * S64 + b] = tf32_round(P);
            M2[a * S64 + b] = p.scale * P * (M2[a * S64 + b] - dl[a]);
        });
        sync();
        cta_gemm<float, false, true, NB, NW, kRB>(kC, D, kC, M2, S64, sA, SD, [&](int a, int c, float v) { sG[a * SD + c] += v; });
        cta_gemm_rmw<float, true, true, NB, NW, kRB>(kC, D, kC, M2, S64, sX, SD, dkt_of<D>(p, krow) + hq * D, hqd, 1.f, kC);
        cta_gemm_rmw<float, true, true, NB, NW, kRA | kRB>(kC, D, kC, M1, S64, sDO, SD, p.dvacc + (krow * p.hq + hq) * D, hqd, 1.f, kC);
        if (tid() < kC) {
            float s = 0.f;
            for (int b = 0; b < kC; ++b) s += M2[tid() * S64 + b];
            dgr[tid()] += s;
        } else if (tid() < 2 * kC) {
            const int b = tid() - kC;
            float s = 0.f;
            for (int a = 0; a < kC; ++a) s += M2[a * S64 + b];
            p.dgs[(krow + b) * p.hq + hq] -= s;
        }
    }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const int64_t gs = bid_x();
        const int hq = bid_y(), h = hq / p.grp;
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0, nc = ceil_div(sq.len, kC);
        float *sDO = reinterpret_cast<float *>(smem), *sG = reinterpret_cast<float *>(smem + DOB), *sX = sG + kC * SD;
        char *R = smem + OFF_R;
        float *sA = reinterpret_cast<float *>(R), *sB = sA + kC * SD, *M1 = sB, *M2 = reinterpret_cast<float *>(R + FT::BIG + UB);
        float *lse2 = reinterpret_cast<float *>(smem + OFF_SMALL), *dl = lse2 + kC, *gq = dl + kC, *dgr = gq + 2 * kC;
        Tin *dO16 = reinterpret_cast<Tin *>(smem);  // kS16: dO in sDO's place (the score functions have the other tiles)
        // kSt (intra_states_at): every pair's state X(j) comes from KHist (kIntraPairs slots); else
        // the states X(1 .. 6) of the query chunk in work, walked here
        constexpr bool kSt = intra_states_at(D);
        Tw *qts = static_cast<Tw *>(p.qts) + (gs * p.hq + hq) * (kSt ? kIntraPairs : kNcs - 2) * kC * D;
        const int64_t hd = int64_t(p.h) * D, hqd = int64_t(p.hq) * D;
        // chunk lc's W / U rows (the last chunk of a sequence may be partial: rows past it are 0)
        auto rows_of = [&](int64_t lc) { return int(sq.len - lc * kC < kC ? sq.len - lc * kC : kC); };
        auto ldW = [&](float *s, int64_t lc) { load_w_f32<kThreads>(s, SD, p, sq, lc * kC, h, D, rows_of(lc)); };
        auto ldU = [&](float *s, int64_t lc) { load_u_f32<Tin, kThreads, true, CI>(s, SD, p, sq.row0 + lc * kC, h, D, rows_of(lc)); };
        // Operand flags (common.cuh): U, dO, K~, V, the states X of the pair loop and the products
        // read only as operands are stored as tf32 values; Q (16-bit inputs) is one already.
        for (int64_t i = 1; i < kNcs; ++i) {
            const int64_t ci = r * kNcs + i;
            if (ci >= nc) break;
            const int64_t c0 = ci * kC, t0 = sq.begin + c0, qrow = sq.row0 + c0;
            const int nq = int(sq.len - c0 < kC ? sq.len - c0 : kC);
            sync();
            const Tin *gdo = static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh;
            if constexpr (kS16) load_tile<Tin, kThreads>(dO16, STi, gdo, p.do_ss, kC, D, nq, p.V, p.vec_do);
            else load_tile_cvt<float, Tin, kThreads, true, CI>(sDO, SD, gdo, p.do_ss, kC, D, nq, p.V, p.vec_do);
            load_ws_f32<D, kThreads>(sG, p.gam + (qrow * p.hq + hq) * D, hqd, nq);
            if constexpr (!kSt) {
                load_tile_cvt<float, Tin, kThreads, false, CI>(sX, SD, static_cast<const Tin *>(p.q) + sq.b * p.q_sb + t0 * p.q_ss + hq * p.q_sh,
                                                    p.q_ss, kC, D, nq, p.K, p.vec_q);
                ldW(sA, ci);
                ldU(sB, ci);
            }
            for (int a = tid(); a < kC; a += kThreads) {
                const bool ok = a < nq;
                lse2[a] = ok ? p.lse[sq.b * p.lse_sb + hq * p.lse_sh + t0 + a] * 1.4426950408889634f : 0.f;
                dl[a] = ok ? p.delta[(qrow + a) * p.hq + hq] : 0.f;
                gq[a] = ok && p.has_gate ? p.gsum[(qrow + a) * p.hq + hq] : 0.f;
                dgr[a] = 0.f;
            }
            cp_landed();
            if constexpr (!kSt) {  // the states of this query chunk, walked here
                // Q~ = Q - LT(Q W^T) U
                constexpr int kQ = sizeof(Tin) == 2 ? kRA : 0;
                cta_gemm<float, false, false, NB64, NW, kQ>(kC, kC, D, sX, SD, sA, SD, [&](int a, int b, float v) { M2[a * S64 + b] = b <= a ? tf32_round(v) : 0.f; });
                sync();
                cta_gemm<float, false, true, NB, NW, kRA | kRB>(kC, D, kC, M2, S64, sB, SD, [&](int a, int c, float v) { sX[a * SD + c] -= v; });
                sync();
                // the states newest first: X(j) for j = i-1 .. 1 into p.qts, then X(0) stays in sX
                for (int64_t j = i - 1; j >= 1; --j) {
                    Tw *xs = qts + (j - 1) * kC * D;
                    const int64_t c2 = r * kNcs + j;  // X(j-1) = X(j) - (X(j) W^T) U through chunk cj
                    sync();
                    for (int e = tid(); e < kC * D; e += kThreads) xs[e] = from_f<Tw>(sX[(e / D) * SD + e % D]);
                    ldW(sA, c2);
                    ldU(sB, c2);
                    cp_landed();
                    cta_gemm<float, false, false, NB64, NW>(kC, kC, D, sX, SD, sA, SD, [&](int a, int b, float v) { M2[a * S64 + b] = tf32_round(v); });
                    sync();
                    cta_gemm<float, false, true, NB, NW, kRA | kRB>(kC, D, kC, M2, S64, sB, SD, [&](int a, int c, float v) { sX[a * SD + c] -= v; });
                }
                // X(0) from here on is read only as an operand
                sync();
                for (int e = tid(); e < kC * D; e += kThreads) sX[(e / D) * SD + e % D] = tf32_round(sX[(e / D) * SD + e % D]);
            }
            for (int64_t j = 0; j < i; ++j) {
                // the pair's state to load: from KHist (kSt), else X(j >= 1) from this kernel's walk
                // (X(0) is in sX)
                const bool ldx = kSt || j > 0;
                auto xs = [&] { return kSt ? qts + intra_slot(i, j) * kC * D : qts + (j - 1) * kC * D; };
                const int64_t cj = r * kNcs + j, krow = sq.row0 + cj * kC;
                // the scores' K~ and V tiles load while the states and gamma's step run
                const Tin *gkt = static_cast<const Tin *>(p.kt) + (krow * p.h + h) * D;
                const Tin *gv = static_cast<const Tin *>(p.v) + sq.b * p.v_sb + (sq.begin + cj * kC) * p.v_ss + h * p.v_sh;
                TileRegs<Tin, D, kThreads> rk, rv;
                if constexpr (!kS16) {
                    rk.issue(gkt, hd, kC, D);
                    if (p.vec_v) rv.issue(gv, p.v_ss, kC, p.V);
                }
                [[maybe_unused]] Tin *kv16 = reinterpret_cast<Tin *>(smem + OFF_KV);  // kPreKV
                if (r >= 1 || j >= 1) {  // the state X(j) (j >= 1), then gamma back through chunk cj
                    sync();
                    ldW(sA, cj);
                    if constexpr (kS16 && FATTN_PATH_LOAD_OVERLAP) {
                        // the state and U in flight together (16-byte loads in registers) beside W's
                        // cp.async (and kPreKV: the scores' K~ and V, a group of their own): one round trip
                        if constexpr (kPreKV) {
                            cp_commit();
                            issue_kv(p, gkt, gv, kv16);
                        }
                        TileRegs<Tw, D, kThreads> rx, ru;
                        if (ldx) rx.issue(xs(), D, kC, D);
                        ru.issue(static_cast<const Tw *>(p.uw) + (krow * p.h + h) * D, hd, rows_of(cj), D);
                        if (ldx) rx.template put<true>(sX, SD);
                        ru.template put<true>(sB, SD);
                    } else {
                        if (ldx) load_tile_cvt<float, Tw, kThreads, true, CI>(sX, SD, xs(), D, kC, D, kC, D, true);
                        ldU(sB, cj);
                    }
                    if constexpr (kPreKV) {  // W landed, K~ and V may still be in flight
                        cp_commit();
                        cp_wait<1>();
                        sync();
                    } else {
                        cp_landed();
                    }
                    cta_gemm<float, false, false, NB64, NW, kRB>(kC, kC, D, sG, SD, sB, SD, [&](int a, int b, float v) { M2[a * S64 + b] = tf32_round(v); });
                    sync();  // U read: M1 takes its place
                    cta_gemm<float, false, false, NB64, NW, kRA>(kC, kC, D, sX, SD, sA, SD, [&](int a, int b, float v) { M1[a * S64 + b] = tf32_round(v); });
                    sync();
                    cta_gemm_rmw<float, true, true, NB, NW, kRA>(kC, D, kC, M1, S64, sG, SD, p.du + (krow * p.hq + hq) * D, hqd, -1.f, kC);
                    cta_gemm_rmw<float, true, true, NB, NW, kRA | kRB>(kC, D, kC, M2, S64, sX, SD, p.dwacc + (krow * p.hq + hq) * D, hqd, -1.f, kC);
                    sync();
                    cta_gemm<float, false, true, NB, NW, kRA>(kC, D, kC, M2, S64, sA, SD, [&](int a, int c, float v) { sG[a * SD + c] -= v; });
                } else {  // no gamma step (r = 0, j = 0)
                    if constexpr (kPreKV || kSt) sync();
                    if constexpr (kPreKV) {
                        issue_kv(p, gkt, gv, kv16);
                        cp_commit();
                    }
                    if constexpr (kSt) load_tile_cvt<float, Tw, kThreads, true, CI>(sX, SD, xs(), D, kC, D, kC, D, true);
                }
                // scores against chunk cj
                sync();
                if constexpr (kS16) scores16(p, gkt, gv, smem, nq, krow, hq, hqd);
                else scores_tf32(p, rk, rv, gv, smem, nq, krow, hq, hqd);
            }
            sync();
            for (int e = tid(); e < nq * D; e += kThreads) p.gam[((qrow + e / D) * p.hq + hq) * D + e % D] = sG[(e / D) * SD + e % D];
            for (int a = tid(); a < nq; a += kThreads) p.dgs[(qrow + a) * p.hq + hq] += dgr[a];
        }
    }
};

template <typename Tin, int D> struct KOwn {
    using Tw = walk_t<Tin>;
    // kNarrow (16-bit inputs at D 128, FATTN_PATH_OWN16): Q, K, V, dO, U and Dm stay 16-bit tiles
    // (an f32 tile times a 16-bit one runs on tf32 with the 16-bit fragments widened in registers,
    // warp_gemm2; Q K^T and dO V^T on the 16-bit mma) and W is loaded twice: 102 KiB instead of
    // 167, so two CTAs share an SM (run16)
    static constexpr bool kNarrow = FATTN_PATH_OWN16 && sizeof(Tin) == 2 && D > 64;
    static constexpr int NW = 8, kThreads = 32 * NW, kMinBlocks = D <= 64 || kNarrow ? 2 : 1, CI = cvt_if<D>();
    using FT = F32Tiles<D>;
    static constexpr int SD = FT::SD, S64 = FT::S64, NB = FT::NB, NB64 = FT::NB64;
    static constexpr int STi = tile_stride<Tin>(D), STw64 = tile_stride<Tw>(kC);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D);
    // B2 holds K, Dm, V, U, Dm, K in turn (Dm loaded twice rather than kept): six tiles, two CTAs
    // per SM at D <= 64
    static constexpr size_t UB = FT::BIG > FT::SMALL ? FT::BIG : FT::SMALL;
    static constexpr size_t smem() {
        return kNarrow ? FT::BIG + 2 * TI + 2 * FT::SMALL + 3 * kC * 4 : 3 * FT::BIG + UB + 2 * FT::SMALL + 4 * kC * 4;
    }
    static_assert(!kNarrow || (TI == FT::SMALL && tile_bytes<Tw>(kC, kC) <= TI), "run16's tile places");

    PK_DEV static void run(const PathDev &p, char *smem) {
        if constexpr (kNarrow) run16(p, smem);
        else run32(p, smem);
    }

    // The pieces run16 and run32 share.
    // dG of the chunk's rows += dA's row sums - its column sums (dA: a synced 64 x 64 f32 tile)
    PK_DEV static void add_dg(const PathDev &p, int hq, int64_t row, int n, const float *dA) {
        if (tid() < n) {
            const int x = tid();
            float s = 0.f;
            for (int b = 0; b < kC; ++b) s += dA[x * S64 + b];
            for (int a = 0; a < kC; ++a) s -= dA[a * S64 + x];
            p.dgs[(row + x) * p.hq + hq] += s;
        }
    }
    // dq (the input dtype) from the f32 64 x D tile s
    PK_DEV static void store_dq(const PathDev &p, const SeqInfo &sq, int hq, int64_t t0, int n, const float *s) {
        for (int e = tid(); e < n * D; e += kThreads) {
            const int a = e / D, c = e % D;
            if (c < p.K) st<Tin>(p.dq, sq.b * p.dq_sb + (t0 + a) * p.dq_ss + hq * p.dq_sh + c, s[a * SD + c]);
        }
    }

    // The same steps with 16-bit tiles. Places: F1 (an f32 64 x D tile) holds W (step 1), dO
    // (step 3), then gamma, which becomes dq; T1 and T2 (16-bit 64 x D tiles) hold Q (steps 1-7)
    // and K, Dm, V, U, Dm, K in turn; at step 8 W's two 64-column halves, as f32 64 x 64 tiles,
    // take Q's place and then K's. M1, M2: f32 64 x 64 products as in run32.
    PK_DEV static void run16(const PathDev &p, char *smem) {
        const int64_t gc = bid_x();
        const int hq = bid_y(), h = hq / p.grp;
        const SeqInfo sq = seq_of_chunk(p, gc);
        const int64_t ci = gc - sq.chunk0, c0 = ci * kC, t0 = sq.begin + c0, row = sq.row0 + c0;
        const int n = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        float *sW = reinterpret_cast<float *>(smem), *sG = sW;
        Tin *dO16 = reinterpret_cast<Tin *>(smem), *Q16 = reinterpret_cast<Tin *>(smem + FT::BIG);
        char *T2 = smem + FT::BIG + TI;
        Tin *K16 = reinterpret_cast<Tin *>(T2), *V16 = K16;
        Tw *U16 = reinterpret_cast<Tw *>(T2), *Dm16 = U16;
        float *Wlo = reinterpret_cast<float *>(Q16), *Whi = reinterpret_cast<float *>(T2);
        float *M1 = reinterpret_cast<float *>(smem + FT::BIG + 2 * TI), *M2 = M1 + kC * S64;
        float *lse2 = M2 + kC * S64, *dl = lse2 + kC, *gq = dl + kC;
        const int64_t hqd = int64_t(p.hq) * D;
        const Tin *gk = static_cast<const Tin *>(p.k) + sq.b * p.k_sb + t0 * p.k_ss + h * p.k_sh;
        const float *gw = p.w + sq.b * p.w_sb + t0 * p.w_ss + h * p.w_sh;
        auto ldK = [&] { load_tile<Tin, kThreads>(K16, STi, gk, p.k_ss, kC, D, n, p.K, p.vec_k); };
        auto ldDm = [&] { load_dm16<Tw, kThreads>(Dm16, STw64, static_cast<const Tw *>(p.dmat) + (gc * p.h + h) * kC * kC); };
        // W's columns [64 half, 64 half + 64) as an f32 64 x 64 tile (cp.async where W's rows allow)
        auto ldWhalf = [&](float *s, int half) {
            const int cv = p.K - 64 * half;
            load_tile<float, kThreads>(s, S64, gw + 64 * half, p.w_ss, kC, kC, n, cv > 0 ? cv : 0, p.vec_w);
        };
        // Operand flags (common.cuh): the 16-bit tiles are tf32 values; QW and dQW are stored as
        // tf32 values; P, dA, gamma and W are read as they are.
        // 1. QW = LT(Q W^T);  Q K^T
        load_tile<Tin, kThreads>(Q16, STi, static_cast<const Tin *>(p.q) + sq.b * p.q_sb + t0 * p.q_ss + hq * p.q_sh, p.q_ss, kC, D,
                                 n, p.K, p.vec_q);
        load_w_f32<kThreads>(sW, SD, p, sq, c0, h, D, n);
        ldK();
        query_row_stats<kThreads>(p, sq, hq, t0, row, n, lse2, dl, gq);
        cp_landed();
        cta_gemm<Tin, false, false, NB64, NW>(kC, kC, D, Q16, STi, sW, SD, [&](int a, int b, float v) { M1[a * S64 + b] = b <= a ? tf32_round(v) : 0.f; });
        cta_gemm<Tin, false, false, NB64, NW>(kC, kC, D, Q16, STi, K16, STi, [&](int a, int b, float v) { M2[a * S64 + b] = v; });
        sync();
        ldDm();
        sync();
        // 2. A = Q K^T - QW Dm, then P (causal, keys < n, rows < n)
        cta_gemm<float, false, true, NB64, NW, kRA>(kC, kC, kC, M1, S64, Dm16, STw64, [&](int a, int b, float v) {
            const float s = M2[a * S64 + b] - v;
            M2[a * S64 + b] = (b <= a && a < n) ? exp2_fast(p.sl2 * (s + gq[a] - gq[b]) - lse2[a]) : 0.f;
        });
        sync();
        // 3. dV += P^T dO;  dA = scale P (dO V^T - delta)
        load_tile<Tin, kThreads>(dO16, STi, static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh, p.do_ss,
                                 kC, D, n, p.V, p.vec_do);
        load_tile<Tin, kThreads>(V16, STi, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + t0 * p.v_ss + h * p.v_sh, p.v_ss, kC, D, n,
                                 p.V, p.vec_v);
        cp_landed();
        cta_gemm_rmw<float, true, true, NB, NW>(kC, D, kC, M2, S64, dO16, STi, p.dvacc + (row * p.hq + hq) * D, hqd, 1.f, n);
        sync();
        cta_gemm<Tin, false, false, NB64, NW>(kC, kC, D, dO16, STi, V16, STi, [&](int a, int b, float v) {
            M2[a * S64 + b] = p.scale * M2[a * S64 + b] * (v - dl[a]);
        });
        sync();
        // 4. gamma (p.gam is the dK_own buffer: read the chunk's gamma before writing its dK_own) and U
        load_ws_f32<D, kThreads>(sG, p.gam + (row * p.hq + hq) * D, hqd, n);
        load_tile<Tw, kThreads>(U16, STi, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, int64_t(p.h) * D, kC, D, n, D, true);
        cp_landed();
        // 5. dK_own = dA^T Q;  dD = -QW^T dA;  dG
        cta_gemm<float, true, true, NB, NW>(kC, D, kC, M2, S64, Q16, STi, [&](int b, int c, float v) {
            if (b < n) p.dko[((row + b) * p.hq + hq) * D + c] = v;
        });
        cta_gemm<float, true, true, NB64, NW, kRA>(kC, kC, kC, M1, S64, M2, S64, [&](int c, int b, float v) {
            p.ddm[(gc * p.hq + hq) * kC * kC + c * kC + b] = -v;
        });
        add_dg(p, hq, row, n, M2);
        sync();
        // 6. dU += -QW^T gamma;  dQW = LT(-dA Dm^T - gamma U^T)
        cta_gemm_rmw<float, true, true, NB, NW, kRA>(kC, D, kC, M1, S64, sG, SD, p.du + (row * p.hq + hq) * D, hqd, -1.f, n);
        sync();
        cta_gemm<float, false, false, NB64, NW>(kC, kC, D, sG, SD, U16, STi, [&](int a, int c, float v) { M1[a * S64 + c] = -v; });
        sync();
        ldDm();
        sync();
        cta_gemm<float, false, false, NB64, NW>(kC, kC, kC, M2, S64, Dm16, STw64, [&](int a, int c, float v) {
            M1[a * S64 + c] = c <= a ? tf32_round(M1[a * S64 + c] - v) : 0.f;
        });
        sync();
        // 7. dW += dQW^T Q, with K in flight for step 8
        ldK();
        cp_commit();
        cta_gemm_rmw<float, true, true, NB, NW, kRA>(kC, D, kC, M1, S64, Q16, STi, p.dwacc + (row * p.hq + hq) * D, hqd, 1.f, n);
        sync();  // Q read: W's first half takes its place
        // 8. dq = gamma + dA K + dQW W
        ldWhalf(Wlo, 0);
        cp_commit();
        cp_wait<1>();
        sync();
        cta_gemm<float, false, true, NB, NW>(kC, D, kC, M2, S64, K16, STi, [&](int a, int c, float v) { sG[a * SD + c] += v; });
        cp_wait<0>();
        sync();  // K read: W's second half takes its place
        ldWhalf(Whi, 1);
        cp_commit();
        cta_gemm<float, false, true, NB64, NW, kRA>(kC, kC, kC, M1, S64, Wlo, S64, [&](int a, int c, float v) { sG[a * SD + c] += v; });
        cp_wait<0>();
        sync();
        cta_gemm<float, false, true, NB64, NW, kRA>(kC, kC, kC, M1, S64, Whi, S64, [&](int a, int c, float v) { sG[a * SD + kC + c] += v; });
        sync();
        store_dq(p, sq, hq, t0, n, sG);
    }

    PK_DEV static void run32(const PathDev &p, char *smem) {
        const int64_t gc = bid_x();
        const int hq = bid_y(), h = hq / p.grp;
        const SeqInfo sq = seq_of_chunk(p, gc);
        const int64_t ci = gc - sq.chunk0, c0 = ci * kC, t0 = sq.begin + c0, row = sq.row0 + c0;
        const int n = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        float *B0 = reinterpret_cast<float *>(smem), *B1 = B0 + kC * SD, *B3 = B1 + kC * SD;
        float *B2 = B3 + kC * SD, *M1 = reinterpret_cast<float *>(smem + 3 * FT::BIG + UB), *M2 = M1 + kC * S64;
        float *lse2 = M2 + kC * S64, *dl = lse2 + kC, *gq = dl + kC;
        const int64_t hqd = int64_t(p.hq) * D;
        auto ldK = [&](float *s) {
            load_tile_cvt<float, Tin, kThreads, true, CI>(s, SD, static_cast<const Tin *>(p.k) + sq.b * p.k_sb + t0 * p.k_ss + h * p.k_sh,
                                                      p.k_ss, kC, D, n, p.K, p.vec_k);
        };
        // Operand flags (common.cuh): Q, K, V, dO, U, Dm and the products read only as operands
        // (QW, dQW) are stored as tf32 values; P, dA and gamma are read element-wise too.
        // 1. QW = LT(Q W^T)
        load_tile_cvt<float, Tin, kThreads, true, CI>(B0, SD, static_cast<const Tin *>(p.q) + sq.b * p.q_sb + t0 * p.q_ss + hq * p.q_sh,
                                                  p.q_ss, kC, D, n, p.K, p.vec_q);
        load_w_f32<kThreads>(B1, SD, p, sq, c0, h, D, n);
        ldK(B2);
        auto ldDm = [&] { load_dm_f32<Tw, kThreads>(B2, S64, static_cast<const Tw *>(p.dmat) + (gc * p.h + h) * kC * kC); };
        query_row_stats<kThreads>(p, sq, hq, t0, row, n, lse2, dl, gq);
        cp_landed();
        cta_gemm<float, false, false, NB64, NW, kRA>(kC, kC, D, B0, SD, B1, SD, [&](int a, int b, float v) { M1[a * S64 + b] = b <= a ? tf32_round(v) : 0.f; });
        cta_gemm<float, false, false, NB64, NW, kRA | kRB>(kC, kC, D, B0, SD, B2, SD, [&](int a, int b, float v) { M2[a * S64 + b] = v; });
        sync();
        ldDm();
        sync();
        // 2. A = Q K^T - QW Dm, then P (causal, keys < n, rows < n)
        cta_gemm<float, false, true, NB64, NW, kRA | kRB>(kC, kC, kC, M1, S64, B2, S64, [&](int a, int b, float v) {
            const float s = M2[a * S64 + b] - v;
            M2[a * S64 + b] = (b <= a && a < n) ? exp2_fast(p.sl2 * (s + gq[a] - gq[b]) - lse2[a]) : 0.f;
        });
        sync();
        // 3. dV += P^T dO;  dA = scale P (dO V^T - delta)
        load_tile_cvt<float, Tin, kThreads, true, CI>(B3, SD, static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh,
                                                  p.do_ss, kC, D, n, p.V, p.vec_do);
        load_tile_cvt<float, Tin, kThreads, true, CI>(B2, SD, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + t0 * p.v_ss + h * p.v_sh,
                                                  p.v_ss, kC, D, n, p.V, p.vec_v);
        sync();
        cta_gemm_rmw<float, true, true, NB, NW, kRB>(kC, D, kC, M2, S64, B3, SD, p.dvacc + (row * p.hq + hq) * D, hqd, 1.f, n);
        sync();
        cta_gemm<float, false, false, NB64, NW, kRA | kRB>(kC, kC, D, B3, SD, B2, SD, [&](int a, int b, float v) {
            M2[a * S64 + b] = p.scale * M2[a * S64 + b] * (v - dl[a]);
        });
        sync();
        // 4. gamma (p.gam is the dK_own buffer: read the chunk's gamma before writing its dK_own) and U
        load_ws_f32<D, kThreads>(B3, p.gam + (row * p.hq + hq) * D, hqd, n);
        load_u_f32<Tin, kThreads, true, CI>(B2, SD, p, row, h, D, n);
        cp_landed();
        // 5. dK_own = dA^T Q;  dD = -QW^T dA;  dG
        cta_gemm<float, true, true, NB, NW, kRB>(kC, D, kC, M2, S64, B0, SD, [&](int b, int c, float v) {
            if (b < n) p.dko[((row + b) * p.hq + hq) * D + c] = v;
        });
        cta_gemm<float, true, true, NB64, NW, kRA>(kC, kC, kC, M1, S64, M2, S64, [&](int c, int b, float v) {
            p.ddm[(gc * p.hq + hq) * kC * kC + c * kC + b] = -v;
        });
        add_dg(p, hq, row, n, M2);
        sync();
        // 6. dU += -QW^T gamma;  dQW = LT(-dA Dm^T - gamma U^T)
        cta_gemm_rmw<float, true, true, NB, NW, kRA>(kC, D, kC, M1, S64, B3, SD, p.du + (row * p.hq + hq) * D, hqd, -1.f, n);
        sync();
        cta_gemm<float, false, false, NB64, NW, kRB>(kC, kC, D, B3, SD, B2, SD, [&](int a, int c, float v) { M1[a * S64 + c] = -v; });
        sync();
        ldDm();
        sync();
        cta_gemm<float, false, false, NB64, NW, kRB>(kC, kC, kC, M2, S64, B2, S64, [&](int a, int c, float v) {
            M1[a * S64 + c] = c <= a ? tf32_round(M1[a * S64 + c] - v) : 0.f;
        });
        sync();
        // 7. dW += dQW^T Q
        cta_gemm_rmw<float, true, true, NB, NW, kRA | kRB>(kC, D, kC, M1, S64, B0, SD, p.dwacc + (row * p.hq + hq) * D, hqd, 1.f, n);
        sync();
        // 8. dq = gamma + dA K + dQW W
        ldK(B2);
        sync();
        cta_gemm<float, false, true, NB, NW, kRB>(kC, D, kC, M2, S64, B2, SD, [&](int a, int c, float v) { B3[a * SD + c] += v; });
        sync();
        cta_gemm<float, false, true, NB, NW, kRA>(kC, D, kC, M1, S64, B1, SD, [&](int a, int c, float v) { B3[a * SD + c] += v; });
        sync();
        store_dq(p, sq, hq, t0, n, B3);
    }
};

}  // namespace fattn::pathk
