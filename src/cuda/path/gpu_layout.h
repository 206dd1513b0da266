// gpu_layout.h — the workspace of the GPU PaTH backend (and of its CPU emulation): one function
// that lays out every buffer, used by the size queries, the memory model and the launch
// sequence alike, so none of them can disagree about a byte. Host-only, header-only (the
// emulation tests build it without CUDA).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/path_params.h"
#include "core/size_math.h"
#include "cuda/path/params.h"

namespace fattn::pathk {

// The kernels' head dim: the smallest instantiated D >= max(K, V) (columns past K or V are 0).
inline int gpu_dim(int64_t K, int64_t V) {
    const int64_t m = std::max(K, V);
    return m <= 32 ? 32 : m <= 64 ? 64 : 128;
}

// The elements of one (token, query head) row of the history: K rounded up to whole 16 bytes, so
// its readers load rows with 16-byte copies whatever K is (the producer writes the zeros past K).
// K itself wherever K * es is a multiple of 16 (every head dim the peers serve: 16, 32, 64, 128).
inline int64_t hist_row(int64_t K, int64_t es) {
    const int64_t per = 16 / es;
    return (K + per - 1) / per * per;
}

struct GpuWs {
    int D = 0;
    int seg_split = 1;  // KSegInter's CTAs per (segment, query head)
    int64_t pairs = 0;  // dE partials (query segment, key segment) over all sequences
    // byte offsets from the 128-aligned base (0 = absent)
    size_t cu = 0, chunk_base = 0, seg_base = 0, hist_base = 0, pair_base = 0, bad = 0;
    size_t gsum = 0, uw = 0, ww = 0, kt = 0, dmat = 0;
    size_t kh = 0, emat = 0, hist = 0, delta = 0, dkh = 0, dvacc = 0, dkt = 0, dkt_hi = 0, du = 0, dwacc = 0,
           dko = 0, ddm = 0, dgs = 0, dep = 0, gam = 0, qts = 0, pch = 0, dsi = 0, rsi = 0, icnt = 0;
    int64_t dkt_split = 0;  // dK~ rows [0, dkt_split) at dkt, the rest at dkt_hi
    size_t history_bytes = 0;
    size_t total = 0;
};

constexpr size_t kGpuWsAlign = 128;

// KSegInter's CTAs per (segment, query head): at D 128 a segment's eight query blocks go to four
// CTAs of two blocks, two CTAs per SM (its 103 KiB layout, bwd_seg.cuh). H200, 2026-12-04,
// `scripts/path-ab.sh` (`fattn-bench path --backend cuda --reps 10`), KSegInter at T4096 H16 D128
// by ncu: split 2 with the one-CTA-per-SM layout 914 us, split 2 with two per SM 1089, split 4 with
// two per SM 641; the earlier one-CTA layout measured split 2 / 4 / 8 at 6.79 / 7.12 / 7.75 ms
// fwd+bwd, and D 64 split 1 / 2 / 4 at T4096 H32 5.37 / 5.39 / 5.49 ms (docs/EXPERIMENTS.md).
// (It divides the segment's 4 query blocks at D <= 64, 8 at D 128.)
#ifndef FATTN_PATH_SEG_SPLIT128
#define FATTN_PATH_SEG_SPLIT128 4
#endif
inline int seg_split_of(int D) { return D > 64 ? FATTN_PATH_SEG_SPLIT128 : 1; }

// The largest row <= cap at which a chunk starts, or `rows` when cap >= rows: the kernels address
// dK~ a chunk at a time, so the row where its buffer changes place must not cut a chunk.
inline int64_t chunk_start_at_most(const PathFwdParams &p, int64_t rows, int64_t cap) {
    if (cap >= rows) return rows;
    if (cap <= 0) return 0;
    int64_t s0 = (cap / p.T) * p.T;  // first row of the sequence holding row cap
    if (p.cu_seqlens) {
        int64_t s = 0;
        while (p.cu_seqlens[s + 1] <= cap) ++s;
        s0 = p.cu_seqlens[s];
    }
    return s0 + (cap - s0) / kC * kC;
}

inline GpuWs gpu_workspace(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir) {
    GpuWs w;
    w.D = gpu_dim(p.dk, p.dv);
    w.seg_split = seg_split_of(w.D);
    const int64_t D = w.D, H = p.h, HQ = p.hq, rows = lay.rows, chunks = lay.total_chunks, segs = lay.segments;
    const int64_t es = int64_t(fattn_dtype_size(p.dtype)), wsz = p.dtype == FATTN_F32 ? 4 : 2, f = 4;
    if (p.cu_seqlens) {
        for (int64_t s = 0; s < p.num_seqs; ++s) w.pairs += pairs_of(int64_t(p.cu_seqlens[s + 1]) - p.cu_seqlens[s]);
    } else {
        const size_t pr = sat_mul(size_t(p.B), size_t(pairs_of(p.T)));
        w.pairs = pr > size_t(INT64_MAX) ? INT64_MAX : int64_t(pr);
    }
    size_t c = kGpuWsAlign;  // offset 0 means "absent"
    auto take = [&](size_t bytes) {
        const size_t at = c;
        c = sat_add(c, sat_round(bytes, kGpuWsAlign));
        return at;
    };
    const bool bwd = dir == FATTN_DIR_BWD;
    if (p.cu_seqlens) {  // the varlen tables, one after another: sequence.h uploads them as one span
        const int64_t n1 = p.num_seqs + 1;
        w.cu = take(sat_prod({n1, 4}));
        w.chunk_base = take(sat_prod({n1, 8}));
        w.seg_base = take(sat_prod({n1, 8}));
        w.hist_base = take(sat_prod({n1, 8}));
        w.pair_base = take(sat_prod({n1, 8}));
    }
    w.bad = take(8);
    if (p.g) w.gsum = take(sat_prod({rows, HQ, f}));
    w.uw = take(sat_prod({rows, H, D, wsz}));
    w.kt = take(sat_prod({rows, H, D, es}));
    w.dmat = take(sat_prod({chunks, H, kC, kC, wsz}));
    // W in the walk type is read last by KHist: in the backward it opens the span that K^, E and
    // the history continue (all read last by KSegInter)
    w.ww = take(sat_prod({rows, H, D, wsz}));
    if (bwd) {
        w.kh = take(sat_prod({rows, H, D, es}));
        w.emat = take(sat_prod({segs, H, D, D, FATTN_PATH_SEG_E16 ? wsz : f}));
        w.history_bytes = sat_prod({lay.hist_cells, HQ, hist_row(p.dk, es), es});
        w.hist = take(w.history_bytes);
        const size_t span_end = c;
        w.delta = take(sat_prod({rows, HQ, f}));
        const size_t row_bytes = sat_prod({HQ, D, f});
        for (size_t *b : {&w.dkh, &w.dvacc, &w.du, &w.dwacc, &w.dko}) *b = take(sat_mul(size_t(rows), row_bytes));
        w.gam = w.dko;  // gamma (read last by KOwn) and dK_own (first written by KOwn, after it read gamma)
        w.dgs = take(sat_prod({rows, HQ, f}));
        w.dep = take(sat_prod({w.pairs, int64_t(w.seg_split), HQ, D, D, f}));
        // intra_states_at(D): the seg-intra states, written by KHist (before KSegInter), in space
        // of their own; chain-A's suffix products take it once seg-intra is done
        if (intra_states_at(w.D)) w.qts = w.pch = take(sat_prod({segs, HQ, kIntraPairs, kC, D, wsz}));
        // Written only after KSegInter, so they take the dead span [ww, span_end) where they fit,
        // in this order, else space of their own: the own-chunk partials dD (first written by
        // KOwn), the seg-intra states (KSegIntra) and, in their place once seg-intra is done,
        // chain-A's suffix products (both in the walk type), with intra_split_at the pairs' dS
        // and dS row sums (written by KIntraScores, read by KIntraGamma) and KIntraGamma's
        // counters, then the leading rows of dK~ (first added to by seg-intra) in what is left
        size_t at = w.ww;
        auto place = [&](size_t bytes) {
            bytes = sat_round(bytes, kGpuWsAlign);
            if (bytes > span_end - at) return take(bytes);
            const size_t o = at;
            at += bytes;
            return o;
        };
        w.ddm = place(sat_prod({chunks, HQ, kC, kC, f}));
        if (!intra_states_at(w.D)) {
            w.qts = place(std::max(sat_prod({segs, HQ, kNcs - 2, kC, D, wsz}), sat_prod({segs, H, kNcs - 2, D, D, wsz})));
            w.pch = w.qts;
        }
        if (intra_split_at(size_t(es), w.D)) {  // FATTN_PATH_INTRA_SPAN (params.h), else space of their own
            auto put = [&](size_t bytes) { return FATTN_PATH_INTRA_SPAN ? place(bytes) : take(bytes); };
            w.dsi = put(sat_prod({segs, HQ, kIntraPairs, kC, kC, es}));
            w.rsi = put(sat_prod({segs, HQ, kIntraPairs, kC, f}));
            w.icnt = put(sat_prod({segs, HQ, kNcs, 4}));
        }
        w.dkt_split = chunk_start_at_most(p, rows, int64_t((span_end - at) / row_bytes));
        if (w.dkt_split > 0) w.dkt = place(sat_mul(size_t(w.dkt_split), row_bytes));
        if (w.dkt_split < rows) w.dkt_hi = take(sat_mul(size_t(rows - w.dkt_split), row_bytes));
    }
    w.total = sat_add(c, kGpuWsAlign);  // slack: the base is aligned up to 128 bytes
    return w;
}

inline char *gpu_ws_base(void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return static_cast<char *>(p) + ((kGpuWsAlign - a % kGpuWsAlign) % kGpuWsAlign);
}

}  // namespace fattn::pathk
