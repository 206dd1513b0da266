// bwd_chain.cuh — the kv-head side of the backward: the group sum of the per-query-head
// partials, the segment chain (K^ and E back to U, W, K~) and the UT chain (back to k, w, beta),
// then the final dk, dv, dw, dbeta. Tile algebra on f32 tiles (tf32), as bwd_intra.cuh.
//
// KGroupSum, per (chunk, kv head), only when Hq > H: every partial of the group into the slot of
// its first query head, summed in query-head order.
//
// KChainA, per (segment r < N-1, kv head): R = dLoss/d(product of the chunks before c), starting
// at R = -sum dE_r (over the later query segments and the group, in order); for c = 0 .. 7:
//   W^_c = W_c walked forward to the segment end:    dU_c -= W^_c R
//   XU = U_c R^T;  R <- R - XU^T W_c + dK^_c^T K~_c  (R (I - W_c^T U_c)^T + dLoss/d(suffix product))
//   [XU; dK^_c] walked back through chunks 7 .. c+1: dW_c -= XU walked, dK~_c += dK^_c walked.
//
// KChainB, per (chunk, kv head), with the chunk's UT transform recomputed (prep.cuh):
//   K~ = K - Dm^T W:  dk += dK~, dDm -= W dK~^T, dW -= Dm dK~
//   Dm = T WK:        dT = dDm WK^T, dWK = SL(T^T dDm): dW += dWK K, dk += dWK^T W
//   U = T W:          dT += dU W^T, dW += T^T dU
//   T = T0 diag(b):   dT <- LT(dT), dbeta_b += sum_a T0[a][b] dT[a][b], dT0 = dT diag(b)
//   T0 = (I + M)^-1:  dM = SL(-T0^T dT0 T0^T);  M = SL(diag(b) W W^T): dbeta_a += sum_b dM (W W^T),
//                     dW += diag(b) dM W + (diag(b) dM)^T W
#pragma once

#include "cuda/path/bwd_intra.cuh"
#include "cuda/path/prep.cuh"

