// attn_tiles.cpp — tile plumbing of the CPU attention kernels: strided loaders and stores with
// dtype conversion, the window of a (q tile, kv tile) pair, the bias -inf tile map, the workspace
// layout (bias map, delta, dQ partials, packed Q and dO, per-thread scratch slots) and the task
// index.
//
// Loaders read through the views' strides one tile at a time (never copying a whole tensor).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/parallel.h"
#include "cpu/attn_impl.h"

namespace fattn::cpu::detail {

namespace {

template <fattn_dtype T> struct Elem;
template <> struct Elem<FATTN_F32> {
    using type = float;
    static float get(float x) { return x; }
    static float put(float x) { return x; }
};
template <> struct Elem<FATTN_F16> {
    using type = uint16_t;
    static float get(uint16_t x) { return f16_to_f32(x); }
    static uint16_t put(float x) { return f32_to_f16(x); }
};
template <> struct Elem<FATTN_BF16> {
    using type = uint16_t;
    static float get(uint16_t x) { return bf16_to_f32(x); }
    static uint16_t put(float x) { return f32_to_bf16(x); }
};

template <fattn_dtype T>
void load_tile_t_(const void *src, int64_t rs, int rows, int cols, float scale, float *dst,
                  int64_t ldd) {
    using E = Elem<T>;
    const auto *s = static_cast<const typename E::type *>(src);
    for (int r = 0; r < rows; ++r) {
        const auto *row = s + r * rs;
        float *d = dst + r * ldd;
        for (int c = 0; c < cols; ++c) d[c] = scale * E::get(row[c]);
        for (int c = cols; c < ldd; ++c) d[c] = 0.0f;
    }
}

template <fattn_dtype T>
void load_tile_tr_(const void *src, int64_t rs, int rows, int cols, float *dst, int64_t ldd) {
    using E = Elem<T>;
    const auto *s = static_cast<const typename E::type *>(src);
    int rpad = int(pad_n(rows));
    // The scattered stores make each source row a long run of instructions, so the core's
    // out-of-order window holds about one row and its cache misses would come one row at a
    // time: the rows kAhead ahead are prefetched (a q tile's first touch, from L3 or DRAM).
    constexpr int kAhead = 8;
    const int64_t bytes = int64_t(cols) * int64_t(sizeof(typename E::type));
    for (int r = 0; r < std::min(kAhead, rows); ++r) prefetch_run(s + r * rs, bytes);
    for (int r = 0; r < rows; ++r) {
        if (r + kAhead < rows) prefetch_run(s + (r + kAhead) * rs, bytes);
        const auto *row = s + r * rs;
        for (int c = 0; c < cols; ++c) dst[c * ldd + r] = E::get(row[c]);
    }
    for (int c = 0; c < cols; ++c)
        for (int r = rows; r < rpad; ++r) dst[c * ldd + r] = 0.0f;
}

template <fattn_dtype T>
void store_tile_(void *dst, int64_t rs, int rows, int cols, const float *src, int64_t lds,
                 float scale) {
    using E = Elem<T>;
    auto *d = static_cast<typename E::type *>(dst);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) d[r * rs + c] = E::put(scale * src[r * lds + c]);
}

// bias − c first, then + s: with c the row's bias ceiling, a huge uniform bias cancels exactly.
template <fattn_dtype T>
void add_bias_(const void *bias, float *s, int a, int b, float c) {
    using E = Elem<T>;
    const auto *x = static_cast<const typename E::type *>(bias);
    for (int j = a; j < b; ++j) s[j] += E::get(x[j]) - c;
}

template <fattn_dtype T>
void add_bias_t_(const void *bias, float *st, int64_t ld, int a, int b, float c) {
    using E = Elem<T>;
    const auto *x = static_cast<const typename E::type *>(bias);
    for (int j = a; j < b; ++j) st[j * ld] += E::get(x[j]) - c;
}

template <fattn_dtype T>
float row_max_(const void *bias, int a, int b) {
    using E = Elem<T>;
    const auto *x = static_cast<const typename E::type *>(bias);
    float m = -INFINITY;
    for (int64_t j = a; j < b; ++j) m = std::fmax(m, E::get(x[j]));
    return m;
}

// True if some element of x[a, b) is not -inf (NaN and +inf count as "not -inf"). Compares bit
// patterns with an integer OR-reduction so it vectorizes; the map scan is then memory-bound.
typedef uint32_t u32_alias __attribute__((may_alias));  // reads float/half storage as bits
typedef uint16_t u16_alias __attribute__((may_alias));

template <class U>
bool any_not_neginf(const void *x, int a, int b, U neginf) {
    const U *u = static_cast<const U *>(x);
    U acc = 0;
    for (int j = a; j < b; ++j) acc |= U(u[j] ^ neginf);
    return acc != 0;
}

}  // namespace

