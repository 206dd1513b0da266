// path_cpu.h — entry points of the blocked CPU PaTH backend (PATH.md §3-§6), and the helpers its
// forward and backward files share.
//
// The core (src/core/path_api.cpp) validates, fills PathFwdParams / PathBwdParams and calls
// path_fwd / path_bwd (through the table of src/cpu/backend_cpu.cpp) with a workspace laid out by path_workspace() (src/core/path_layout.cpp).
// Arithmetic is f32 whatever the input dtype; every phase is a fattn::parallel_for over items that
// write disjoint outputs in a fixed internal order, so results are bitwise independent of the
// thread count. No floating-point atomics anywhere.
//
// No heap inside a worker: every per-item scratch array is carved out of a per-thread slot of the
// workspace (path_workspace() sizes the slots with path_slot_bytes(), i.e. with the carve functions
// below run on a null base), so an allocation failure can only happen on the calling thread, and
// the memory model counts every scratch byte. Which slot an item gets never affects results: an
// item writes every scratch element before reading it (arrays that the code reads as zeros are
// zero-filled where they are carved, as the std::vector they replace was).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/path_params.h"
#include "cpu/attn_impl.h"  // detail::SlotPool, detail::Arena (shared with the softmax kernels)

namespace fattn::cpu {

// FATTN_OK if the CPU backend runs p; otherwise BAD_HEAD_DIM + reason.
fattn_status path_select(const PathFwdParams &p, std::string *why);

// Forward: writes o and lse. Backward: writes dq, dk, dv, dw, dbeta (and dg when g is given).
fattn_status path_fwd(const PathFwdParams &p, void *workspace, std::string *err);
fattn_status path_bwd(const PathBwdParams &p, void *workspace, std::string *err);

// Backward phases up to and including the history producer only (test hook: lets a test poison
// the history, run the producer and count the cells it left unwritten).
fattn_status path_bwd_history_only(const PathBwdParams &p, void *workspace, std::string *err);

namespace path_detail {

// Typed views of the workspace buffers (all f32 except the history, which is in q's dtype).
struct Ws {
    void *history = nullptr;
    float *u, *kt, *gsum;                           // U, K~ [rows, H, K]; G [rows, Hq]
    float *kh, *dkh, *dkt, *du, *dwacc, *dkacc;     // [rows, H, K]
    float *dvacc;                                   // [rows, H, V]
    float *dbacc;                                   // [rows, H]
    float *dgs, *delta;                             // [rows, Hq]
    float *e, *de;                                  // [segments, H, K, K]
    char *slots = nullptr;                          // nslots x slot_bytes per-thread scratch
    size_t slot_bytes = 0;
    int nslots = 1;
};
Ws bind(const PathWorkspace &lay, void *base, fattn_dir dir);

// size_t of an int64_t count (a function, so `std::vector<float> x(sz(n))` is never a
// vexing parse).
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Dot product with 8 interleaved partial sums combined in a fixed tree: vectorizable without
// -ffast-math, and its rounding depends only on n, never on the thread or the call site.
inline float dotf(const float *a, const float *b, int64_t n) {
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
}

// Load n elements of a dtype-t buffer at element offset off as f32.
void load_row(const void *base, fattn_dtype t, int64_t off, int64_t n, float *out);

// One chunk of one kv head: its rows loaded as f32 (W, K, beta) and, from the workspace, U and K~.
// w, k, beta point into scratch carved for up to ScratchDims::C rows (carve_chunk).
struct Chunk {
    int64_t c0 = 0, n = 0;                                // first token (inside the sequence), length (<= 64)
    float *w = nullptr, *k = nullptr, *beta = nullptr;    // [n, K], [n, K], [n]
    const float *u = nullptr, *kt = nullptr;              // workspace rows (row stride H*K)
};

// ---- per-thread scratch ----
// Bounds every carve uses: head dims, rows of the longest chunk (<= 64), segments and chunks of
// the longest sequence (arrays only some shapes need are carved empty otherwise).
struct ScratchDims {
    int64_t K = 0, V = 0, C = 1, segs = 0, chunks = 0;
};
ScratchDims scratch_dims(const PathFwdParams &p, const PathLayout &lay);

using detail::Arena;
// n floats, zero-filled (on a real base): the value-initialized std::vector it replaces.
inline float *zeros(Arena &a, int64_t n) {
    float *r = a.floats(n);
    if (r) std::fill_n(r, n, 0.f);
    return r;
}
inline void carve_chunk(Arena &a, const ScratchDims &d, Chunk *ch) {
    ch->w = a.floats(d.C * d.K);
    ch->k = a.floats(d.C * d.K);
    ch->beta = a.floats(d.C);
}

// The part of the forward's and the history producer's scratch that walks query rows back
// through key chunks: the two chunks, one query row, the walked rows and the scores; carved first
// (and zero-filled) by both, which then carve their own arrays after it.
struct WalkScratch {
    Chunk qc, kc;
    float *q, *x, *sc;  // [K], [C, K], [C]
};
inline void carve_walk(Arena &a, const ScratchDims &d, WalkScratch *s) {
    carve_chunk(a, d, &s->qc);
    carve_chunk(a, d, &s->kc);
    s->q = zeros(a, d.K);
    s->x = zeros(a, d.C * d.K);
    s->sc = zeros(a, d.C);
}

// One thread's slot for the duration of one work item (RAII over a detail::SlotPool).
class SlotLease {
  public:
    SlotLease(detail::SlotPool &pool, const Ws &ws) : pool_(pool), i_(pool.acquire()) {
        base_ = ws.slots + size_t(i_) * ws.slot_bytes;
    }
    ~SlotLease() { pool_.release(i_); }
    SlotLease(const SlotLease &) = delete;
    SlotLease &operator=(const SlotLease &) = delete;
    char *base() const { return base_; }

