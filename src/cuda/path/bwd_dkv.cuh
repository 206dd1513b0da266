// bwd_dkv.cuh — the inter-segment key-side gradients, FlashAttention-2's dK/dV kernel with the
// history as the queries. One CTA per (key chunk cj, query head), 4 warps of 16 keys; keys of
// segment r' meet every query t of a later segment through Qh[t, r'+1] and K^ (keys walked to
// their segment end): s = Qh K^^T. Per query chunk (ascending, fixed order):
//   S^T = K^ Qh^T   P^T = exp(scale (S + G_t - G_j) - lse_t)   dP^T = V dO^T
//   dS^T = scale P^T (dP^T - delta_t)    dV += P^T dO    dK^ += dS^T Qh    dG_j -= sum_t dS
// Writes (not adds) the per-query-head partials dK^ (dkh), dV (dvacc) and dG's column part (dgs);
// keys of the last segment have no later queries: their dV and dG start at 0 here.
#pragma once

#include "cuda/path/common.cuh"

namespace fattn::pathk {

// The query rows' lse (log2 domain), delta and gate sums of query chunk ci (nq rows) into
// lse2, lse2 + kC, lse2 + 2 kC (0 past nq), by NT threads numbered t (plain loads: those of
// t < kC wait a round trip).
template <int NT>
PK_DEV void dkv_rows(const PathDev &p, const SeqInfo &sq, int hq, int64_t c0, int64_t nq, float *lse2, int t) {
    float *dl = lse2 + kC, *gq = dl + kC;
    const int64_t t0 = sq.begin + c0;
    for (int a = t; a < kC; a += NT) {
        const bool ok = a < nq;
        lse2[a] = ok ? p.lse[sq.b * p.lse_sb + hq * p.lse_sh + t0 + a] * 1.4426950408889634f : 0.f;
        dl[a] = ok ? p.delta[(sq.row0 + c0 + a) * p.hq + hq] : 0.f;
        gq[a] = ok && p.has_gate ? p.gsum[(sq.row0 + c0 + a) * p.hq + hq] : 0.f;
    }
}

// P^T and dS^T of one query chunk (nq rows; its lse2 / delta / G rows as dkv_rows stores them) in
// place of S^T and dP^T, the m16n8 accumulators of a warp's 16 keys (r0 ..; gate sums gk); dG's
// column partials into dg.
PK_DEV void dkv_p_ds(const PathDev &p, int r0, int nq, const float *lse2, const float *gk, float (&St)[8][4],
                     float (&dPt)[8][4], float (&dg)[2]) {
    const float *dl = lse2 + kC, *gq = dl + kC;
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i) {
            const int kk = r0 + acc_row(i), qq = acc_col(j, i);
            const float P = qq < nq ? exp2_fast(p.sl2 * (St[j][i] + gq[qq] - gk[kk]) - lse2[qq]) : 0.f;
            const float ds = p.scale * P * (dPt[j][i] - dl[qq]);
            St[j][i] = P;
            dPt[j][i] = ds;
            dg[i >> 1] -= ds;
        }
}

// The CTA's outputs from the m16n8 accumulators of its warp's 16 keys (r0 ..): rows < nk of dV
// and, when kh, of dK^; dG's column part.
template <int D>
PK_DEV void dkv_store(const PathDev &p, int64_t krow, int hq, int r0, int nk, bool kh, const float (&dg)[2],
                      const float (&dv)[D / 8][4], const float (&dk)[D / 8][4]) {
    for (int hh = 0; hh < 2; ++hh) {
        const float g = quad_sum(dg[hh]);
        const int kk = r0 + acc_row(2 * hh);
        if (kk >= nk) continue;
        const int64_t o = (krow + kk) * p.hq + hq;
        for (int j = 0; j < D / 8; ++j)
            for (int e = 0; e < 2; ++e) {
                const int col = acc_col(j, e);
                p.dvacc[o * D + col] = dv[j][2 * hh + e];
                if (kh) p.dkh[o * D + col] = dk[j][2 * hh + e];
            }
        if ((lane_id() & 3) == 0) p.dgs[o] = g;
    }
}