void add_bias_t(const void *bias, fattn_dtype t, float *st, int64_t ld, int a, int b, float c) {
    switch (t) {
    case FATTN_F32: return add_bias_t_<FATTN_F32>(bias, st, ld, a, b, c);
    case FATTN_F16: return add_bias_t_<FATTN_F16>(bias, st, ld, a, b, c);
    case FATTN_BF16: return add_bias_t_<FATTN_BF16>(bias, st, ld, a, b, c);
    }
}

void load_tile(const void *src, fattn_dtype t, int64_t rs, int rows, int cols, float scale,
               float *dst, int64_t ldd) {
    switch (t) {
    case FATTN_F32: return load_tile_t_<FATTN_F32>(src, rs, rows, cols, scale, dst, ldd);
    case FATTN_F16: return load_tile_t_<FATTN_F16>(src, rs, rows, cols, scale, dst, ldd);
    case FATTN_BF16: return load_tile_t_<FATTN_BF16>(src, rs, rows, cols, scale, dst, ldd);
    }
}

void load_tile_t(const void *src, fattn_dtype t, int64_t rs, int rows, int cols, float *dst,
                 int64_t ldd) {
    switch (t) {
    case FATTN_F32: return load_tile_tr_<FATTN_F32>(src, rs, rows, cols, dst, ldd);
    case FATTN_F16: return load_tile_tr_<FATTN_F16>(src, rs, rows, cols, dst, ldd);
    case FATTN_BF16: return load_tile_tr_<FATTN_BF16>(src, rs, rows, cols, dst, ldd);
    }
}

void store_tile(void *dst, fattn_dtype t, int64_t rs, int rows, int cols, const float *src,
                int64_t lds, float scale) {
    switch (t) {
    case FATTN_F32: return store_tile_<FATTN_F32>(dst, rs, rows, cols, src, lds, scale);
    case FATTN_F16: return store_tile_<FATTN_F16>(dst, rs, rows, cols, src, lds, scale);
    case FATTN_BF16: return store_tile_<FATTN_BF16>(dst, rs, rows, cols, src, lds, scale);
    }
}

void zero_rows(void *dst, fattn_dtype t, int64_t rs, int64_t r0, int64_t r1, int cols) {
    size_t es = t == FATTN_F32 ? 4 : 2;
    for (int64_t r = r0; r < r1; ++r) std::memset(elem(dst, t, r * rs), 0, size_t(cols) * es);
}

void add_bias(const void *bias, fattn_dtype t, float *s, int a, int b, float c) {
    switch (t) {
    case FATTN_F32: return add_bias_<FATTN_F32>(bias, s, a, b, c);
    case FATTN_F16: return add_bias_<FATTN_F16>(bias, s, a, b, c);
    case FATTN_BF16: return add_bias_<FATTN_BF16>(bias, s, a, b, c);
    }
}

