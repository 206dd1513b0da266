// bwd.cuh — the backward's kernel order (after the gate sums and the prep of sequence.h):
//   KSegPrep (K^, E)  KDelta  KHist (the history)  KDkv (inter-segment dK^, dV, dG columns)
//   KSegInter (gamma, dE)  zero dU, dW, dK~  KSegIntra (own-segment pairs; or KIntraScores, KIntraGamma)  KOwn (own chunk, dq)
//   KGroupSum (GQA)  KChainA (segment chain)  KChainB (UT chain, dk dv dw dbeta)
// Each kernel writes what it owns; later kernels add to earlier ones' buffers in launch order,
// so every sum has a fixed order (no atomics).
#pragma once

#include "cuda/path/bwd_chain.cuh"
#include "cuda/path/bwd_dkv.cuh"
#include "cuda/path/bwd_dkv_sm90.cuh"
#include "cuda/path/bwd_hist.cuh"
#include "cuda/path/bwd_hist_sm90.cuh"
#include "cuda/path/bwd_intra.cuh"
#include "cuda/path/bwd_intra_gamma.cuh"
#include "cuda/path/bwd_intra_scores.cuh"
#include "cuda/path/bwd_seg.cuh"
#include "cuda/path/bwd_seg_sm90.cuh"
#include "cuda/path/small.cuh"

namespace fattn::pathk {

// KDkv, or its wgmma form on an sm_90 device where the build has it (bwd_dkv_sm90.cuh: dkv_sm90_at)
template <class L, typename Tin, int D> void launch_dkv(L &l, const PathDev &d) {
#if FATTN_PATH_DKV_SM90_BUILT
    if constexpr (dkv_sm90_at(sizeof(Tin), D))
        if (l.sm90) return l.template launch<KDkvSm90<Tin, D>>(d.total_chunks, d.hq, d);
#endif
    l.template launch<KDkv<Tin, D>>(d.total_chunks, d.hq, d);
}

// KHist, or its wgmma form on an sm_90 device where the build has it (bwd_hist_sm90.cuh: hist_sm90_at)
template <class L, typename Tin, int D> void launch_hist(L &l, const PathDev &d) {
#if FATTN_PATH_HIST_SM90_BUILT
    if constexpr (hist_sm90_at(sizeof(Tin), D))
        if (l.sm90) return l.template launch<KHistSm90<Tin, D>>(d.total_chunks, d.hq, d);
#endif
    l.template launch<KHist<Tin, D>>(d.total_chunks, d.hq, d);
}

// KSegInter, or its wgmma form on an sm_90 device where the build has it (bwd_seg_sm90.cuh: seg_sm90_at)
template <class L, typename Tin, int D> void launch_seg_inter(L &l, const PathDev &d) {
#if FATTN_PATH_SEG_SM90_BUILT
    if constexpr (seg_sm90_at(sizeof(Tin), D))
        if (l.sm90) return l.template launch<KSegInterSm90<Tin, D>>(d.total_segs * d.seg_split, d.hq, d);
#endif
    l.template launch<KSegInter<Tin, D>>(d.total_segs * d.seg_split, d.hq, d);
}

template <class L, typename Tin, int D> void bwd_sequence(L &l, const PathDev &d) {
    const int64_t rows = d.B * d.T;
    l.template launch<KSegPrep<Tin, D>>(d.total_segs, d.h, d);
    l.template launch<KDelta<Tin>>(ceil_div(rows * d.hq, KDelta<Tin>::kRows), 1, d);
    launch_hist<L, Tin, D>(l, d);
    launch_dkv<L, Tin, D>(l, d);
    launch_seg_inter<L, Tin, D>(l, d);
    // dU, dW, dK~ are first added to by KSegIntra; dK~'s leading rows (and dD, the seg-intra
    // states) take the span of W, K^, E and the history, which KSegInter has read for the last time
    const size_t row_bytes = size_t(d.hq) * D * sizeof(float);
    l.fill(d.du, 0, size_t(rows) * row_bytes);
    l.fill(d.dwacc, 0, size_t(rows) * row_bytes);
    if (d.dkt_split > 0) l.fill(d.dkt, 0, size_t(d.dkt_split) * row_bytes);
    if (d.dkt_split < rows) l.fill(d.dkt_hi, 0, size_t(rows - d.dkt_split) * row_bytes);
    if constexpr (intra_split_at(sizeof(Tin), D)) {
        // one grid dimension, chunk major (intra_chunk_major, common.cuh)
        const int64_t items = d.total_segs * (kNcs - 1) * d.hq;
        l.template launch<KIntraScores<Tin, D>>(items, 1, d);
        l.fill(d.icnt, 0, size_t(d.total_segs) * d.hq * kNcs * sizeof(int));
        l.template launch<KIntraGamma<Tin, D>>(items, 1, d);
    } else {
        l.template launch<KSegIntra<Tin, D>>(d.total_segs, d.hq, d);
    }
    l.template launch<KOwn<Tin, D>>(d.total_chunks, d.hq, d);
    if (d.grp > 1) l.template launch<KGroupSum<D>>(d.total_chunks, d.h, d);
    l.template launch<KChainA<Tin, D>>(d.total_segs, d.h, d);
    l.template launch<KChainB<Tin, D>>(d.total_chunks, d.h, d);
}

}  // namespace fattn::pathk
