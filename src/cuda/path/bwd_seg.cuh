// bwd_seg.cuh — the query side of the backward, one CTA per (query segment r, query head; four at D 128), the
// segment's chunks one after another (so the per-segment partials it writes have one owner).
//
// KSegInter (r >= 1): for each query chunk, gamma = dLoss/dQh[t, r] from every earlier segment r'
// in ascending order, through the history:  at r' >= 1:  dE(r, r') += -Qh[t, r'+1]^T gamma,
// gamma <- gamma (I - E_r')^T;  then for the keys of segment r':  S = Qh[t, r'+1] K^^T, P, dS,
// gamma += dS K^, dG_t += rowsum(dS). gamma goes to p.gam; for r = 0 it is 0. The K x K steps
// are tf32 (dE's Qh as loaded, in the input dtype: warp_gemm2; gamma's shared copy and E, which
// KSegPrep stores, hold tf32 values), the score products in the input dtype.
//
// KSegIntra: for each query chunk ci = 8r + i (i >= 1), the earlier chunks cj of the same segment
// ascending: the state X = Q~_ci walked back to chunk cj + 1 (recomputed from Q~), gamma stepped
// back through chunk cj (dU, dW of cj), then the scores against K~_cj (dK~, dV of cj, gamma +=
// dS K~). All tf32 on f32 tiles (tile algebra with cta_gemm). Writes gamma = dLoss/dQ~ back.
#pragma once

#include "cuda/path/common.cuh"

// KSegInter::kQpre's second Qh tile: 1 = on, 0 = off (an A/B switch).
#ifndef FATTN_PATH_SEG_QPRE
#define FATTN_PATH_SEG_QPRE 1
#endif
#ifndef FATTN_PATH_SEG_BM128
#define FATTN_PATH_SEG_BM128 1
#endif