float bias_row_max(const void *bias, fattn_dtype t, int a, int b) {
    switch (t) {
    case FATTN_F16: return row_max_<FATTN_F16>(bias, a, b);
    case FATTN_BF16: return row_max_<FATTN_BF16>(bias, a, b);
    default: return row_max_<FATTN_F32>(bias, a, b);
    }
}

// ---- window of a tile ----

bool tile_may_touch(const AttnFwdParams &p, const SeqRange &r, int64_t i0, int rows, int64_t j0,
                    int bk) {
    if (rows <= 0 || bk <= 0) return false;
    // lo(i) and hi(i) never decrease with i: the first row has the smallest lo, the last the
    // largest hi.
    int64_t lo0, hi0, lo1, hi1;
    key_range(p, i0, r.q_len, r.kv_len, &lo0, &hi0);
    key_range(p, i0 + rows - 1, r.q_len, r.kv_len, &lo1, &hi1);
    return hi1 >= j0 && lo0 <= j0 + bk - 1;
}

TileState tile_rows(const AttnFwdParams &p, const SeqRange &r, int64_t i0, int rows, int64_t j0,
                    int bk, TileRows *out) {
    bool any = false;
    for (int i = 0; i < rows; ++i) {
        int64_t lo, hi;
        key_range(p, i0 + i, r.q_len, r.kv_len, &lo, &hi);
        int64_t a = std::max<int64_t>(lo - j0, 0), b = std::min<int64_t>(hi - j0 + 1, bk);
        if (a >= b) a = b = 0;
        out->a[i] = int(a);
        out->b[i] = int(b);
        any = any || a < b;
    }
    return any ? kTileActive : kTileSkip;
}

// ---- task index ----

void TaskIndex::build(const AttnFwdParams &p,
                      int64_t (*count)(const AttnFwdParams &, const SeqRange &)) {
    off.assign(size_t(p.batch) + 1, 0);
    for (int64_t s = 0; s < p.batch; ++s) off[size_t(s) + 1] = off[size_t(s)] + count(p, seq_range(p, s));
}

void TaskIndex::locate(int64_t t, int64_t *s, int64_t *rem) const {
    auto it = std::upper_bound(off.begin(), off.end(), t);  // first offset > t
    int64_t idx = int64_t(it - off.begin()) - 1;
    *s = idx;
    *rem = t - off[size_t(idx)];
}

// ---- scratch ----

int fwd_q_group(const AttnFwdParams &p) {
    if (p.algo == FATTN_ALGO_EXACT) return 1;
    // Up to 4 at every D: at D128 (~72 KiB of packed Qᵀ and accumulator per q tile, 290 KiB a
    // group) 4 beat 2 on the H200 host's Xeon (fwd S2048 D128 min 37.9 -> 33.6 ms).
    // q tiles in all (varlen: at most ceil(total / kBQ) + one partial tile per sequence)
    const int64_t tiles = p.hq * (p.cu_seqlens_q ? cdiv(p.total_q, kBQ) + p.batch : p.batch * cdiv(p.seqlen_q, kBQ));
    const int64_t want = 4 * int64_t(std::max(p.nthreads, 1));  // tasks per thread for balance
    for (int g = kMaxQGroup; g > 1; g /= 2)
        if (tiles / g >= want) return g;
    return 1;
}

FwdScratch carve_fwd(const AttnFwdParams &p, char *base) {
    Arena a{base};
    FwdScratch f;
    const int64_t dvp = pad_n(p.dim_v), G = fwd_q_group(p);
    f.ldt = conflict_free_ld(kBQ);
    f.ldk = packed_ld(p.d);
    f.ldv = packed_ld(p.dim_v);
    f.qt = a.floats(G * p.d * f.ldt);
    f.kr = a.floats(kBK * f.ldk);
    f.v = a.floats(kBK * f.ldv);
    f.st = a.floats(kBK * f.ldt);
    f.acc = a.floats(G * kBQ * dvp);
    f.m = a.floats(G * kBQ);
    f.l = a.floats(G * kBQ);
    f.mx = a.floats(kBQ);
    f.shift = a.floats(kBQ);
    f.alpha = a.floats(kBQ);
    f.sum = a.floats(kBQ);
    f.blk = p.algo == FATTN_ALGO_EXACT ? a.floats(sat_prod({kBQ, p.seqlen_kv})) : nullptr;
    f.tr = a.rows();
    f.bytes = a.used;
    return f;
}

