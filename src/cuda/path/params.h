// params.h — PathDev, the one argument block of every PaTH kernel (plain C++, no CUDA types): the
// shapes, the user's views (element strides), the per-sequence tables and the workspace buffers.
// Filled on the host by make_dev() (sequence.h) from the validated PathBwdParams; passed by value.
//
// Row conventions: a "row" is b*T + t (dense) or t (varlen, B = 1), the index of a token in the
// workspace buffers; a "chunk" is 64 tokens of one sequence, a "segment" 512 (8 chunks). Global
// chunk / segment numbers run over all sequences (chunk_base / seg_base).
#pragma once

#include <cstdint>

#include "core/path_params.h"

// E_r (the segments' K x K products) in the walk type: 1 (f16 for 16-bit inputs), 0 = f32. Read by
// the workspace layout and the kernels alike, so an A/B build defines it for every translation unit.
#ifndef FATTN_PATH_SEG_E16
#define FATTN_PATH_SEG_E16 1
#endif

namespace fattn::pathk {

constexpr int kC = int(kPathChunk);               // chunk (UT transform)
constexpr int kNcs = int(kPathChunksPerSegment);  // chunks per segment
// KSegInter's query blocks of a segment may go to several CTAs (PathDev::seg_split, chosen in
// gpu_layout.h), each with its own dE partial, summed in split order by KChainA.
constexpr int kS = int(kPathSegment);             // segment (history granularity)

struct PathDev {
    // ---- shape ----
    int64_t B, T;
    int hq, h, grp;         // query heads, kv heads, hq / h
    int K, V;               // head dims; the kernels' D (template) is >= both, columns beyond are 0
    int hk;                 // a history row's elements: K rounded up to 16 bytes (gpu_layout.h: hist_row)
    float scale, sl2;       // scale and scale * log2(e)
    int has_gate;
    float check_tol;        // STRICT w / beta check tolerance
    int64_t num_seqs;
    // ---- sequences (varlen: device tables in the workspace; dense: closed form) ----
    const int32_t *cu;          // [num_seqs + 1] or nullptr (dense)
    const int64_t *chunk_base;  // [num_seqs + 1] first global chunk of each sequence
    const int64_t *seg_base;    // [num_seqs + 1]
    const int64_t *hist_base;   // [num_seqs + 1] first history cell (PACKED)
    const int64_t *pair_base;   // [num_seqs + 1] first dE partial (query segment, key segment)
    int64_t total_chunks, total_segs;
    int hist_rect;              // RECTANGULAR history: cell = row * rect_cols + r
    int64_t rect_cols;
    // ---- the user's views (element strides; batch, token, head) ----
    const void *q; int64_t q_sb, q_ss, q_sh;
    const void *k; int64_t k_sb, k_ss, k_sh;
    const void *v; int64_t v_sb, v_ss, v_sh;
    const float *w; int64_t w_sb, w_ss, w_sh;
    const float *beta; int64_t beta_sb, beta_ss, beta_sh;
    const float *g; int64_t g_sb, g_ss, g_sh;
    void *o; int64_t o_sb, o_ss, o_sh;
    float *lse; int64_t lse_sb, lse_sh;
    const void *dout; int64_t do_sb, do_ss, do_sh;
    void *dq; int64_t dq_sb, dq_ss, dq_sh;
    void *dk; int64_t dk_sb, dk_ss, dk_sh;
    void *dv; int64_t dv_sb, dv_ss, dv_sh;
    float *dw; int64_t dw_sb, dw_ss, dw_sh;
    float *dbeta; int64_t dbeta_sb, dbeta_ss, dbeta_sh;
    float *dg; int64_t dg_sb, dg_ss, dg_sh;
    // 16-byte cp.async is legal for this view (pointer and strides aligned, dims of 16 bytes)
    int vec_q, vec_k, vec_v, vec_w, vec_do, vec_o;
    // ---- workspace ----
    float *gsum;     // [rows, Hq] gate prefix sums (has_gate)
    void *uw;        // [rows, H, D] U in the walk type (f16 for 16-bit inputs, f32 for f32)
    void *ww;        // [rows, H, D] W in the walk type
    void *kt;        // [rows, H, D] K~ (keys walked to their chunk end), input dtype
    void *dmat;      // [chunks, H, 64, 64] D = T SL(W K^T), walk type (strictly lower; keep_t0: T0 above it)
    void *kh;        // [rows, H, D] K^ (keys walked to their segment end), input dtype
    float *msuf;     // [chunks, H, D, D] suffix products of each chunk's segment (backward)
    void *emat;      // [segments, H, D, D] E_r = I - (product of segment r), emat_t (common.cuh)
    void *hist;      // the history (input dtype, width K)
    float *delta;    // [rows, Hq]
    float *dkh, *dvacc, *du, *dwacc, *dko;  // [rows, Hq, D] per-query-head partials
    float *dkt, *dkt_hi;        // the partial dK~ [rows, Hq, D] in two places: rows [0, dkt_split) at
    int64_t dkt_split;          // dkt, the rest at dkt_hi (dkt_of() in common.cuh; gpu_layout.h says why)
    float *ddm;      // [chunks, Hq, 64, 64]
    float *dgs;      // [rows, Hq]
    float *dep;      // [pairs, seg_split, Hq, D, D]
    int keep_t0;     // the backward's prep keeps T0 beside Dm in p.dmat for KChainB (prep.cuh: FATTN_PATH_KEEP_T0)
    int seg_split;   // KSegInter's CTAs per (segment, query head) (gpu_layout.h)
    float *gam;      // [rows, Hq, D] dLoss/dQ~ (query side), read last by KOwn: the same buffer as dko
    void *qts;       // walk type: seg-intra's walked states, [segments, Hq, 6, 64, D] X(1 .. 6) of the chunk in
                     // work, or with intra_states_at(D) [segments, Hq, 28, 64, D] every pair's X(j), from KHist
    void *pch;       // [segments, H, 6, D, D] walk type: chain-A's suffix products (the space of qts, after seg-intra)
    void *dsi;       // intra_split_at: [segments, Hq, 28, 64, 64] every seg-intra pair's dS, input dtype (KIntraScores)
    float *rsi;      // intra_split_at: [segments, Hq, 28, 64] the row sums of each pair's dS (f32)
    int *icnt;       // intra_split_at: [segments, Hq, 8] KIntraGamma's counters (zeroed before it)
    unsigned long long *bad;  // w/beta check: first offending (row * H + h), or ~0
};

// FATTN_PATH_INTRA_STATES: the history producer (KHist, KHistSm90) stores the states seg-intra's
// pairs read, X_i(j) = Q~ of chunk 8r + i walked back through chunks 8r + i - 1 .. 8r + j + 1
// (1 <= i < 8, 0 <= j < i: 28 per segment and query head, kIntraPairs), as it walks through them,
// so seg-intra walks nothing: 0 = never (seg-intra walks each query chunk's states itself, into
// 6 slots); 1 (default) = at D 128; 2 = at every head dim. The states take space of their own, live from
// KHist to seg-intra (chain-A's suffix products take it after): 56 MiB at T4096 H16 D128 16-bit.
// On an H100 (2026-12-07, tree ff07487, with FATTN_PATH_PDL; docs/PERF.md): seg-intra 990 -> 792 us
// and the history 191 -> 225 us at T4096 H16 D128 (ncu), fwd+bwd 4.219 / 4.231 -> 4.058 / 4.081 ms.
// 2 took 1.3-2.5% off fwd+bwd at D64 (T8192 H32 13.044 / 13.087 -> 12.875 / 12.900 ms) for
// 112 MiB more workspace there (28 x 64 x 64 x 2 B per segment and query head): not the default.
#ifndef FATTN_PATH_INTRA_STATES
#define FATTN_PATH_INTRA_STATES 1
#endif
constexpr bool intra_states_at(int D) { return FATTN_PATH_INTRA_STATES == 2 || (FATTN_PATH_INTRA_STATES == 1 && D >= 128); }
constexpr int kIntraPairs = 28;
// The slot of pair (i, j) among a (segment, query head)'s kIntraPairs states.
constexpr int intra_slot(int64_t i, int64_t j) { return int(i * (i - 1) / 2 + j); }

// FATTN_PATH_INTRA_SPLIT: seg-intra in independent CTAs, 16-bit inputs at D 128 (where
// intra_states_at(D)), two kernels in place of KSegIntra: KIntraScores (bwd_intra_scores.cuh), the
// scores of its pairs (P, dS, dK~ += dS^T X, dV += P^T dO and the dG columns) one CTA per
// (segment, query head, key chunk), which sums its key chunk's dK~ and dV over the query chunks
// in shared memory and writes each pair's dS (input dtype) and dS row sums to the workspace
// (8.25 KiB a pair: 29.5 MiB at T4096 H16 D128); then KIntraGamma (bwd_intra_gamma.cuh), the chain
// of gamma steps one CTA per query chunk (16-bit tiles: two CTAs per SM), whose adds to the key
// chunks' dU and dW are ordered by a counter per (segment, query head, key chunk). 1 = on (default);
// 0 = KSegIntra (bwd_intra.cuh), one CTA per (segment, query head). On an H100 (2026-12-07, tree
// b4d96d7, docs/PERF.md): seg-intra 789 -> 251 + 500 us at T4096 H16 D128 (ncu), fwd+bwd
// 4.085 / 4.100 -> 3.970 / 4.011 ms, H4 3.681 / 3.670 -> 3.654 / 3.659, with a (segment, query
// head)'s CTAs side by side; in the chunk-major block order (intra_chunk_major, common.cuh)
// KIntraGamma took 498 -> 381 us, KIntraScores 252 -> 240, fwd+bwd 4.002 / 4.024 -> 3.867 / 3.925.
#ifndef FATTN_PATH_INTRA_SPLIT
#define FATTN_PATH_INTRA_SPLIT 1
#endif
// FATTN_PATH_SCORES_WIDE (bwd_intra_scores.cuh): 1 = KIntraScores in sixteen warps (each a 16 x 16
// block of a pair's scores, the dK~ / dV products on warp tiles of half the width), where eight
// leave its one CTA per SM (193 KiB of shared memory) at 12.5% occupancy with 70% of cycles
// issuing nothing (ncu, H100, 2026-12-07, docs/PERF.md). 0 (default): eight warps.
#ifndef FATTN_PATH_SCORES_WIDE
#define FATTN_PATH_SCORES_WIDE 0
#endif
// FATTN_PATH_INTRA_SPAN (gpu_layout.h): 1 = the split seg-intra's pairs (dS, its row sums and
// KIntraGamma's counters: 29.5 MiB at T4096 H16 D128) take the backward's dead span (W, K^, E and
// the history, read last by KSegInter) where they fit, rather than space of their own (default;
// workspace 461.4 -> 432.5 MiB at T4096 H16 D128 bf16). 0 = space of their own.
#ifndef FATTN_PATH_INTRA_SPAN
#define FATTN_PATH_INTRA_SPAN 1
#endif
constexpr bool intra_split_at(size_t es, int D) { return FATTN_PATH_INTRA_SPLIT && es == 2 && D >= 128 && intra_states_at(D); }

// One sequence as a kernel sees it.
struct SeqInfo {
    int64_t s, b, begin, len, row0, chunk0, seg0, hist0, pair0;
};

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// dE partials of a sequence: (query segment r, key segment r') with 1 <= r' < r <= N - 1.
constexpr int64_t pairs_of(int64_t len) {
    const int64_t n = path_num_segments(len);
    return n >= 3 ? (n - 1) * (n - 2) / 2 : 0;
}

}  // namespace fattn::pathk