namespace fattn::pathk {

// The wgmma products of KSegInter's key loop (kW; bwd_seg_sm90.cuh, built where wgmma is).
template <typename Tin, int D> struct SegInterW;

// kW: the key loop's products on wgmma (16-bit inputs, sm_90: bwd_seg_sm90.cuh), dO, Qh, K^ and V
// in 128-byte swizzled panels (sw128_elem) written by cp.async; else mma.sync on padded tiles.
template <typename Tin, int D, bool kW = false> struct KSegInter {
    // Query blocks of BM rows (one warp per 16): 128 (two chunks share every K^ / V and E load and
    // dE partial, and the segment's critical path halves); at D 128 for 16-bit inputs one CTA of
    // eight warps per SM (FATTN_PATH_SEG_BM128, 1: H100, 2026-12-06, 594 -> 539 us at T4096 H16
    // D128), else 64 there (f32 inputs, the wgmma form kW, or FATTN_PATH_SEG_BM128=0: two CTAs of
    // four warps share an SM).
    static constexpr int BM = D <= 64 || (FATTN_PATH_SEG_BM128 && sizeof(Tin) == 2 && !kW) ? 2 * kC : kC;
    static constexpr int kThreads = 2 * BM, NW = BM / 16, NX = D / 8;
    static constexpr int STi = tile_stride<Tin>(D), SD = tile_stride<float>(D);
    // kW: a [64, D] tile is D / 64 panels of [64, 64] (8 KiB), every tile and stage 1024-aligned
    static constexpr size_t TW = size_t(D / 64) * kC * 128;
    using Te = emat_t<Tin>;  // E's element type (f16 for 16-bit inputs: an f32 gamma times it on tf32, warp_gemm2)
    static constexpr int STe = tile_stride<Te>(D);
    static constexpr size_t TI = kW ? TW : tile_bytes<Tin>(kC, D), TF = tile_bytes<float>(kC, D), TE = tile_bytes<Te>(D, D);
    static constexpr size_t QI = kW ? (BM / kC) * TW : tile_bytes<Tin>(BM, D), QF = tile_bytes<float>(BM, D);
    static constexpr bool kF32 = sizeof(Tin) == 4;
    // kQf: the dE product reads an f32 copy of the 16-bit Qh (the swizzled kW tiles); else it reads
    // Qh as loaded (f32 inputs, or 16-bit padded tiles on tf32 with warp_gemm2)
    static constexpr bool kQf = !kF32 && kW;
    static_assert(!kW || (sizeof(Tin) == 2 && (D == 64 || D == 128)), "wgmma: 16-bit inputs at D 64 or 128");
    // dO, Qh (input dtype), then the layout of the K x K step:
    //  * D <= 64: the Qh f32 copy (kQf), gamma f32 (BM rows each), then E or two stages of
    //    (K^, V, G of the keys) in a union (E loads while the dE product runs);
    //  * D 128 (kUnion): one region that holds, for 16-bit inputs, gamma for the dE product while
    //    E (f16) lands beside it (the wgmma form, kQf: the Qh f32 copy, then E's halves after it),
    //    then gamma's step in two halves of E's rows (EH = 2), or the two key stages: with
    //    64-query blocks 103 KiB instead of 169, so two CTAs share an SM; with 128-query blocks
    //    (and the second Qh tile, kQpre) 203.5 KiB, one CTA; for f32 inputs gamma and E, or the two
    //    key stages: 199 KiB instead of 232 (over the 227 KiB a CTA may have).
    static constexpr size_t STG = kW ? (2 * TI + kC * 4 + 1023) / 1024 * 1024 : 2 * TI + kC * 4;
    static constexpr bool kUnion = D > 64;
    static constexpr int EH = kUnion && !kF32 ? 2 : 1;
    // E's loads: in its halves (EL = 2) where the region leaves room for half (the Qh f32 copy,
    // kQf, or an f32 E beside 64 rows of gamma), else whole (EL = 1: E in f16, or 128 rows of gamma
    // beside it), issued before the dE product
    static constexpr int EL = EH == 2 && (kQf || (BM == kC && sizeof(Te) == 4)) ? 2 : 1;
    static constexpr size_t max2(size_t a, size_t b) { return a > b ? a : b; }
    static constexpr size_t OFF_G = kF32 ? 0 : max2(kQf ? QF : 0, TE / EL), OFF_E = kF32 ? QF : 0;  // in the region (kUnion)
    static constexpr size_t U = TE > 2 * STG ? TE : 2 * STG;
    static constexpr size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }
    static constexpr size_t R = max3(OFF_G + QF, OFF_E + TE / EL, 2 * STG);
    // kQpre (128-query blocks at D 128, one CTA per SM: the room is there): a second Qh tile, so the
    // next earlier segment's Qh loads with this segment's first key stage instead of after its keys
    static constexpr bool kQpre = FATTN_PATH_SEG_QPRE && kUnion && !kF32 && !kW && BM == 2 * kC;
    static constexpr size_t smem() {
        return (kW ? 1024 : 0) + (kUnion ? QI + QI + R + 3 * BM * 4 + (kQpre ? QI : 0) : QI + QI + (kQf ? QF : 0) + QF + U + 3 * BM * 4);
    }
    static constexpr int NB = D / 16;

    // Tiles of `rows` rows of g (row stride gstride; rows >= rows_valid and columns >= cols_valid are
    // 0) into s: one padded tile, or (kW) rows / 64 swizzled ones. vec: cp.async (the caller commits
    // and waits).
    template <int rows>
    PK_DEV static void load_rows(Tin *s, const Tin *g, int64_t gstride, int rows_valid, int cols_valid, bool vec) {
        if constexpr (kW) {
            for (int b = 0; b < rows / kC; ++b) {
                const bool any = rows_valid > b * kC;
                load_tile_sw<Tin, D, kThreads>(s + b * (TW / sizeof(Tin)), any ? g + b * kC * gstride : g, gstride,
                                               any ? rows_valid - b * kC : 0, cols_valid, vec);
            }
        } else {
            load_tile<Tin, kThreads>(s, STi, g, gstride, rows, D, rows_valid, cols_valid, vec);
        }
    }
    // Element (a, c) of a tile load_rows wrote.
    PK_DEV static Tin at(const Tin *s, int a, int c) {
        if constexpr (kW) return s[(a / kC) * (TW / sizeof(Tin)) + sw128_elem(a % kC, c)];
        else return s[a * STi + c];
    }