BwdScratch carve_bwd(const AttnFwdParams &p, char *base) {
    Arena a{base};
    BwdScratch b;
    b.ldt = conflict_free_ld(kBK);
    b.ldd = packed_ld(p.d);
    b.ldo = packed_ld(p.dim_v);
    b.kt = a.floats(p.d * b.ldt);
    b.vt = a.floats(p.dim_v * b.ldt);
    b.kr = a.floats(kBK * b.ldd);
    b.pm = a.floats(kBQ * b.ldt);
    b.dp = a.floats(kBQ * b.ldt);
    b.dk = a.floats(kBK * b.ldd);
    b.dv = a.floats(kBK * b.ldo);
    b.lse = a.floats(kBQ);
    b.delta = a.floats(kBQ);
    b.tr = a.rows();
    b.bytes = a.used;
    return b;
}

// ---- workspace ----

int64_t bwd_chunks(const AttnFwdParams &p) {
    int64_t pairs = std::max<int64_t>(p.batch * p.hkv, 1);
    int64_t want = cdiv(kBwdTargetTasks, pairs);
    int64_t nkt = std::max<int64_t>(cdiv(p.seqlen_kv, kBK), 1);
    return std::max<int64_t>(1, std::min({want, kMaxKvChunks, nkt}));
}

// Upper bound of the tasks of any phase that takes a scratch slot (fused / exact forward: Hq x
// query tiles per sequence; backward: kv heads x chunks per sequence). parallel_for runs at most
// min(nthreads, tasks) of them at once, so no more slots can be busy: a context with many
// threads (or INT_MAX requested) costs a small problem no more than it can use.
int64_t max_slot_tasks(const AttnFwdParams &p, fattn_dir dir) {
    auto sat64 = [](size_t x) { return x > size_t(INT64_MAX) ? INT64_MAX : int64_t(x); };
    if (dir == FATTN_DIR_BWD) return sat64(sat_prod({p.batch, p.hkv, bwd_chunks(p)}));
    if (p.cu_seqlens_q)  // sum over sequences of ceil(len / kBQ) <= ceil(total / kBQ) + num_seqs
        return sat64(sat_prod({p.hq, sat64(sat_add(size_t(cdiv(p.total_q, kBQ)), size_t(p.batch)))}));
    return sat64(sat_prod({p.hq, p.batch, cdiv(p.seqlen_q, kBQ)}));
}

