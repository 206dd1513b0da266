// attn_impl.h — private pieces shared by the CPU softmax-attention kernels (fused and exact).
//
//   tile sizes            kBQ × kBK tiles of (queries × keys); packed rows padded to kNR floats
//   math (attn_math.cpp)  the GEMM microkernel (plain and transposed A), a vectorizable exp,
//                         per-query (column) max/exp/sum in fixed order
//   tiles (attn_tiles.cpp) strided tile loaders/stores, the per-row window of a tile, the bias
//                         -inf tile map, the workspace layout and the scratch-slot pool
//   kernels               fused_fwd (attn_fwd.cpp), exact_fwd (attn_exact.cpp),
//                         attn_bwd_impl<kExact> (attn_bwd.cpp: one backward, P recomputed or read)
// Nothing here is visible outside src/cpu/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/attn_params.h"
#include "core/size_math.h"

namespace fattn::cpu::detail {

// 64 query rows × 64 keys: one f32 S/P tile is 16 KiB, so S, P, dP and the packed K/V tiles of
// the backward (D <= 128) stay inside a 1-2 MiB L2 while each packed tile is reused 64 times.
constexpr int kBQ = 64;
constexpr int kBK = 64;
// Packed-row granule: every packed row is padded to a multiple of kNR floats with zeros, so the
// GEMM of every ISA (vectors of 4, 8 or 16 floats) never needs a column tail.
constexpr int kNR = 16;
// Backward: kv tiles of one (sequence, kv head) are split over this many interleaved chunks when
// there are fewer (sequence, kv head) pairs than kBwdTargetTasks, so a few threads find work.
// Each chunk owns a private f32 dQ partial (summed in chunk order afterwards), so the chunk
// count depends on the shapes only (never on nthreads) and is capped to bound that buffer.
constexpr int64_t kBwdTargetTasks = 8;
constexpr int64_t kMaxKvChunks = 4;

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pad_n(int64_t n) { return cdiv(n, kNR) * kNR; }

// ---- math (attn_math.cpp) ----

// A strided tile (rows of `bytes` bytes, `stride` bytes apart) that the next step will load,
// prefetched by a GEMM while it computes. Its rows are short runs a whole token (H·D elements)
// apart, which the hardware prefetchers do not follow; without it every load_tile row waits for
// L3/DRAM (~28% of the time at S 4096 D128 on AVX2). The GEMM spreads the prefetches over its
// register blocks: AMD Zen 3 drops most of a burst of hundreds issued at once.
struct TilePrefetch {
    const char *base = nullptr;  // nullptr: nothing to prefetch
    int64_t stride = 0, bytes = 0;
    int rows = 0;
};
TilePrefetch tile_prefetch(const void *src, fattn_dtype t, int64_t rs, int rows, int cols);

// C[M, N] (+)= A[M, K] · B[K, N], all row-major f32 with leading dims lda/ldb/ldc; N % kNR == 0.
// Every C element sums k = 0..K-1 in order (after its previous value when accumulate). pf: a tile
// to prefetch meanwhile (never read for the result).
void gemm(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
          int64_t ldc, bool accumulate, const TilePrefetch *pf = nullptr);
// Same with A stored transposed: A(r, k) = At[k * lda + r].
void gemm_tn(int M, int N, int K, const float *At, int64_t lda, const float *B, int64_t ldb,
             float *C, int64_t ldc, bool accumulate, const TilePrefetch *pf = nullptr);
// gemm (no accumulate) plus cmax[j] = max_i C[i, j] over i < M, exactly col_max(C, ldc, M, N, cmax).
void gemm_max(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
              int64_t ldc, float *cmax, const TilePrefetch *pf = nullptr);
// y[j] = exp(x[j] - shift) for j < n; exactly 0 where x - shift < -87 (so -inf gives 0).
void exp_shift(const float *x, float shift, float *y, int n);
void scale_row(float *x, float a, int n);   // x *= a
// ds[j] = p[j] * (ds[j] - delta)
void dsoftmax_row(float *ds, const float *p, float delta, int n);
// Column helpers for tiles stored [keys, queries] (row j = key, column i = query), n columns:
//   col_max:     mx[i] = max_j x[j, i] over j < nj (-inf when nj == 0)
//   col_exp_sum: y[j, i] = exp(x[j, i] - shift[i]) (0 below -87, as exp_shift), sum[i] = Σ_j y[j, i]
//                in j order (y may alias x)
//   col_scale:   x[j, i] *= a[i]
void col_max(const float *x, int64_t ld, int nj, int n, float *mx);
void col_exp_sum(const float *x, int64_t ld, int nj, int n, const float *shift, float *y,
                 int64_t ldy, float *sum);
void col_scale(float *x, int64_t ld, int nj, int n, const float *a);
// Name of the ISA path the math runs on ("avx512", "avx2", "base"); see attn_math.cpp.
const char *isa_name();
// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols
void transpose(const float *src, int64_t lds, int rows, int cols, float *dst, int64_t ldd);

// ---- tiles (attn_tiles.cpp) ----

// dst[r * ldd + c] = scale * src[r * rs + c] for r < rows, c < cols; columns [cols, ldd) zeroed.
void load_tile(const void *src, fattn_dtype t, int64_t rs, int rows, int cols, float scale,
               float *dst, int64_t ldd);
// Transposed: dst[c * ldd + r] = src[r * rs + c]; rows [rows, pad_n(rows)) of each dst row zeroed.
void load_tile_t(const void *src, fattn_dtype t, int64_t rs, int rows, int cols, float *dst,
                 int64_t ldd);
// dst[r * rs + c] = scale * src[r * lds + c] converted to t.
void store_tile(void *dst, fattn_dtype t, int64_t rs, int rows, int cols, const float *src,
                int64_t lds, float scale);
// Zero rows [r0, r1) (cols elements each) of a strided view.
void zero_rows(void *dst, fattn_dtype t, int64_t rs, int64_t r0, int64_t r1, int cols);
// s[j] += bias[j] − c for j in [a, b); c is the row's bias ceiling (Workspace::ceil)
void add_bias(const void *bias, fattn_dtype t, float *s, int a, int b, float c);
// Into a column of a [keys, queries] tile: st[j * ld] += bias[j] − c for j in [a, b)
void add_bias_t(const void *bias, fattn_dtype t, float *st, int64_t ld, int a, int b, float c);
// max_j bias[j] over [a, b) (-inf when empty; NaN ignored)
float bias_row_max(const void *bias, fattn_dtype t, int a, int b);

inline const void *elem(const void *base, fattn_dtype t, int64_t off) {
    return static_cast<const char *>(base) + off * (t == FATTN_F32 ? 4 : 2);
}
inline void *elem(void *base, fattn_dtype t, int64_t off) {
    return static_cast<char *>(base) + off * (t == FATTN_F32 ? 4 : 2);
}

// Valid key columns [a[r], b[r]) inside one kv tile for each query row of one q tile.
struct TileRows {
    int a[kBQ], b[kBQ];
};
enum TileState { kTileSkip = 0, kTileActive = 1 };
// Window of the tile (rows [i0, i0+rows) × keys [j0, j0+bk)) of sequence r; kTileSkip when no row
// sees any of its keys. Cheap (O(rows)); the caller pre-filters with tile_may_touch.
TileState tile_rows(const AttnFwdParams &p, const SeqRange &r, int64_t i0, int rows, int64_t j0,
                    int bk, TileRows *out);
// False when no query of rows [i0, i0+rows) can see keys [j0, j0+bk) (window bounds only).
bool tile_may_touch(const AttnFwdParams &p, const SeqRange &r, int64_t i0, int rows, int64_t j0,
                    int bk);

// Bias pointer of element (sequence r, head h, query row i, key j) — rows/keys inside the sequence.
inline const void *bias_at(const AttnFwdParams &p, const SeqRange &r, int64_t h, int64_t i,
                           int64_t j) {
    return elem(p.bias, p.bias_dtype,
                r.batch_index * p.bias_sb + h * p.bias_sh + (r.q_begin + i) * p.bias_si +
                    r.kv_begin + j);
}

// Prefetch every 64-byte line of bytes [p, p + bytes) (a row that does not start on a line too).
inline void prefetch_run(const void *p, int64_t bytes) {
    const char *row = static_cast<const char *>(p);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
    __builtin_prefetch(row + bytes - 1);
}

// Prefetch the bias rows of a tile. Each row is a short contiguous run far from the next one, so
// the hardware prefetchers miss them; issued before the tile's GEMM, the loads overlap the math.
inline void prefetch_bias(const AttnFwdParams &p, const SeqRange &r, int64_t h, int64_t i0, int rows,
                          int64_t j0, int bk) {
    const int64_t bytes = int64_t(bk) * (p.bias_dtype == FATTN_F32 ? 4 : 2);
    for (int i = 0; i < rows; ++i) prefetch_run(bias_at(p, r, h, i0 + i, j0), bytes);
}

// One byte per (bias slice, sequence, q tile, kv tile): 1 if the tile has a key that is in the
// window and not -inf in the bias. Built once per call, read by the forward and the backward.
struct BiasMap {
    const uint8_t *act = nullptr;  // nullptr: no bias, every tile in the window is active
    int64_t nbh = 1;               // bias heads that differ (Hq, or 1 when broadcast)
    bool per_batch = false;        // dense with a per-batch bias: one slice per batch
    int64_t slice_pairs = 0;       // tile pairs per slice
    const int64_t *seq_off = nullptr;  // varlen: first pair of each sequence (num_seqs + 1)