namespace fattn::pathk {

// This warp's tile of a [64, N] product dealt one [16, 8 NB] tile per warp (cta_gemm's deal when
// the product has NW tiles): its first row m0 and column n0.
template <int N, int NB, int NW> struct WarpTile {
    static_assert((64 / 16) * (N / (8 * NB)) == NW, "one [16, 8 NB] tile of a [64, N] product per warp");
    int m0 = (warp_id() / (N / (8 * NB))) * 16, n0 = (warp_id() % (N / (8 * NB))) * 8 * NB;
};
// acc (this warp's WarpTile of a [64, N] product) += op(A) op(B).
template <typename E, bool AT, bool BK, int N, int NB, int NW, int RND = 0>
PK_DEV void cta_gemm_acc(float (&acc)[NB][4], int KD, const E *A, int lda, const E *B, int ldb) {
    const WarpTile<N, NB, NW> t;
    warp_gemm<E, AT, BK, NB, RND>(acc, A, lda, B, ldb, t.m0, t.n0, KD);
}

template <int D> struct KGroupSum {
    static constexpr int kThreads = 128;
    static constexpr size_t smem() { return 0; }
    PK_DEV static void run(const PathDev &p, char *) {
        const int64_t gc = bid_x();
        const int h = bid_y(), g0 = h * p.grp;
        const SeqInfo sq = seq_of_chunk(p, gc);
        const int64_t c0 = (gc - sq.chunk0) * kC, row = sq.row0 + c0;
        const int n = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        const bool kh = (gc - sq.chunk0) / kNcs < ceil_div(sq.len, kS) - 1;
        const int64_t at = row * p.hq * int64_t(D);  // the chunk's block in the [rows, Hq, D] partials
        float *bufs[6] = {p.dvacc + at, dkt_of<D>(p, row), p.du + at, p.dwacc + at, p.dko + at, kh ? p.dkh + at : nullptr};
        for (float *b : bufs)
            if (b) group_sum_tile_f32<D, kThreads>(b + g0 * D, int64_t(p.hq) * D, D, p.grp, n);
        group_sum_tile_f32<kC, kThreads>(p.ddm + (gc * p.hq + g0) * kC * kC, kC, kC * kC, p.grp, kC);
    }
};

template <typename Tin, int D> struct KChainA {
    using Tw = walk_t<Tin>;
    static constexpr int NW = wide_warps(D), kThreads = 32 * NW;
    using FT = F32Tiles<D, NW>;
    static constexpr int SD = FT::SD, S64 = FT::S64, NB = FT::NB, NB64 = FT::NB64;
    // cta_gemm_rmw's warp tiles at half the width of eight warps' tiles: the suffix products' state
    // leaves it few registers
    static constexpr int NB8 = F32Tiles<D>::NB, NBH = NB8 > 2 ? NB8 / 2 : NB8;
    static constexpr size_t RB = tile_bytes<float>(D, D);
    static constexpr size_t smem() { return RB + 4 * FT::BIG + FT::SMALL; }
    // the suffix products kept in p.pch (6 of them: P_6 is one walk step, P_7 = I)
    static constexpr int kSlots = kNcs - 2;

    PK_DEV static void run(const PathDev &p, char *smem) {
        const int64_t gs = bid_x();
        const int h = bid_y(), g0 = h * p.grp;
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0, ns = ceil_div(sq.len, kS);
        if (r >= ns - 1) return;
        // t0 t1 and t2 t3 are adjacent pairs: a D x D product P (D <= 128 rows of stride SD) takes a pair
        float *R = reinterpret_cast<float *>(smem), *t0 = reinterpret_cast<float *>(smem + RB);
        float *t1 = t0 + kC * SD, *t2 = t1 + kC * SD, *t3 = t2 + kC * SD, *T = t3 + kC * SD;
        Tw *slots = static_cast<Tw *>(p.pch) + (gs * p.h + h) * int64_t(kSlots) * D * D;
        const int64_t hd = int64_t(p.h) * D, hqd = int64_t(p.hq) * D;
        auto ldW = [&](float *s, int64_t c) { load_w_f32<kThreads>(s, SD, p, sq, (r * kNcs + c) * kC, h, D, kC); };
        auto ldU = [&](float *s, int64_t c) { load_u_f32<Tin, kThreads>(s, SD, p, sq.row0 + (r * kNcs + c) * kC, h, D, kC); };
        // x <- x (I - W^T U) for the m-row tile x (W in sw, U in su, or swapped for the forward walk)
        auto walk = [&](float *x, int m, const float *sw, const float *su) {
            for (int b0 = 0; b0 < m; b0 += kC) {
                const int mb = m - b0 < kC ? m - b0 : kC;
                float *xb = x + b0 * SD;
                cta_gemm<float, false, false, NB64, NW>(mb, kC, D, xb, SD, sw, SD, [&](int a, int b, float v) { T[a * S64 + b] = v; });
                sync();
                cta_gemm<float, false, true, NB, NW>(mb, D, kC, T, S64, su, SD, [&](int a, int col, float v) { xb[a * SD + col] -= v; });
                sync();
            }
        };
        // x walked back through chunks 7 .. c+1 is x P_c, P_c = A_7 A_6 .. A_{c+1} with A = I - W^T U,
        // and W_c walked forward through them is W_c P_c^T. The products, newest first, for c < 6
        // into p.pch (c = 6 is one walk step and c = 7 none: those walk their tiles directly)
        for (int e = tid(); e < D * D; e += kThreads) t0[(e / D) * SD + e % D] = e / D == e % D ? 1.f : 0.f;
        for (int64_t c2 = kNcs - 1; c2 >= 1; --c2) {
            ldW(t2, c2);
            ldU(t3, c2);
            cp_landed();
            walk(t0, D, t2, t3);
            if (c2 - 1 < kSlots)
                for (int e = tid(); e < D * D; e += kThreads) slots[(c2 - 1) * D * D + e] = from_f<Tw>(t0[(e / D) * SD + e % D]);
        }
        auto ldP = [&](float *s, int64_t c) {
            if constexpr (sizeof(Tw) == 4) load_tile<float, kThreads>(s, SD, slots + c * D * D, D, D, D, D, D, true);
            else load_tile_cvt<float, Tw, kThreads>(s, SD, slots + c * D * D, D, D, D, D, D, true);
        };
        // R = -(sum over query segments rt > r, seg-inter's splits and the group of dE(rt, r)); 0 for r = 0
        // Each thread sums its NV 16-byte vectors of the D x D elements, partial after partial in
        // that fixed order (a partial's loads issued together, not one element's chain at a time).
        const int kSplit = p.seg_split;
        {
            constexpr int NV = D * D / (4 * kThreads);
            static_assert(NV >= 1 && D * D % (4 * kThreads) == 0, "whole 16-byte vectors per thread");
            float acc[NV][4];
            zero_acc(acc);
            if (r >= 1)
                for (int64_t rt = r + 1; rt < ns; ++rt)
                    for (int sp = 0; sp < kSplit; ++sp)
                        for (int g = 0; g < p.grp; ++g) {
                            const float *src = p.dep + (((sq.pair0 + (rt - 1) * (rt - 2) / 2 + (r - 1)) * kSplit + sp) * p.hq + g0 + g) * D * D;
                            V16 v[NV];
                            for (int i = 0; i < NV; ++i) v[i] = ld16(src + 4 * (tid() + i * kThreads));
                            for (int i = 0; i < NV; ++i)
                                for (int c = 0; c < 4; ++c) acc[i][c] += v16_elem<float>(v[i], c);
                        }
            for (int i = 0; i < NV; ++i)
                for (int c = 0; c < 4; ++c) {
                    const int e = 4 * (tid() + i * kThreads) + c;
                    R[(e / D) * SD + e % D] = -acc[i][c];
                }
        }
        for (int64_t c = 0; c < kNcs; ++c) {
            const int64_t krow = sq.row0 + (r * kNcs + c) * kC;
            sync();
            // W^_c (t1) = W_c P_c^T (t0 = W_c, t2 t3 = P_c)
            ldW(t0, c);
            if (c < kSlots) {
                ldP(t2, c);
                cp_landed();
                cta_gemm<float, false, false, NB, NW>(kC, D, D, t0, SD, t2, SD, [&](int a, int col, float v) { t1[a * SD + col] = v; });
            } else {
                ldW(t1, c);
                if (c == kNcs - 2) {
                    ldU(t2, kNcs - 1);
                    ldW(t3, kNcs - 1);
                }
                cp_landed();
                if (c == kNcs - 2) walk(t1, kC, t2, t3);
            }
            sync();
            // dU_c -= W^_c R ; XU = U_c R^T (t2 = U_c, t3 = XU)
            ldU(t2, c);
            cp_landed();
            cta_gemm_rmw<float, false, true, NBH, NW>(kC, D, D, t1, SD, R, SD, p.du + (krow * p.hq + g0) * D, hqd, -1.f, kC);
            cta_gemm<float, false, false, NB, NW>(kC, D, D, t2, SD, R, SD, [&](int b, int d, float v) { t3[b * SD + d] = v; });
            sync();
            // R <- R - XU^T W_c + dK^_c^T K~_c (t2 = dK^_c, t1 = K~_c)
            load_ws_f32<D, kThreads>(t2, p.dkh + (krow * p.hq + g0) * D, hqd, kC);
            load_tile_cvt<float, Tin, kThreads>(t1, SD, static_cast<const Tin *>(p.kt) + (krow * p.h + h) * D, hd, kC, D, kC, D, true);
            cp_landed();
            cta_gemm<float, true, true, NB, NW>(D, D, kC, t3, SD, t0, SD, [&](int d, int e, float v) { R[d * SD + e] -= v; });
            sync();
            cta_gemm<float, true, true, NB, NW>(D, D, kC, t2, SD, t1, SD, [&](int d, int e, float v) { R[d * SD + e] += v; });
            sync();
            // dW_c -= XU P_c ; dK~_c += dK^_c P_c (t0 t1 = P_c)
            if (c < kSlots) {
                ldP(t0, c);
                cp_landed();
                cta_gemm_rmw<float, false, true, NBH, NW>(kC, D, D, t3, SD, t0, SD, p.dwacc + (krow * p.hq + g0) * D, hqd, -1.f, kC);
                cta_gemm_rmw<float, false, true, NBH, NW>(kC, D, D, t2, SD, t0, SD, dkt_of<D>(p, krow) + g0 * D, hqd, 1.f, kC);
            } else {
                if (c == kNcs - 2) {
                    ldW(t0, kNcs - 1);
                    ldU(t1, kNcs - 1);
                    cp_landed();
                    walk(t3, kC, t0, t1);
                    walk(t2, kC, t0, t1);
                }
                add_tile_f32<D, kThreads>(p.dwacc + (krow * p.hq + g0) * D, hqd, t3, SD, kC, -1.f);
                add_tile_f32<D, kThreads>(dkt_of<D>(p, krow) + g0 * D, hqd, t2, SD, kC, 1.f);
            }
        }
    }
};

// sum over k < 64 of x[k * stride] y[k * stride], k ascending
PK_DEV float dot64(const float *x, const float *y, int stride) {
    float s = 0.f;
    for (int k = 0; k < kC; ++k) s += x[k * stride] * y[k * stride];
    return s;
}

template <typename Tin, int D> struct KChainB {
    using Tw = walk_t<Tin>;
    static constexpr int NW = wide_warps(D), kThreads = 32 * NW, kMinBlocks = D <= 64 ? 2 : 1;
    using FT = F32Tiles<D, NW>;
    static constexpr int SD = FT::SD, S64 = FT::S64, NB = FT::NB, NB64 = FT::NB64;
    // Six tiles, two CTAs per SM at D <= 64: W, K, T0 and three that take the chain's products in
    // turn (WK is formed twice, T twice, rather than kept):
    //   C: M, WK | dK~ | WK, S7 = SL(T^T dD) | T | S7      E: scratch, Dm | dT
    //   F: T | dD | dU | dD
    static constexpr size_t UB = FT::BIG > FT::SMALL ? FT::BIG : FT::SMALL;
    static constexpr size_t smem() { return 2 * FT::BIG + 2 * UB + 2 * FT::SMALL + 2 * kC * 4; }

    // dk = dK partial + ak and dw = dW partial + aw where this warp's tiles have them (rows < n,
    // columns < K), the partials' pairs loaded before any store.
    template <class At>
    PK_DEV static void write_dk_dw(const PathDev &p, const SeqInfo &sq, int64_t t0, int n, int h, At &&at,
                                   const float (&aw)[NB][4], const float (&ak)[NB][4]) {
        const WarpTile<D, NB, NW> t;
        F2 gk[NB][2], gw[NB][2];
        for (int j = 0; j < NB; ++j)
            for (int hh = 0; hh < 2; ++hh) {
                const int r = t.m0 + acc_row(2 * hh), c = t.n0 + acc_col(j, 0);
                gk[j][hh] = r < n ? ld_f2(p.dko + at(r, c)) : F2{0.f, 0.f};
                gw[j][hh] = r < n ? ld_f2(p.dwacc + at(r, c)) : F2{0.f, 0.f};
            }
        for (int j = 0; j < NB; ++j)
            for (int hh = 0; hh < 2; ++hh) {
                const int r = t.m0 + acc_row(2 * hh), c = t.n0 + acc_col(j, 0);
                if (r >= n) continue;
                const int64_t o = sq.b * p.dk_sb + (t0 + r) * p.dk_ss + h * p.dk_sh, ow = sq.b * p.dw_sb + (t0 + r) * p.dw_ss + h * p.dw_sh;
                const float k2[2] = {gk[j][hh].x + ak[j][2 * hh], gk[j][hh].y + ak[j][2 * hh + 1]};
                const float w2[2] = {gw[j][hh].x + aw[j][2 * hh], gw[j][hh].y + aw[j][2 * hh + 1]};
                for (int e = 0; e < 2; ++e)
                    if (c + e < p.K) {
                        st<Tin>(p.dk, o + c + e, k2[e]);
                        p.dw[ow + c + e] = w2[e];
                    }
            }
    }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const int64_t gc = bid_x();
        const int h = bid_y(), g0 = h * p.grp;
        const SeqInfo sq = seq_of_chunk(p, gc);
        const int64_t c0 = (gc - sq.chunk0) * kC, row = sq.row0 + c0, t0 = sq.begin + c0;
        const int n = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        float *BW = reinterpret_cast<float *>(smem), *BK = BW + kC * SD;
        float *C = reinterpret_cast<float *>(smem + 2 * FT::BIG), *F = reinterpret_cast<float *>(smem + 2 * FT::BIG + UB);
        float *T0 = reinterpret_cast<float *>(smem + 2 * FT::BIG + 2 * UB), *E = T0 + kC * S64;
        float *sb = E + kC * S64, *db = sb + kC;
        const int64_t hqd = int64_t(p.hq) * D;
        auto at = [&](int a, int col) { return ((row + a) * p.hq + g0) * D + col; };
        auto t_into = [&](float *s) {  // T = T0 diag(beta), as tf32 values (read only as an operand)
            for (int e = tid(); e < kC * kC; e += kThreads) s[(e / kC) * S64 + e % kC] = tf32_round(T0[(e / kC) * S64 + e % kC] * sb[e % kC]);
        };
        // Operand flags (common.cuh): once M is formed (3xTF32 on the f32 W), W, K, T, WK, Dm, S7 and
        // dT0 T0^T are tiles of tf32 values; T0, dK~, dD, dU, dT and dM are read element-wise too.
        prep_load<Tin, D, kThreads, true>(p, sq, c0, n, h, BW, BK, sb);
        if (!(p.keep_t0 && load_kept_t0<Tw, kThreads>(T0, static_cast<const Tw *>(p.dmat) + (gc * p.h + h) * kC * kC)))
            prep_t0<D, kThreads>(BW, sb, C, T0, E);
        for (int e = tid(); e < kC * D; e += kThreads) BW[(e / D) * SD + e % D] = tf32_round(BW[(e / D) * SD + e % D]);
        t_into(F);
        if (tid() < kC) db[tid()] = 0.f;
        sync();
        prep_wk_dm<D, NW, kRA | kRB, true>(BW, BK, F, C, E);  // C = WK, E = Dm = T WK
        // K~ chain (C = dK~, F = dD)
        load_ws_f32<D, kThreads>(C, dkt_of<D>(p, row) + g0 * D, hqd, n);
        load_tile<float, kThreads>(F, S64, p.ddm + (gc * p.hq + g0) * kC * kC, kC, kC, kC, kC, kC, true);
        cp_landed();
        cta_gemm<float, false, false, NB64, NW, kRA>(kC, kC, D, BW, SD, C, SD, [&](int d, int b, float v) { F[d * S64 + b] -= v; });
        // The chain's five dW and two dK terms summed in registers (this warp's tile of each: aw,
        // ak) and added to the earlier kernels' partials once, where dk and dw are written (seven
        // read-modify-writes of a [64, D] f32 partial before: 509 -> 354 us at T4096 H16 D128 with
        // the kept T0, H100 2026-12-06). ak starts as dK~'s tile.
        float aw[NB][4], ak[NB][4];
        {
            const WarpTile<D, NB, NW> t;
            zero_acc(aw);
            cta_gemm_acc<float, false, true, D, NB, NW, kRA>(aw, kC, E, S64, C, SD);
            for (int j = 0; j < NB; ++j)
                for (int i = 0; i < 4; ++i) aw[j][i] = -aw[j][i], ak[j][i] = C[(t.m0 + acc_row(i)) * SD + t.n0 + acc_col(j, i)];
        }
        sync();
        // Dm chain (C = WK, E = dT = dD WK^T, then C = S7 = SL(T^T dD): T^T = diag(beta) T0^T)
        prep_wk<D, NW, kRA | kRB>(BW, BK, C);
        cta_gemm<float, false, false, NB64, NW, kRB>(kC, kC, kC, F, S64, C, S64, [&](int a, int c, float v) { E[a * S64 + c] = v; });
        sync();
        cta_gemm<float, true, true, NB64, NW>(kC, kC, kC, T0, S64, F, S64, [&](int c, int b, float v) { C[c * S64 + b] = c > b ? tf32_round(sb[c] * v) : 0.f; });
        sync();
        cta_gemm_acc<float, false, true, D, NB, NW, kRA | kRB>(aw, kC, C, S64, BK, SD);
        cta_gemm_acc<float, true, true, D, NB, NW, kRA | kRB>(ak, kC, C, S64, BW, SD);
        sync();
        // U chain (F = dU, C = T)
        load_ws_f32<D, kThreads>(F, p.du + (row * p.hq + g0) * D, hqd, n);
        t_into(C);
        cp_landed();
        cta_gemm<float, false, false, NB64, NW, kRB>(kC, kC, D, F, SD, BW, SD, [&](int a, int c, float v) { E[a * S64 + c] += v; });
        cta_gemm_acc<float, true, true, D, NB, NW, kRA>(aw, kC, C, S64, F, SD);
        sync();
        // T = T0 diag(b): dT lower, dbeta, dT0
        for (int e = tid(); e < kC * kC; e += kThreads)
            if (e % kC > e / kC) E[(e / kC) * S64 + e % kC] = 0.f;
        sync();
        if (tid() < kC) db[tid()] += dot64(T0 + tid(), E + tid(), S64);  // column sums of T0 .* dT
        sync();
        for (int e = tid(); e < kC * kC; e += kThreads) E[(e / kC) * S64 + e % kC] *= sb[e % kC];
        sync();
        // dM = SL(-T0^T (dT0 T0^T))  (C = dT0 T0^T, F = dM, then C = W W^T)
        cta_gemm<float, false, false, NB64, NW>(kC, kC, kC, E, S64, T0, S64, [&](int a, int c, float v) { C[a * S64 + c] = tf32_round(v); });
        sync();
        cta_gemm<float, true, true, NB64, NW, kRB>(kC, kC, kC, T0, S64, C, S64, [&](int a, int b, float v) { F[a * S64 + b] = a > b ? -v : 0.f; });
        sync();
        cta_gemm<float, false, false, NB64, NW, kRA | kRB>(kC, kC, D, BW, SD, BW, SD, [&](int a, int b, float v) { C[a * S64 + b] = v; });
        sync();
        if (tid() < kC) db[tid()] += dot64(F + tid() * S64, C + tid() * S64, 1);  // row sums of dM .* W W^T
        sync();
        for (int e = tid(); e < kC * kC; e += kThreads) F[(e / kC) * S64 + e % kC] *= sb[e / kC];
        sync();
        cta_gemm_acc<float, false, true, D, NB, NW, kRB>(aw, kC, F, S64, BW, SD);
        cta_gemm_acc<float, true, true, D, NB, NW, kRB>(aw, kC, F, S64, BW, SD);
        // outputs: dk and dw from the warps' tiles, dv from its partial (a thread's 16-byte vectors
        // loaded before any store)
        write_dk_dw(p, sq, t0, n, h, at, aw, ak);
        {
            constexpr int NV = vecs_per_thread<D, kThreads>();
            V16 vv[NV];
            for (int i = 0; i < NV; ++i) {
                const int e = 4 * (tid() + i * kThreads);
                if (e >= n * D) continue;
                vv[i] = ld16(p.dvacc + at(e / D, e % D));
            }
            for (int i = 0; i < NV; ++i) {
                const int e = 4 * (tid() + i * kThreads), a = e / D;
                if (e >= n * D) continue;
                const int64_t t = t0 + a;
                for (int c = 0; c < 4; ++c) {
                    const int col = e % D + c;
                    if (col < p.V) st<Tin>(p.dv, sq.b * p.dv_sb + t * p.dv_ss + h * p.dv_sh + col, v16_elem<float>(vv[i], c));
                }
            }
        }
        if (tid() < n) p.dbeta[sq.b * p.dbeta_sb + (t0 + tid()) * p.dbeta_ss + h * p.dbeta_sh] = db[tid()];
    }
};

}  // namespace fattn::pathk