size_t workspace_layout(const AttnFwdParams &p, fattn_dir dir, void *base, Workspace *ws) {
    // Sizes saturate (size_math.h): a huge broadcast view's scratch reads SIZE_MAX instead of
    // wrapping to a small number that a kernel would then overrun.
    char *b = static_cast<char *>(base);
    size_t off = 0;
    auto take = [&](size_t bytes) {
        char *r = b ? b + off : nullptr;
        off = sat_add(off, sat_round(bytes, 64));
        return r;
    };
    bool varlen = p.cu_seqlens_q != nullptr;
    Workspace w;
    if (p.bias) {
        BiasMap &m = w.map;
        m.nbh = p.bias_sh != 0 ? p.hq : 1;
        m.per_batch = !varlen && p.bias_sb != 0 && p.batch > 1;
        int64_t slices = (m.per_batch ? p.batch : 1) * m.nbh;
        int64_t *seq_off = nullptr;
        size_t map_bytes = 0;
        if (varlen) {
            // Sum of per-sequence tile pairs <= (total_q / kBQ + n)(total_kv / kBK + n): int32 totals.
            seq_off = reinterpret_cast<int64_t *>(take(sat_prod({p.batch + 1, 8})));
            int64_t acc = 0;
            for (int64_t s = 0; s < p.batch; ++s) {
                if (seq_off) seq_off[s] = acc;
                SeqRange r = seq_range(p, s);
                acc += cdiv(r.q_len, kBQ) * cdiv(r.kv_len, kBK);
            }
            if (seq_off) seq_off[p.batch] = acc;
            m.slice_pairs = acc;
            map_bytes = sat_prod({slices, acc});
        } else {
            // Dense: Sq and Skv of broadcast size-query views can each be ~2^62.
            const size_t pairs = sat_prod({cdiv(p.seqlen_q, kBQ), cdiv(p.seqlen_kv, kBK)});
            m.slice_pairs = pairs > size_t(INT64_MAX) ? INT64_MAX : int64_t(pairs);
            map_bytes = sat_mul(size_t(slices), pairs);
        }
        m.seq_off = seq_off;
        // Never nullptr on the real carve, even for zero pairs: "no bias" is act == nullptr.
        m.act = reinterpret_cast<const uint8_t *>(take(sat_add(map_bytes, 1)));
        w.ceil = reinterpret_cast<float *>(take(sat_prod({slices, p.total_q, 4})));
    }
    if (dir == FATTN_DIR_BWD) {
        w.nchunks = bwd_chunks(p);
        const int64_t nb = varlen ? 1 : p.batch;  // dense: each batch has its own rows
        w.delta = reinterpret_cast<float *>(take(sat_prod({nb, p.hq, p.total_q, 4})));
        if (p.bias) w.lse_rel = reinterpret_cast<float *>(take(sat_prod({nb, p.hq, p.total_q, 4})));
        w.dq_part = reinterpret_cast<float *>(
            take(sat_prod({w.nchunks, nb, p.hq, p.total_q, pad_n(p.d), 4})));
        // scale · Q and dO, packed once: every kv tile of the backward reads every q tile of its
        // heads, and a per-pair copy of strided rows cost ~9% of the time (D128, AVX2).
        w.ldq = packed_ld(p.d);
        w.ldo = packed_ld(p.dim_v);
        w.qs = reinterpret_cast<float *>(take(sat_prod({nb, p.hq, p.total_q, w.ldq, 4})));
        w.dos = reinterpret_cast<float *>(take(sat_prod({nb, p.hq, p.total_q, w.ldo, 4})));
        // The backward may run the fused forward's tasks to recompute row statistics (bias rows
        // with a large ceiling), so a slot holds either scratch.
        w.slot_bytes = std::max(carve_bwd(p, nullptr).bytes, p.bias ? carve_fwd(p, nullptr).bytes : 0);
    } else {
        w.slot_bytes = carve_fwd(p, nullptr).bytes;
    }
    w.nslots = int(std::max<int64_t>(1, std::min<int64_t>(std::max(p.nthreads, 1), max_slot_tasks(p, dir))));
    w.slots = take(sat_mul(w.slot_bytes, size_t(w.nslots)));
    if (ws) *ws = w;
    return sat_add(off, 64);  // + 64: room to align a caller's base that is not 64-byte aligned
}

