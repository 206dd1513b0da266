// path_params.h — the plain params structs the PaTH backends consume, and the geometry they share
// (sequences, 64-token chunks, 512-token segments, history cell offsets, workspace layout).
//
// src/core/path_api.cpp validates the user's views and fills PathFwdParams / PathBwdParams once.
// Index conventions (element offsets, 64-bit): q element (b, t, hq, d) at
// q + b*q_sb + t*q_ss + hq*q_sh + d; beta/g element (b, t, h) at beta + b*sb + t*ss + h*sh;
// lse (b, hq, t) at lse + b*lse_sb + hq*lse_sh + t. Varlen: B = 1, sequence s covers rows
// [cu[s], cu[s+1]). Workspace buffers are indexed by the *global row* b*T + t (dense) or t (varlen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fattn/fattn.h"

namespace fattn {

constexpr int64_t kPathChunk = 64;     // UT-transform chunk (PATH.md §3; FLA's BS on Hopper)
constexpr int64_t kPathSegment = 512;  // history granularity (PATH.md §6; FLA's S)
constexpr int64_t kPathChunksPerSegment = kPathSegment / kPathChunk;

struct PathFwdParams {
    int64_t B, T;          // view dims: T = rows per batch (total tokens when varlen)
    int64_t hq, h;         // query heads, kv heads (hq % h == 0)
    int64_t dk, dv;        // head dims of q/k/w and of v/o
    fattn_dtype dtype;     // q, k, v, o (and dout, dq, dk, dv)
    float scale;           // resolved (never 0)
    fattn_path_history history;

    const void *q; int64_t q_sb, q_ss, q_sh;
    const void *k; int64_t k_sb, k_ss, k_sh;
    const void *v; int64_t v_sb, v_ss, v_sh;
    const float *w; int64_t w_sb, w_ss, w_sh;
    const float *beta; int64_t beta_sb, beta_ss, beta_sh;
    const float *g; int64_t g_sb, g_ss, g_sh;  // g == nullptr: no gate
    void *o; int64_t o_sb, o_ss, o_sh;
    float *lse; int64_t lse_sb, lse_sh;

    const int32_t *cu_seqlens;  // nullptr: dense (host memory)
    int64_t num_seqs;           // sequences: B (dense) or cu_seqlens entries - 1
    int nthreads;
    fattn_path_check check;     // w / beta check (the CPU runs it in path_api, CUDA on the device)
    float check_tol;            // resolved (> 0)

    int64_t group() const { return hq / h; }
};

struct PathBwdParams : PathFwdParams {
    const void *dout; int64_t do_sb, do_ss, do_sh;
    void *dq; int64_t dq_sb, dq_ss, dq_sh;
    void *dk_; int64_t dk_sb, dk_ss, dk_sh;   // dk_: the gradient of k (dk is the head dim)
    void *dv_; int64_t dv_sb, dv_ss, dv_sh;
    float *dw; int64_t dw_sb, dw_ss, dw_sh;
    float *dbeta; int64_t dbeta_sb, dbeta_ss, dbeta_sh;
    float *dg; int64_t dg_sb, dg_ss, dg_sh;   // given exactly when g is
};

// One sequence: batch index into the views, first row inside that batch, length, and its first
// row in the workspace's global row numbering.
struct PathSeq {
    int64_t b, begin, len, row0;
};

inline PathSeq path_seq(const PathFwdParams &p, int64_t s) {
    if (p.cu_seqlens) {
        int64_t a = p.cu_seqlens[s];
        return {0, a, int64_t(p.cu_seqlens[s + 1]) - a, a};
    }
    return {s, 0, p.T, s * p.T};
}

constexpr int64_t path_num_segments(int64_t len) { return (len + kPathSegment - 1) / kPathSegment; }
constexpr int64_t path_num_chunks(int64_t len) { return (len + kPathChunk - 1) / kPathChunk; }

// History cells (one cell = one token's Hq x K snapshot for one segment column r) of a sequence:
// q_t walked back to the start of segment r is needed for 1 <= r <= floor(t / S) only (§6.3).
constexpr int64_t path_packed_cells(int64_t len) {
    int64_t n = path_num_segments(len);
    return (n - 1) * len - kPathSegment * n * (n - 1) / 2;
}

// Per-sequence bases shared by the workspace layout and the kernels (host-side, O(num_seqs)).
struct PathLayout {
    std::vector<int64_t> seg_base;   // first segment index of each sequence (+ total at the end)
    std::vector<int64_t> hist_base;  // PACKED: first cell of each sequence (+ total at the end)
    int64_t max_segments = 0;        // RECTANGULAR column count (FLA's NB)
    int64_t rows = 0;                // global rows: B*T
    int64_t hist_cells = 0;          // cells in the chosen layout
    int64_t max_len = 0;             // longest sequence (bounds the per-thread scratch)
    int64_t total_chunks = 0;        // 64-token chunks over all sequences
    int64_t segments = 0;            // 512-token segments over all sequences
};

// bases = false: totals only (size queries); the per-sequence vectors stay empty for dense
// calls. Totals saturate at INT64_MAX instead of wrapping (size_math.h).
PathLayout path_layout(const PathFwdParams &p, bool bases = true);

// Cell index of (sequence s, token t of it, column r) in the chosen layout (1 <= r <= t / S).
inline int64_t path_hist_cell(const PathFwdParams &p, const PathLayout &lay, int64_t s,
                              const PathSeq &sq, int64_t t, int64_t r) {
    if (p.history == FATTN_PATH_HISTORY_RECTANGULAR) return (sq.row0 + t) * lay.max_segments + r;
    // Segment-major: column r is a contiguous run of the L - r*S tokens t >= r*S.
    return lay.hist_base[size_t(s)] + (r - 1) * sq.len - kPathSegment * (r - 1) * r / 2 +
           (t - r * kPathSegment);
}

// Workspace layout: offsets (bytes, 64-aligned, from the aligned base path_ws_base()) of every
// buffer of one direction, then one scratch slot per thread (the kernels' per-item scratch: no
// worker allocates). total includes kPathWsAlign bytes of slack to align the caller's base.
struct PathWorkspace {
    size_t history = 0, history_bytes = 0;  // bwd only
    size_t u = 0, kt = 0, gsum = 0;          // fwd and bwd: U, K~ [rows, H, K]; G [rows, Hq]
    size_t kh = 0, dkh = 0, dkt = 0, du = 0, dwacc = 0, dkacc = 0, dvacc = 0, dbacc = 0;
    size_t dgs = 0, delta = 0, e = 0, de = 0;
    size_t slots = 0, slot_bytes = 0;        // nslots x slot_bytes
    int nslots = 1;                          // threads that can run at once (path_workspace)
    size_t total = 0;
};

PathWorkspace path_workspace(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir);

// Bytes of one thread's scratch slot (the largest per-item carve of the direction's phases).
// Defined by the CPU backend next to its carve functions (src/cpu/path/path_common.cpp).
size_t path_slot_bytes(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir);

// The workspace may start anywhere; its layout is relative to the next 64-byte boundary.
constexpr size_t kPathWsAlign = 64;
inline char *path_ws_base(void *w) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(w);
    return static_cast<char *>(w) + ((kPathWsAlign - a % kPathWsAlign) % kPathWsAlign);
}

}  // namespace fattn