  private:
    detail::SlotPool &pool_;
    int i_;
    char *base_;
};

// Scratch of the prepare phase (one (sequence, kv head, chunk) item).
struct PrepScratch {
    Chunk ch;
    float *t0, *u;  // [C, C], [C, K]
    size_t bytes;
};
PrepScratch carve_prep(const ScratchDims &d, char *base);
// Largest per-item scratch of the forward's own phase / of the backward's phases 2-5
// (path_fwd.cpp, path_bwd.cpp); path_slot_bytes() takes the max with carve_prep's.
size_t fwd_item_bytes(const ScratchDims &d);
size_t bwd_item_bytes(const ScratchDims &d);
void load_chunk(const PathFwdParams &p, const Ws &ws, const PathSeq &sq, int64_t h, int64_t c,
                Chunk *ch);

// UT transform of one chunk (§3): T0 = (I + SL(diag(beta) W W^T))^-1 (unit lower, [n, n]) and
// U = T0 diag(beta) W ([n, K]), so that H_{n-1} ... H_0 = I - W^T U.
void ut_transform(const float *w, const float *beta, int64_t n, int64_t K, float *t0, float *u);

// Walk query rows back through a whole chunk: X <- X - (X W^T) U  (X: [m, K], row stride K).
void walk_rows_back(float *x, int64_t m, const Chunk &ch, int64_t H, int64_t K, float *tmp);

// Phases shared by fwd and bwd: U and K~ for every (sequence, kv head, chunk); G for every
// (sequence, query head).
void prepare(const PathFwdParams &p, const PathLayout &lay, const Ws &ws, detail::SlotPool &pool);

// Token-level walk of one query row a of a chunk back to the chunk start: raw scores against the
// chunk's keys b <= a (scores[b]) and the final state Q~_a; optionally every intermediate state
// (states[b*K..]: the state that scores key b).
void walk_query_in_chunk(const float *q, const Chunk &ch, int64_t a, int64_t K, float *scores,
                         float *qt, float *states);

}  // namespace path_detail
}  // namespace fattn::cpu