namespace {

// One task per (bias slice, map sequence, q tile of kBQ rows) — the grid the tile map and the
// ceilings share: a dense bias shared by the batches has one geometry (every batch has the same
// lengths). fn(slice, bias head, sequence index, q tile, sequence range).
template <class Fn>
void for_each_slice_tile(const AttnFwdParams &p, const BiasMap &m, Fn &&fn) {
    const int64_t nseq = m.seq_off ? p.batch : 1, nb = m.per_batch ? p.batch : 1;
    TaskIndex ti;
    ti.off.assign(size_t(nseq) + 1, 0);
    for (int64_t s = 0; s < nseq; ++s) ti.off[size_t(s) + 1] = ti.off[size_t(s)] + cdiv(seq_range(p, s).q_len, kBQ);
    const int64_t per_slice = ti.total();
    parallel_for(nb * m.nbh * per_slice, p.nthreads, [&](int64_t t) {
        int64_t slice = t / per_slice, s, qt;
        ti.locate(t % per_slice, &s, &qt);
        const int64_t bb = slice / m.nbh, bh = slice % m.nbh;
        SeqRange r = seq_range(p, m.per_batch ? bb : s);
        if (m.per_batch) r.batch_index = bb;
        fn(slice, bh, s, qt, r);
    });
}

}  // namespace

void build_bias_map(const AttnFwdParams &p, Workspace *ws) {
    BiasMap &m = ws->map;
    if (!p.bias) return;
    uint8_t *act = const_cast<uint8_t *>(m.act);
    // Each task classifies its q tile's row of pairs.
    for_each_slice_tile(p, m, [&](int64_t slice, int64_t bh, int64_t s, int64_t qt, const SeqRange &r) {
        int64_t nkt = cdiv(r.kv_len, kBK);
        int64_t i0 = qt * kBQ;
        int rows = int(std::min<int64_t>(kBQ, r.q_len - i0));
        uint8_t *out = act + slice * m.slice_pairs + (m.seq_off ? m.seq_off[s] : 0) + qt * nkt;
        TileRows tr;
        for (int64_t kt = 0; kt < nkt; ++kt) {
            int64_t j0 = kt * kBK;
            int bk = int(std::min<int64_t>(kBK, r.kv_len - j0));
            uint8_t live = 0;
            if (tile_may_touch(p, r, i0, rows, j0, bk) && tile_rows(p, r, i0, rows, j0, bk, &tr)) {
                for (int i = 0; i < rows && !live; ++i) {
                    if (tr.a[i] >= tr.b[i]) continue;
                    const void *row = bias_at(p, r, bh, i0 + i, j0);
                    switch (p.bias_dtype) {
                    case FATTN_F32: live = any_not_neginf<u32_alias>(row, tr.a[i], tr.b[i], 0xff800000u); break;
                    case FATTN_F16: live = any_not_neginf<u16_alias>(row, tr.a[i], tr.b[i], 0xfc00u); break;
                    case FATTN_BF16: live = any_not_neginf<u16_alias>(row, tr.a[i], tr.b[i], 0xff80u); break;
                    }
                }
            }
            out[kt] = live;
        }
    });
}

void build_bias_ceiling(const AttnFwdParams &p, Workspace *ws) {
    if (!p.bias) return;
    for_each_slice_tile(p, ws->map, [&](int64_t slice, int64_t bh, int64_t, int64_t qt, const SeqRange &r) {
        float *out = ws->ceil + slice * p.total_q + r.q_begin;
        for (int64_t i = qt * kBQ; i < std::min(r.q_len, (qt + 1) * kBQ); ++i) {
            int64_t lo, hi;
            key_range(p, i, r.q_len, r.kv_len, &lo, &hi);
            float c = lo <= hi ? bias_row_max(bias_at(p, r, bh, i, 0), p.bias_dtype, int(lo), int(hi + 1)) : -INFINITY;
            out[i] = c == -INFINITY ? 0.0f : c;  // no finite allowed bias: the row is fully masked
        }
    });
}

bool any_large_ceiling(const AttnFwdParams &p, const Workspace &ws) {
    if (!p.bias) return false;
    const int64_t n = (ws.map.per_batch ? p.batch : 1) * ws.map.nbh * p.total_q;
    for (int64_t x = 0; x < n; ++x)
        if (!(std::fabs(ws.ceil[x]) <= kCeilExact)) return true;
    return false;
}

}  // namespace fattn::cpu::detail