    PK_DEV static void run(const PathDev &p, char *smem_raw) {
        char *smem = kW ? reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)) : smem_raw;
        // the segment's query blocks [ib0, ib0 + NIB) are this CTA's (split sp of p.seg_split)
        const int kSplit = p.seg_split, NIB = kS / BM / kSplit;
        const GridItem it = heavy_first(p.total_segs * kSplit, p.hq, true);
        const int64_t gs = it.x / kSplit;
        const int sp = int(it.x % kSplit), ib0 = sp * NIB;
        const int hq = it.y, h = hq / p.grp;
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0;
        const int r0 = 16 * warp_id();
        if (r == 0) {  // no earlier segment: gamma = 0
            const int64_t b0 = int64_t(ib0) * BM, rows = sq.len - b0 < NIB * BM ? sq.len - b0 : NIB * BM;
            for (int64_t e = tid(); e < rows * D; e += kThreads) p.gam[((sq.row0 + b0 + e / D) * p.hq + hq) * D + e % D] = 0.f;
            return;
        }
        if (r * kS + int64_t(ib0) * BM >= sq.len) {  // a split past the sequence's end: its dE partials are 0
            for (int64_t rp = 1; rp < r; ++rp) {
                float *dE = p.dep + (((sq.pair0 + (r - 1) * (r - 2) / 2 + (rp - 1)) * kSplit + sp) * p.hq + hq) * D * D;
                for (int e = tid(); e < D * D; e += kThreads) dE[e] = 0.f;
            }
            return;
        }
        char *c = smem;
        Tin *sdO = reinterpret_cast<Tin *>(c), *sQh0 = reinterpret_cast<Tin *>(c + QI);
        // kQpre: the Qh of even earlier segments rp in sQh0, of odd ones in sQh1
        Tin *sQh1 = kQpre ? reinterpret_cast<Tin *>(c + 2 * QI + R + 3 * BM * 4) : sQh0;
        float *sQf = kF32 ? reinterpret_cast<float *>(sQh0) : reinterpret_cast<float *>(c + 2 * QI);
        char *u = kUnion ? c + 2 * QI : c + 2 * QI + (kQf ? QF : 0) + QF;
        float *sG = reinterpret_cast<float *>(kUnion ? u + OFF_G : c + 2 * QI + (kQf ? QF : 0));
        Te *sE = reinterpret_cast<Te *>(kUnion ? u + OFF_E : u);
        float *lse2 = reinterpret_cast<float *>(kUnion ? c + 2 * QI + R : u + U), *dl = lse2 + BM, *gq = dl + BM;
        const int64_t ws = int64_t(p.h) * D;
        const int64_t hstride = (p.hist_rect ? p.rect_cols : 1) * p.hq * p.hk;
        for (int64_t ib = ib0; ib < ib0 + NIB; ++ib) {
            const int64_t c0 = r * kS + ib * BM, t0 = sq.begin + c0, qrow = sq.row0 + c0;
            if (c0 >= sq.len) break;
            const int nq = int(sq.len - c0 < BM ? sq.len - c0 : BM);
            load_rows<BM>(sdO, static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh, p.do_ss, nq, p.V,
                      p.vec_do);
            for (int a = tid(); a < BM; a += kThreads) {
                const bool ok = a < nq;
                lse2[a] = ok ? p.lse[sq.b * p.lse_sb + hq * p.lse_sh + t0 + a] * 1.4426950408889634f : 0.f;
                dl[a] = ok ? p.delta[(qrow + a) * p.hq + hq] : 0.f;
                gq[a] = ok && p.has_gate ? p.gsum[(qrow + a) * p.hq + hq] : 0.f;
            }
            float gam[NX][4], dgr[2] = {0.f, 0.f};
            zero_acc(gam);
            auto load_qh = [&](Tin *s, int64_t rp) {  // Qh[t, rp + 1] of this block's rows
                load_rows<BM>(s, static_cast<const Tin *>(p.hist) + (hist_cell(p, sq, c0, rp + 1) * p.hq + hq) * p.hk, hstride, nq, p.hk,
                          true);
            };
            for (int64_t rp = 0; rp < r; ++rp) {
                Tin *sQh = (rp & 1) ? sQh1 : sQh0;
                sync();  // previous users of sQh / sE / the key stages are done
                if (!kQpre || rp == 0) {  // else it landed with the previous segment's keys
                    load_qh(sQh, rp);
                    cp_commit();
                    cp_wait<0>();
                    sync();
                }
                if (rp >= 1) {
                    if (kQf)
                        for (int e = tid(); e < BM * D; e += kThreads) sQf[(e / D) * SD + e % D] = to_f(at(sQh, e / D, e % D));
                    acc_to_tile_tf32(sG, SD, r0, gam);  // read only as an operand (dE, gamma E^T)
                    // E (or, EH = 2, its first half) lands while dE's product runs, unless its
                    // place is still the Qh copy's (kQf at D 128)
                    const Te *gE = static_cast<const Te *>(p.emat) + ((sq.seg0 + rp) * p.h + h) * D * D;
                    auto issue_e = [&](int pc) {
                        load_tile<Te, kThreads>(sE, STe, gE + pc * (D / EL) * D, D, D / EL, D, D / EL, D, true);
                        cp_commit();
                    };
                    constexpr bool kEarlyE = !kQf || EL == 1;
                    if (kEarlyE) issue_e(0);
                    sync();
                    // dE(r, rp) += -Qh^T gamma over this block's rows (the CTA's first block writes);
                    // 16-bit Qh (kQf false) times the f32 gamma on tf32 (warp_gemm2)
                    float *dE = p.dep + (((sq.pair0 + (r - 1) * (r - 2) / 2 + (rp - 1)) * kSplit + sp) * p.hq + hq) * D * D;
                    auto de_product = [&](const auto *qh, int ldq) {
                        using Eq = std::remove_cv_t<std::remove_pointer_t<decltype(qh)>>;
                        if (ib == ib0)
                            cta_gemm<Eq, true, true, NB, NW, kRB>(D, D, BM, qh, ldq, sG, SD, [&](int d, int e, float v) { dE[d * D + e] = -v; });
                        else
                            cta_gemm_rmw<Eq, true, true, NB, NW, kRB>(D, D, BM, qh, ldq, sG, SD, dE, D, -1.f, D);
                    };
                    if constexpr (kF32 || kQf) de_product(sQf, SD);
                    else de_product(sQh, STi);
                    // gamma <- gamma - gamma E^T (EH = 2: in two halves of E's rows; EL = 2: each
                    // half loaded after the previous user of its place, the Qh copy or the first half)
                    constexpr int NXH = NX / EH;
                    for (int pc = 0; pc < EH; ++pc) {
                        if (EL == 2 && (pc > 0 || !kEarlyE)) {
                            sync();
                            issue_e(pc);
                        }
                        if (EL == 2 || pc == 0) {
                            cp_wait<0>();
                            sync();
                        }
                        float t[NXH][4];
                        zero_acc(t);
                        warp_gemm2<float, Te, false, false, NXH, kRA | kRB>(t, sG, SD, sE + (EL == 1 ? pc * (D / EH) * STe : 0), STe, r0, 0, D);
                        for (int j = 0; j < NXH; ++j)
                            for (int e = 0; e < 4; ++e) gam[pc * NXH + j][e] -= t[j][e];
                    }
                    sync();  // sE (union with the key stages) is free again
                }
                // the segment's key chunks, the next one's K^ and V in flight while this one is used
                auto issue = [&](int64_t cj, char *buf) {
                    const int64_t krow = sq.row0 + cj * kC;
                    const Tin *gkh = static_cast<const Tin *>(p.kh) + (krow * p.h + h) * D;
                    const Tin *gv = static_cast<const Tin *>(p.v) + sq.b * p.v_sb + (sq.begin + cj * kC) * p.v_ss + h * p.v_sh;
                    load_rows<kC>(reinterpret_cast<Tin *>(buf), gkh, ws, kC, D, true);
                    load_rows<kC>(reinterpret_cast<Tin *>(buf + TI), gv, p.v_ss, kC, p.V, p.vec_v);
                    float *g = reinterpret_cast<float *>(buf + 2 * TI);
                    for (int b = tid(); b < kC; b += kThreads) g[b] = p.has_gate ? p.gsum[(krow + b) * p.hq + hq] : 0.f;
                };
                issue(rp * kNcs, u);
                if (kQpre && rp + 1 < r) load_qh((rp & 1) ? sQh0 : sQh1, rp + 1);  // the next segment's Qh, in this group
                cp_commit();
                for (int64_t j = 0; j < kNcs; ++j) {
                    char *cur = u + (j & 1) * STG;
                    ring_step(j + 1 < kNcs, [&] { issue(rp * kNcs + j + 1, u + ((j + 1) & 1) * STG); });
                    if constexpr (kW) SegInterW<Tin, D>::fence();  // this thread's cp.async data, before wgmma reads it
                    sync();
                    const Tin *sKh = reinterpret_cast<const Tin *>(cur), *sV = reinterpret_cast<const Tin *>(cur + TI);
                    const float *gk = reinterpret_cast<const float *>(cur + 2 * TI);
                    float S[8][4], dP[8][4];
                    if constexpr (kW) {  // this warpgroup's 64 rows of S = Qh K^^T and dP = dO V^T
                        const int wg = warp_id() / 4;
                        SegInterW<Tin, D>::scores(S, dP, sQh + wg * (TW / sizeof(Tin)), sKh, sdO + wg * (TW / sizeof(Tin)), sV);
                    } else {
                        zero_acc(S);
                        zero_acc(dP);
                        warp_gemm<Tin, false, false, 8>(S, sQh, STi, sKh, STi, r0, 0, D);
                        warp_gemm<Tin, false, false, 8>(dP, sdO, STi, sV, STi, r0, 0, D);
                    }
                    for (int jj = 0; jj < 8; ++jj)
                        for (int e = 0; e < 4; ++e) {
                            const int a = r0 + acc_row(e), b = acc_col(jj, e);
                            const float P = a < nq ? exp2_fast(p.sl2 * (S[jj][e] + gq[a] - gk[b]) - lse2[a]) : 0.f;
                            const float ds = p.scale * P * (dP[jj][e] - dl[a]);
                            S[jj][e] = ds;
                            dgr[e >> 1] += ds;
                        }
                    if constexpr (kW) SegInterW<Tin, D>::gamma(gam, S, sKh);
                    else warp_gemm_acc<Tin, true>(gam, S, 1.f, sKh, STi, 0);
                    sync();
                }
            }
            for (int hh = 0; hh < 2; ++hh) {
                const float g = quad_sum(dgr[hh]);
                const int a = r0 + acc_row(2 * hh);
                if (a >= nq) continue;
                for (int j = 0; j < NX; ++j)
                    for (int e = 0; e < 2; ++e) p.gam[((qrow + a) * p.hq + hq) * D + acc_col(j, e)] = gam[j][2 * hh + e];
                if ((lane_id() & 3) == 0) p.dgs[(qrow + a) * p.hq + hq] += g;
            }
        }
    }
};

}  // namespace fattn::pathk