template <typename Tin, int D> struct KDkv {
    static constexpr int kThreads = 128, NX = D / 8;
    static constexpr int STi = tile_stride<Tin>(D);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D);
    static constexpr size_t STAGE = 2 * TI + 4 * kC * 4;  // Qh, dO, lse2, delta, G of the queries (+1 spare)
    static constexpr size_t smem() { return 2 * TI + kC * 4 + 2 * STAGE; }

    PK_DEV static void issue(const PathDev &p, const SeqInfo &sq, int hq, int64_t ci, int64_t rcol, char *buf) {
        Tin *sQh = reinterpret_cast<Tin *>(buf), *sdO = reinterpret_cast<Tin *>(buf + TI);
        const int64_t c0 = ci * kC, nq = sq.len - c0 < kC ? sq.len - c0 : kC, t0 = sq.begin + c0;
        const int64_t hstride = (p.hist_rect ? p.rect_cols : 1) * p.hq * p.hk;
        const Tin *gh = static_cast<const Tin *>(p.hist) + (hist_cell(p, sq, c0, rcol) * p.hq + hq) * p.hk;
        load_tile<Tin, kThreads, false>(sQh, STi, gh, hstride, kC, D, int(nq), p.hk, true);
        load_tile<Tin, kThreads, false>(sdO, STi, static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh,
                                 p.do_ss, kC, D, int(nq), p.V, p.vec_do);
        dkv_rows<kThreads>(p, sq, hq, c0, nq, reinterpret_cast<float *>(buf + 2 * TI), tid());
    }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const ChunkItem ck = chunk_item(p, false);
        const SeqInfo &sq = ck.sq;
        const int64_t k0 = ck.c0, rp = ck.ci / kNcs, nc = ceil_div(sq.len, kC), ns = ceil_div(sq.len, kS);
        const int hq = ck.hq, h = ck.h, nk = ck.n;
        const int r0 = 16 * warp_id();
        Tin *sKh = reinterpret_cast<Tin *>(smem), *sV = reinterpret_cast<Tin *>(smem + TI);
        float *gk = reinterpret_cast<float *>(smem + 2 * TI);
        char *stg[2] = {smem + 2 * TI + kC * 4, smem + 2 * TI + kC * 4 + STAGE};
        float dKh[NX][4], dV[NX][4], dg[2] = {0.f, 0.f};
        zero_acc(dKh);
        zero_acc(dV);
        const int64_t krow = sq.row0 + k0;
        if (rp < ns - 1) {
            const int64_t ws = int64_t(p.h) * D;
            load_tile<Tin, kThreads, false>(sKh, STi, static_cast<const Tin *>(p.kh) + (krow * p.h + h) * D, ws, kC, D, kC, D, true);
            load_tile<Tin, kThreads, false>(sV, STi,
                                     static_cast<const Tin *>(p.v) + sq.b * p.v_sb + (sq.begin + k0) * p.v_ss + h * p.v_sh,
                                     p.v_ss, kC, D, kC, p.V, p.vec_v);
            for (int b = tid(); b < kC; b += kThreads) gk[b] = p.has_gate ? p.gsum[(krow + b) * p.hq + hq] : 0.f;
            const int64_t cfirst = (rp + 1) * kNcs;
            issue(p, sq, hq, cfirst, rp + 1, stg[0]);
            cp_commit();
            for (int64_t ci = cfirst, s = 0; ci < nc; ++ci, ++s) {
                char *cur = stg[s & 1];
                ring_step(ci + 1 < nc, [&] { issue(p, sq, hq, ci + 1, rp + 1, stg[(s + 1) & 1]); });
                sync();
                const Tin *cQh = reinterpret_cast<const Tin *>(cur), *cdO = reinterpret_cast<const Tin *>(cur + TI);
                const float *lse2 = reinterpret_cast<const float *>(cur + 2 * TI);
                const int nq = int(sq.len - ci * kC < kC ? sq.len - ci * kC : kC);
                float St[8][4], dPt[8][4];
                zero_acc(St);
                zero_acc(dPt);
                warp_gemm<Tin, false, false, 8>(St, sKh, STi, cQh, STi, r0, 0, D);
                warp_gemm<Tin, false, false, 8>(dPt, sV, STi, cdO, STi, r0, 0, D);
                dkv_p_ds(p, r0, nq, lse2, gk, St, dPt, dg);
                warp_gemm_acc<Tin, true>(dV, St, 1.f, cdO, STi, 0);
                warp_gemm_acc<Tin, true>(dKh, dPt, 1.f, cQh, STi, 0);
                sync();
            }
        }
        dkv_store<D>(p, krow, hq, r0, nk, rp < ns - 1, dg, dV, dKh);
    }
};

}  // namespace fattn::pathk