    bool active(int64_t s, int64_t h, int64_t qt, int64_t kt, int64_t nkt) const {
        if (!act) return true;
        int64_t slice = (per_batch ? s : 0) * nbh + (nbh > 1 ? h : 0);
        int64_t base = seq_off ? seq_off[s] : 0;
        return act[slice * slice_pairs + base + qt * nkt + kt] != 0;
    }
};

// Bias ceilings. Every kernel adds a row's bias as (bias − c) with c the row's largest allowed
// bias (0 when it has none), and the LSE it reports is c + lse', lse' = log Σ exp(logit − c):
// softmax is unchanged by a per-row constant, and a Hugging Face padding row (every key at
// finfo.min or -1e9) keeps its scores instead of losing them to the rounding of score + bias.
// The backward needs lse' itself: lse − c is exact enough while |c| <= kCeilExact; rows with a
// larger ceiling get lse' recomputed by the forward's tasks (fused_fwd's stats mode), since
// their public LSE may have swallowed log Σ (at c = finfo.min it is c exactly).
constexpr float kCeilExact = 16.0f;

// Workspace layout of one call: the bias map and ceilings, the backward's delta, lse' and dQ
// partials, then one scratch slot per thread. The same function sizes it (attn_workspace_size)
// and carves it.
struct Workspace {
    BiasMap map;
    float *ceil = nullptr;    // bias: [map slices, total_q] each row's bias ceiling (see above)
    float *lse_rel = nullptr; // bwd with bias: [nb, Hq, total_q] lse' = lse − ceiling
    float *delta = nullptr;   // bwd: [nb, Hq, total_q] rowsum(dO ∘ O); nb = B dense, 1 varlen
    float *dq_part = nullptr; // bwd: [nchunks, nb, Hq, total_q, pad_n(D)] f32 dQ partials
    float *qs = nullptr;      // bwd: [nb, Hq, total_q, ldq]  scale · Q, f32, packed once per call
    float *dos = nullptr;     // bwd: [nb, Hq, total_q, ldo]  dO, f32, packed once per call
    int64_t ldq = 0, ldo = 0; // packed_ld(D), packed_ld(Dv)
    int64_t nchunks = 1;
    char *slots = nullptr;
    size_t slot_bytes = 0;
    int nslots = 1;
};
int64_t bwd_chunks(const AttnFwdParams &p);
size_t workspace_layout(const AttnFwdParams &p, fattn_dir dir, void *base, Workspace *ws);
// Fills ws->map's bytes (parallel over tiles). Call after workspace_layout with a real base.
void build_bias_map(const AttnFwdParams &p, Workspace *ws);
// Fills ws->ceil (the bias ceiling of every row of every map slice); after build_bias_map.
void build_bias_ceiling(const AttnFwdParams &p, Workspace *ws);
// True when some row's ceiling is above kCeilExact in magnitude (or NaN).
bool any_large_ceiling(const AttnFwdParams &p, const Workspace &ws);
// The ceilings of rows [i, ...) of sequence r, query head h (nullptr without a bias).
inline const float *ceil_row(const AttnFwdParams &p, const Workspace &ws, const SeqRange &r, int64_t h, int64_t i) {
    if (!p.bias) return nullptr;
    const int64_t slice = (ws.map.per_batch ? r.batch_index : 0) * ws.map.nbh + (ws.map.nbh > 1 ? h : 0);
    return ws.ceil + slice * p.total_q + r.q_begin + i;
}

// Hands each running task a private scratch slot; which slot a task gets never affects results
// (every slot byte a task reads it wrote first).
class SlotPool {
  public:
    explicit SlotPool(int n) : n_(n), busy_(new std::atomic<int>[size_t(n)]()) {}
    int acquire() {
        for (;;)
            for (int i = 0; i < n_; ++i)
                if (!busy_[i].exchange(1, std::memory_order_acquire)) return i;
    }
    void release(int i) { busy_[i].store(0, std::memory_order_release); }

  private:
    int n_;
    std::unique_ptr<std::atomic<int>[]> busy_;
};

// Carves float arrays out of one scratch slot, 64-byte aligned; with p == nullptr it only counts.
// Counts saturate (size_math.h): a slot too large to exist sizes as SIZE_MAX, never wraps.
struct Arena {
    char *p;
    size_t used = 0;
    float *floats(size_t n) {
        float *r = p ? reinterpret_cast<float *>(p + used) : nullptr;
        used = sat_add(used, sat_round(sat_mul(n, 4), 64));
        return r;
    }
    TileRows *rows() { return reinterpret_cast<TileRows *>(floats(sizeof(TileRows) / 4)); }
};

// Per-task scratch of the forward (fused and exact) and of the backward; the same carve sizes
// the slot (base == nullptr) and hands out its arrays. Shapes in the comments.
// Leading dim of a packed tile whose rows are n floats (n % kNR == 0): padded so that consecutive
// rows start an odd number of 64-byte lines apart. A power-of-two row stride puts a GEMM panel's
// rows (one or two lines each, read down k) into a few L1 sets, where they evict each other and
// the A operand (PV at D128 with V packed at 512 B rows: 63 -> 70 GFLOP/s on AVX2, hot data).
inline int64_t conflict_free_ld(int64_t n) { return (n / kNR) % 2 == 0 ? n + kNR : n; }
// The leading dim every packed tile of rows of n floats uses (the forward's K/V, the backward's
// K/dK/dV scratch and the workspace's packed scale · Q and dO): padded to kNR, then conflict-free.
inline int64_t packed_ld(int64_t n) { return conflict_free_ld(pad_n(n)); }

// Fused forward: a task holds this many consecutive q tiles (1, 2 or 4) and loads each kv tile
// once for all of them. A function of the shapes and the thread count (enough tasks for the
// threads); results never depend on it (attn_fwd.cpp). Exact and stats callers size by it too.
constexpr int kMaxQGroup = 4;
int fwd_q_group(const AttnFwdParams &p);

struct FwdScratch {
    float *qt;   // [G, D, ldt]       (scale · Q tile)ᵀ per q tile of the group (G = fwd_q_group)
    float *kr;   // [kBK, ldk]        K tile (ldk = packed_ld(D))
    float *v;    // [kBK, ldv]        V tile (ldv = packed_ld(Dv))
    float *st;   // [kBK, ldt]        Sᵀ, then Pᵀ: keys × queries, so per-query softmax is vector work
    int64_t ldt, ldk, ldv;  // ldt = conflict_free_ld(kBQ)
    float *acc;  // [G, kBQ, pad_n(Dv)] unnormalized O per q tile
    float *m, *l;                   // [G, kBQ] per query of each q tile
    float *mx, *shift, *alpha, *sum;  // [kBQ] per query
    float *blk;  // EXACT only: [Skv, kBQ] the task's Pᵀ block, softmaxed in cache, then saved
    TileRows *tr;
    size_t bytes;
};
FwdScratch carve_fwd(const AttnFwdParams &p, char *base);

// Leading dims (conflict_free_ld): ldt of the kBK-wide tiles, ldd of the D-wide, ldo of the Dv-wide.
// The q-side tiles (scale · Q, dO) are read from the workspace's packed copies (Workspace::qs/dos).
struct BwdScratch {
    float *kt;    // [D, ldt]          K tile transposed (for S = Qs · Kᵀ)
    float *vt;    // [Dv, ldt]         V tile transposed (for dP = dO · Vᵀ)
    float *kr;    // [kBK, ldd]        K tile (for dQ += dS · K)
    float *pm;    // [kBQ, ldt]        P
    float *dp;    // [kBQ, ldt]        dP, then dS
    float *dk;    // [kBK, ldd]        dK accumulator (already scaled: built from scale · Q)
    float *dv;    // [kBK, ldo]        dV accumulator
    int64_t ldt, ldd, ldo;
    float *lse, *delta;  // [kBQ]
    TileRows *tr;
    size_t bytes;
};
BwdScratch carve_bwd(const AttnFwdParams &p, char *base);

// Maps a flat task index onto (sequence, index inside the sequence) with per-sequence counts.
struct TaskIndex {
    std::vector<int64_t> off;  // off[s] = tasks before sequence s; off.back() = total
    void build(const AttnFwdParams &p, int64_t (*count)(const AttnFwdParams &, const SeqRange &));
    int64_t total() const { return off.back(); }
    void locate(int64_t t, int64_t *s, int64_t *rem) const;
};

// ---- kernels ----
// lse_rel != nullptr: stats mode, used by the backward. Only q tiles holding a row whose bias
// ceiling is above kCeilExact run; they write lse' ([nb, Hq, total_q], as delta) instead of O/LSE.
fattn_status fused_fwd(const AttnFwdParams &p, Workspace &ws, float *lse_rel = nullptr);
fattn_status exact_fwd(const AttnFwdParams &p, float *saved, Workspace &ws);
template <bool kExact>
fattn_status attn_bwd_impl(const AttnBwdParams &p, const float *saved, Workspace &ws);

}  // namespace fattn::cpu::detail
