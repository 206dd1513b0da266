// common.cuh — pieces every PaTH kernel uses: the element types of each input dtype, sequence
// lookup, shared-memory tile geometry and loaders, the mma fragment loaders of a tile (rows or
// columns as the A or B operand), the packing of accumulators into A fragments, and a generic
// warp-tile / CTA GEMM on shared-memory tiles with a per-element epilogue.
//
// Tiles: row-major in shared memory with a padded row stride (tile_stride): 16 bytes more than
// the row for 16-bit types, 16 bytes for f32, so ldmatrix rows land in distinct bank groups.
// Operand naming: "rows" = the tile's rows index the operand's first dim (A: m, B: n — as K in
// Q K^T); "cols"/"krows" = the tile's rows index k (A transposed; B as V in P V).
#pragma once

#include <type_traits>

#include "cuda/path/dev.cuh"
#include "cuda/path/params.h"

// tf32 products with A from accumulators (warp_gemm_acc): 1 = the k order permuted so the
// accumulators are the A fragments (Frag<float>::a_acc), 0 = shuffled into the fragment layout.
#ifndef FATTN_PATH_TF32_PERMK
#define FATTN_PATH_TF32_PERMK 0
#endif
// Global round trips of seg-intra and the own-chunk kernel (an A/B switch): 1 = at D 128 their
// converting tile loads keep four 16-byte loads per thread in flight (cvt_if: a 64 x 128 16-bit
// tile in one round trip), and seg-intra loads a pair's state and U together (16-bit inputs);
// 0 = two loads in flight, one tile after the other.
#ifndef FATTN_PATH_LOAD_OVERLAP
#define FATTN_PATH_LOAD_OVERLAP 1
#endif
// The wgmma kernels (bwd_dkv_sm90.cuh, bwd_seg_sm90.cuh): WGMMA_BUILD, this compilation may hold
// them (the CPU emulation, which emulates wgmma, or nvcc with sm_90a in the build); WGMMA_PASS, this
// pass emits their instructions (the emulation, or nvcc's sm_90a device pass; the others compile
// their bodies to a trap, never launched).
#if !defined(__CUDACC__) || defined(FATTN_HAVE_SM90)
#define FATTN_PATH_WGMMA_BUILD 1
#else
#define FATTN_PATH_WGMMA_BUILD 0
#endif
#if !defined(__CUDACC__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FATTN_PATH_WGMMA_PASS 1
#else
#define FATTN_PATH_WGMMA_PASS 0
#endif

namespace fattn::pathk {

// Walk products (forward, history): f16 for 16-bit inputs (FLA's choice: |entries| <= 1), tf32 for f32.
template <typename Tin> using walk_t = std::conditional_t<std::is_same<Tin, float>::value, float, f16_t>;
// E_r, a segment's K x K product (KSegPrep writes it, KSegInter reads it as a tf32 operand only):
// in the walk type (FATTN_PATH_SEG_E16, params.h: f16 has tf32's mantissa, |entries| <= 2 under
// the w / beta check), else f32 holding tf32 values.
template <typename Tin> using emat_t = std::conditional_t<FATTN_PATH_SEG_E16 != 0, walk_t<Tin>, float>;

template <typename E> constexpr int tile_stride(int width) { return width + 16 / int(sizeof(E)); }
template <typename E> constexpr size_t tile_bytes(int rows, int width) {
    return size_t(rows) * size_t(tile_stride<E>(width)) * sizeof(E);
}
constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }

// ---- sequences ----
PK_DEV int64_t seq_search(const int64_t *base, int64_t n, int64_t x) {  // last s with base[s] <= x
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (base[mid] <= x) lo = mid; else hi = mid - 1;
    }
    return lo;
}
PK_DEV SeqInfo seq_info(const PathDev &p, int64_t s) {
    SeqInfo q;
    q.s = s;
    if (p.cu) {
        q.b = 0, q.begin = p.cu[s], q.len = int64_t(p.cu[s + 1]) - p.cu[s], q.row0 = q.begin;
        q.chunk0 = p.chunk_base[s], q.seg0 = p.seg_base[s], q.hist0 = p.hist_base[s], q.pair0 = p.pair_base[s];
    } else {
        const int64_t nc = ceil_div(p.T, kC), ns = ceil_div(p.T, kS);
        q.b = s, q.begin = 0, q.len = p.T, q.row0 = s * p.T;
        q.chunk0 = s * nc, q.seg0 = s * ns, q.hist0 = s * path_packed_cells(p.T), q.pair0 = s * pairs_of(p.T);
    }
    return q;
}
// The (item, head) a CTA of an (nx items, ny heads) grid works on, longest first: CTAs start in
// blockIdx order (x fastest), so the items are handed out heaviest first, every head of an item
// before the next item. last_heavy: the last items weigh most (a query chunk or segment walks
// all of the sequence before it), else the first ones (a key chunk is read by all after it).
struct GridItem {
    int64_t x;
    int y;
};
PK_DEV GridItem heavy_first(int64_t nx, int ny, bool last_heavy) {
    const int64_t lin = int64_t(bid_y()) * nx + bid_x(), i = lin / ny;
    return {last_heavy ? nx - 1 - i : i, int(lin % ny)};
}
// The split seg-intra kernels' block order, chunk major (one grid dimension of 7 x segments x Hq
// blocks): a chunk index c = 0 .. 6 for every (segment, query head) before c + 1. KIntraScores
// takes key chunk c (key chunk 0, the most query chunks after it, first); KIntraGamma query chunk
// 7 - c, so that its CTAs start after the ones of the same (segment, query head) whose adds to dU
// and dW they wait on, rather than holding a slot while those run (H100, 2026-12-07: 498 -> 381 us
// at T4096 H16 D128 against a (segment, query head)'s seven CTAs side by side; docs/PERF.md).
struct IntraItem {
    int64_t gs;
    int c, hq;
};
PK_DEV IntraItem intra_chunk_major(const PathDev &p) {
    const int64_t per = p.total_segs * p.hq, b = bid_x();
    return {b % p.total_segs, int(b / per), int(b % per / p.total_segs)};
}
PK_DEV SeqInfo seq_of_chunk(const PathDev &p, int64_t gc) {
    return seq_info(p, p.cu ? seq_search(p.chunk_base, p.num_seqs, gc) : gc / ceil_div(p.T, kC));
}
PK_DEV SeqInfo seq_of_seg(const PathDev &p, int64_t gs) {
    return seq_info(p, p.cu ? seq_search(p.seg_base, p.num_seqs, gs) : gs / ceil_div(p.T, kS));
}
// The (chunk, query head) of a CTA of a [chunks, Hq] grid (heavy_first's order): the chunk gc,
// its sequence, its index ci there, its first row c0 and its row count n (<= kC).
struct ChunkItem {
    int64_t gc;
    int hq, h;
    SeqInfo sq;
    int64_t ci, c0;
    int n;
};
PK_DEV ChunkItem chunk_item(const PathDev &p, bool last_heavy) {
    const GridItem it = heavy_first(p.total_chunks, p.hq, last_heavy);
    const SeqInfo sq = seq_of_chunk(p, it.x);
    const int64_t ci = it.x - sq.chunk0, c0 = ci * kC;
    return {it.x, it.y, it.y / p.grp, sq, ci, c0, int(sq.len - c0 < kC ? sq.len - c0 : kC)};
}
// History cell of (token t of the sequence, column r), 1 <= r <= t / S.
PK_DEV int64_t hist_cell(const PathDev &p, const SeqInfo &sq, int64_t t, int64_t r) {
    if (p.hist_rect) return (sq.row0 + t) * p.rect_cols + r;
    return sq.hist0 + (r - 1) * sq.len - int64_t(kS) * (r - 1) * r / 2 + (t - r * kS);
}

// ---- element access of the user's views ----
// The partial dK~ from row `row` on ([rows, Hq, D]; `row` a chunk start: the split never cuts a chunk).
template <int D> PK_DEV float *dkt_of(const PathDev &p, int64_t row) {
    const bool lo = row < p.dkt_split;
    return (lo ? p.dkt : p.dkt_hi) + (lo ? row : row - p.dkt_split) * (int64_t(p.hq) * D);
}
template <typename T> PK_DEV float ld(const void *base, int64_t i) { return to_f(static_cast<const T *>(base)[i]); }
template <typename T> PK_DEV void st(void *base, int64_t i, float x) { static_cast<T *>(base)[i] = from_f<T>(x); }
// Two adjacent f32 (8-byte aligned).
struct F2 {
    float x, y;
};
PK_DEV F2 ld_f2(const float *g) {
#if defined(__CUDACC__)
    const float2 v = *reinterpret_cast<const float2 *>(g);
    return {v.x, v.y};
#else
    emu::check_align(g, 8, "ld_f2");
    return {g[0], g[1]};
#endif
}
PK_DEV void st_f2(float *g, float x, float y) {
#if defined(__CUDACC__)
    *reinterpret_cast<float2 *>(g) = make_float2(x, y);
#else
    emu::check_align(g, 8, "st_f2");
    g[0] = x, g[1] = y;
#endif
}

// Elements i and i + 1 in one store (i even, base aligned to two elements).
template <typename T> PK_DEV void st_pair(void *base, int64_t i, float x, float y) {
    if constexpr (sizeof(T) == 4) {
        st_f2(static_cast<float *>(base) + i, x, y);
    } else {
        const uint32_t w = pack2<T>(x, y);
#if defined(__CUDACC__)
        *reinterpret_cast<uint32_t *>(static_cast<T *>(base) + i) = w;
#else
        emu::check_align(static_cast<T *>(base) + i, 4, "st_pair");
        std::memcpy(static_cast<T *>(base) + i, &w, 4);
#endif
    }
}

// ---- read-modify-write of f32 workspace tiles ----
// A thread's 16-byte vectors of a kC x W tile (rows < n, row stride ldg; rows 16-byte aligned) are
// all loaded before any is written back: one load latency per call, not one per element (the
// compiler may not reorder an element's load past the previous element's store).
template <int W, int NT> constexpr int vecs_per_thread() { return (kC * W / 4 + NT - 1) / NT; }

// G += sign * S (S shared, row stride SD): the same sums as an element loop.
template <int W, int NT> PK_DEV void add_tile_f32(float *g, int64_t ldg, const float *s, int SD, int n, float sign) {
    constexpr int NV = vecs_per_thread<W, NT>();
    V16 v[NV];
    for (int i = 0; i < NV; ++i) {
        const int e = 4 * (tid() + i * NT);
        if (e < n * W) v[i] = ld16(g + (e / W) * ldg + e % W);
    }
    for (int i = 0; i < NV; ++i) {
        const int e = 4 * (tid() + i * NT), a = e / W, c = e % W;
        if (e >= n * W) continue;
        const float *y = s + a * SD + c;
        st16f(g + a * ldg + c, v16_elem<float>(v[i], 0) + sign * y[0], v16_elem<float>(v[i], 1) + sign * y[1],
              v16_elem<float>(v[i], 2) + sign * y[2], v16_elem<float>(v[i], 3) + sign * y[3]);
    }
}

// G_0 <- G_0 + G_1 + ... + G_{grp-1} in that order, G_g = G_0 + g * gstride: the group's loads of
// all of a thread's vectors issued together, group member after member.
template <int W, int NT> PK_DEV void group_sum_tile_f32(float *g, int64_t ldg, int64_t gstride, int grp, int n) {
    constexpr int NV = vecs_per_thread<W, NT>();
    float acc[NV][4];
    for (int i = 0; i < NV; ++i) {
        const int e = 4 * (tid() + i * NT);
        const V16 v = e < n * W ? ld16(g + (e / W) * ldg + e % W) : V16{};
        for (int c = 0; c < 4; ++c) acc[i][c] = v16_elem<float>(v, c);
    }
    for (int m = 1; m < grp; ++m) {
        V16 v[NV];
        for (int i = 0; i < NV; ++i) {
            const int e = 4 * (tid() + i * NT);
            if (e < n * W) v[i] = ld16(g + m * gstride + (e / W) * ldg + e % W);
        }
        for (int i = 0; i < NV; ++i)
            if (4 * (tid() + i * NT) < n * W)
                for (int c = 0; c < 4; ++c) acc[i][c] += v16_elem<float>(v[i], c);
    }
    for (int i = 0; i < NV; ++i) {
        const int e = 4 * (tid() + i * NT);
        if (e < n * W) st16f(g + (e / W) * ldg + e % W, acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
}

// ---- global -> shared tile loads ----
// load_tile's per-thread row step (1); 0 = the element loop, for an A/B of the instruction counts.
#ifndef FATTN_PATH_LOAD_STEP
#define FATTN_PATH_LOAD_STEP 1
#endif
template <bool R> PK_DEV float rnd_if(float x) { return R ? tf32_round(x) : x; }

// rows x width tile (row stride ST) from g (row stride gstride elements): rows >= rows_valid and
// columns >= cols_valid are zero. vec: 16-byte cp.async (caller commits and waits; cols_valid a
// multiple of 16 bytes); otherwise plain loads, done when the call returns.
// kStep: the per-thread row step below (FATTN_PATH_LOAD_STEP); KDkv keeps the element loop, with
// which ptxas gives its D64 main loop 248 registers, not 176 (H100, 2026-12-06: 706.6 against
// 810.1 us at T4096 H32 D64).
template <typename E, int NT, bool kStep = FATTN_PATH_LOAD_STEP != 0>
PK_DEV void load_tile(E *s, int ST, const E *g, int64_t gstride, int rows, int width, int rows_valid,
                      int cols_valid, bool vec) {
    constexpr int EPC = 16 / int(sizeof(E));
    if (vec && kStep && width >= EPC && NT % (width / EPC) == 0) {
        // the same element order as below (thread t takes vectors t, t + NT, ...), written as a
        // fixed column and a row step per thread, so a vector costs a pointer step, not the
        // division and the 64-bit product of its index (seg-inter spent 40% as many instructions
        // issuing its key tiles as on their products)
        const int per_row = width / EPC, RS = NT / per_row, c = (tid() % per_row) * EPC;
        const bool cok = c < cols_valid;
        int r = tid() / per_row;
        const E *gp = g + r * gstride + c;
        E *sp = s + r * ST + c;
        for (; r < rows; r += RS, gp += RS * gstride, sp += RS * ST) {
            const bool ok = cok && r < rows_valid;
            cp16(sp, ok ? static_cast<const void *>(gp) : static_cast<const void *>(g), ok ? 16 : 0);
        }
    } else if (vec) {
        const int per_row = width / EPC;
        for (int e = tid(); e < rows * per_row; e += NT) {
            const int r = e / per_row, c = (e % per_row) * EPC;
            const bool ok = r < rows_valid && c < cols_valid;
            cp16(s + r * ST + c, ok ? static_cast<const void *>(g + r * gstride + c) : static_cast<const void *>(g),
                 ok ? 16 : 0);
        }
    } else {
        for (int e = tid(); e < rows * width; e += NT) {
            const int r = e / width, c = e % width;
            s[r * ST + c] = (r < rows_valid && c < cols_valid) ? g[r * gstride + c] : from_f<E>(0.f);
        }
    }
}
// Same with a conversion (plain loads, done when the call returns): Es <- Eg. vec (rows 16-byte
// aligned, width and cols_valid whole 16-byte vectors): 16-byte loads, IF per thread in flight
// before the converted values are stored (an element-wise loop waits for each load; a 64 x 128
// 16-bit tile is four per thread of 256: one round trip with IF = 4). Rnd: f32 values are stored
// rounded to tf32 (a tile read only as tf32 operands; 16-bit values are tf32).
template <typename Es, typename Eg, int NT, bool Rnd = false, int IF = 2>
PK_DEV void load_tile_cvt(Es *s, int ST, const Eg *g, int64_t gstride, int rows, int width, int rows_valid,
                          int cols_valid, bool vec) {
    constexpr int EPV = 16 / int(sizeof(Eg));
    if (vec) {
        const int per_row = width / EPV, n = rows * per_row;
        for (int e0 = 0; e0 < n; e0 += IF * NT) {
            V16 v[IF];
            for (int i = 0; i < IF; ++i) {
                const int e = e0 + tid() + i * NT, r = e / per_row, c = (e % per_row) * EPV;
                v[i] = e < n && r < rows_valid && c < cols_valid ? ld16(g + r * gstride + c) : V16{};
            }
            for (int i = 0; i < IF; ++i) {
                const int e = e0 + tid() + i * NT, r = e / per_row, c = (e % per_row) * EPV;
                if (e >= n) break;
                for (int k = 0; k < EPV; ++k) s[r * ST + c + k] = from_f<Es>(rnd_if<Rnd && sizeof(Eg) == 4>(v16_elem<Eg>(v[i], k)));
            }
        }
        return;
    }
    for (int e = tid(); e < rows * width; e += NT) {
        const int r = e / width, c = e % width;
        s[r * ST + c] = from_f<Es>((r < rows_valid && c < cols_valid) ? rnd_if<Rnd && sizeof(Eg) == 4>(to_f(g[r * gstride + c])) : 0.f);
    }
}
// A 64 x W tile held in registers as 16-byte vectors between issue() (the loads start) and put()
// (converted to f32 and stored; Rnd: as tf32 values): a tile needed later is loaded while other
// work runs. The source rows and cols_valid are whole 16-byte vectors.
template <typename Eg, int W, int NT> struct TileRegs {
    static constexpr int EPV = 16 / int(sizeof(Eg)), PER_ROW = W / EPV, N = 64 * PER_ROW, PER_T = (N + NT - 1) / NT;
    V16 v[PER_T];
    PK_DEV void issue(const Eg *g, int64_t gstride, int rows_valid, int cols_valid) {
        for (int i = 0; i < PER_T; ++i) {
            const int e = tid() + i * NT, r = e / PER_ROW, c = (e % PER_ROW) * EPV;
            v[i] = e < N && r < rows_valid && c < cols_valid ? ld16(g + r * gstride + c) : V16{};
        }
    }
    template <bool Rnd> PK_DEV void put(float *s, int ST) const {
        for (int i = 0; i < PER_T; ++i) {
            const int e = tid() + i * NT, r = e / PER_ROW, c = (e % PER_ROW) * EPV;
            if (e < N)
                for (int k = 0; k < EPV; ++k) s[r * ST + c + k] = rnd_if<Rnd && sizeof(Eg) == 4>(v16_elem<Eg>(v[i], k));
        }
    }
};

template <typename E, int NT> PK_DEV void zero_tile(E *s, int ST, int rows, int width) {
    for (int e = tid(); e < rows * width; e += NT) s[(e / width) * ST + e % width] = from_f<E>(0.f);
}

// The 64 x width f32 tile of U rows [row, row + n) of kv head h: U is kept in the walk type (f16
// for 16-bit inputs: the 10-bit mantissa the tf32 products it feeds use anyway; f32 otherwise).
// Rnd: stored rounded to tf32 (a tile read only as tf32 operands; plain loads for f32).
template <typename Tin, int NT, bool Rnd = false, int IF = 2>
PK_DEV void load_u_f32(float *s, int ST, const PathDev &p, int64_t row, int h, int width, int n) {
    using Tw = walk_t<Tin>;
    const Tw *g = static_cast<const Tw *>(p.uw) + (row * p.h + h) * width;
    if constexpr (sizeof(Tw) == 4 && !Rnd)
        load_tile<float, NT>(s, ST, reinterpret_cast<const float *>(g), int64_t(p.h) * width, 64, width, n, width, true);
    else load_tile_cvt<float, Tw, NT, Rnd, IF>(s, ST, g, int64_t(p.h) * width, 64, width, n, width, true);
}

// All of the issued cp.async copies landed and every thread's writes visible.
PK_DEV void cp_landed() {
    cp_commit();
    cp_wait<0>();
    sync();
}

// A step of a two-stage cp.async ring: with a next stage (more), issue it and wait for all but
// it; else wait for everything. The caller syncs before reading the current stage.
template <class F> PK_DEV void ring_step(bool more, F &&issue_next) {
    if (more) {
        issue_next();
        cp_commit();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
}

// 64 x width f32 tile of w rows [c0, c0 + n) of the sequence, kv head h (rows >= n are 0).
template <int NT>
PK_DEV void load_w_f32(float *s, int ST, const PathDev &p, const SeqInfo &sq, int64_t c0, int h, int width, int n) {
    const int64_t t0 = sq.begin + c0;
    load_tile<float, NT>(s, ST, p.w + sq.b * p.w_sb + t0 * p.w_ss + h * p.w_sh, p.w_ss, 64, width, n, p.K, p.vec_w);
}

// ---- mma fragments from shared-memory tiles ----
// g = lane / 4, t = lane % 4 throughout. A covers 16 x KS, B two n-tiles (16 columns) x KS.
template <typename E> struct Frag;
template <typename E> struct Frag16 {
    static constexpr int KS = 16;
    // A[m][k] = s[(r0 + m) * ST + k0 + k]
    template <bool R = false> PK_DEV static void a_rows(uint32_t (&a)[4], const E *s, int ST, int r0, int k0) {
        const int l = lane_id();
        ldsm4(a, s + (r0 + (l & 7) + ((l >> 3) & 1) * 8) * ST + k0 + (l >> 4) * 8);
    }
    // A[m][k] = s[(k0 + k) * ST + m0 + m]
    template <bool R = false> PK_DEV static void a_cols(uint32_t (&a)[4], const E *s, int ST, int k0, int m0) {
        const int l = lane_id();
        ldsm4_t(a, s + (k0 + (l & 7) + (l >> 4) * 8) * ST + m0 + ((l >> 3) & 1) * 8);
    }
    // B[k][n] = s[(n0 + n) * ST + k0 + k]; b[0..1]: n-tile n0, b[2..3]: n0 + 8
    template <bool R = false> PK_DEV static void b_rows(uint32_t (&b)[4], const E *s, int ST, int n0, int k0) {
        const int l = lane_id();
        ldsm4(b, s + (n0 + (l & 7) + (l >> 4) * 8) * ST + k0 + ((l >> 3) & 1) * 8);
    }
    // B[k][n] = s[(k0 + k) * ST + n0 + n]
    template <bool R = false> PK_DEV static void b_krows(uint32_t (&b)[4], const E *s, int ST, int k0, int n0) {
        const int l = lane_id();
        ldsm4_t(b, s + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ST + n0 + (l >> 4) * 8);
    }
    // A fragment of k-slice kk (16 columns) of accumulators c (n-tiles 2kk, 2kk+1), times sc.
    template <int N> PK_DEV static void a_acc(uint32_t (&a)[4], const float (&c)[N][4], int kk, float sc) {
        a[0] = pack2<E>(sc * c[2 * kk][0], sc * c[2 * kk][1]);
        a[1] = pack2<E>(sc * c[2 * kk][2], sc * c[2 * kk][3]);
        a[2] = pack2<E>(sc * c[2 * kk + 1][0], sc * c[2 * kk + 1][1]);
        a[3] = pack2<E>(sc * c[2 * kk + 1][2], sc * c[2 * kk + 1][3]);
    }
};
template <> struct Frag<f16_t> : Frag16<f16_t> {};
template <> struct Frag<bf16_t> : Frag16<bf16_t> {};
// A tf32 operand from an f32 tile element: rounded here (cvt.rna), or, for tiles whose values are
// already tf32 (R: 16-bit sources, or rounded when stored), the bits as they are (the tensor core
// reads the top 19 bits, so both give the same product on such values).
template <bool R> PK_DEV uint32_t tf32_op(float x) {
    if (R) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        return u;
    }
    return to_tf32(x);
}

template <> struct Frag<float> {
    static constexpr int KS = 8;
    // ldmatrix of f32 pairs as tf32 operands (rounded unless R)
    template <bool R> PK_DEV static void ldsm_tf32(uint32_t (&x)[4], const float *row) {
        ldsm4(x, row);
        if (!R)
            for (int i = 0; i < 4; ++i) x[i] = to_tf32(as_float(x[i]));
    }
    // the k-major (transposed) loads: p[0], then p[o1], p[o2], p[o3]
    template <bool R> PK_DEV static void ld4_tf32(uint32_t (&x)[4], const float *p, int o1, int o2, int o3) {
        x[0] = tf32_op<R>(p[0]);
        x[1] = tf32_op<R>(p[o1]);
        x[2] = tf32_op<R>(p[o2]);
        x[3] = tf32_op<R>(p[o3]);
    }
    template <bool R = false> PK_DEV static void a_rows(uint32_t (&a)[4], const float *s, int ST, int r0, int k0) {
        const int l = lane_id();
        ldsm_tf32<R>(a, s + (r0 + (l & 7) + ((l >> 3) & 1) * 8) * ST + k0 + (l >> 4) * 4);
    }
    template <bool R = false> PK_DEV static void a_cols(uint32_t (&a)[4], const float *s, int ST, int k0, int m0) {
        const int l = lane_id();
        ld4_tf32<R>(a, s + (k0 + (l & 3)) * ST + m0 + (l >> 2), 8, 4 * ST, 4 * ST + 8);
    }
    template <bool R = false> PK_DEV static void b_rows(uint32_t (&b)[4], const float *s, int ST, int n0, int k0) {
        const int l = lane_id();
        ldsm_tf32<R>(b, s + (n0 + (l & 7) + (l >> 4) * 8) * ST + k0 + ((l >> 3) & 1) * 4);
    }
    template <bool R = false> PK_DEV static void b_krows(uint32_t (&b)[4], const float *s, int ST, int k0, int n0) {
        const int l = lane_id();
        ld4_tf32<R>(b, s + (k0 + (l & 3)) * ST + n0 + (l >> 2), 4 * ST, 8, 4 * ST + 8);
    }
#if FATTN_PATH_TF32_PERMK
    // A from accumulators with the k order permuted within each 8-column slice: fragment column t
    // is the accumulators' column 2t and t + 4 their 2t + 1, so each lane's own accumulators are
    // its fragment (no shuffles); the B fragments of such a product (b_rows_pk, b_krows_pk) read
    // their k rows in the same order. The sum over k is the same, in another order inside an mma.
    template <int N> PK_DEV static void a_acc(uint32_t (&a)[4], const float (&c)[N][4], int kk, float sc) {
        a[0] = to_tf32(sc * c[kk][0]);
        a[1] = to_tf32(sc * c[kk][2]);
        a[2] = to_tf32(sc * c[kk][1]);
        a[3] = to_tf32(sc * c[kk][3]);
    }
#else
    // Lane (g, t) needs columns t and t+4 of n-tile kk; the accumulators hold columns 2t', 2t'+1
    // at lane (g, t'): they come from lanes (g, t/2) and (g, t/2 + 2), element t & 1.
    template <int N> PK_DEV static void a_acc(uint32_t (&a)[4], const float (&c)[N][4], int kk, float sc) {
        const int l = lane_id();
        const int src1 = (l & ~3) | ((l & 3) >> 1), src2 = src1 + 2;
        const bool odd = l & 1;
        float x0 = shfl(c[kk][0], src1), x1 = shfl(c[kk][1], src1);
        float y0 = shfl(c[kk][2], src1), y1 = shfl(c[kk][3], src1);
        a[0] = to_tf32(sc * (odd ? x1 : x0));
        a[1] = to_tf32(sc * (odd ? y1 : y0));
        x0 = shfl(c[kk][0], src2), x1 = shfl(c[kk][1], src2);
        y0 = shfl(c[kk][2], src2), y1 = shfl(c[kk][3], src2);
        a[2] = to_tf32(sc * (odd ? x1 : x0));
        a[3] = to_tf32(sc * (odd ? y1 : y0));
    }
#endif
    // B[k][n] = s[(n0 + n) * ST + k0 + k] with k permuted as a_acc: lane (g, t) takes k 2t, 2t + 1
    // of n-tiles n0 (b[0..1]) and n0 + 8 (b[2..3])
    template <bool R = false> PK_DEV static void b_rows_pk(uint32_t (&b)[4], const float *s, int ST, int n0, int k0) {
        const int l = lane_id();
        const float *p = s + (n0 + (l >> 2)) * ST + k0 + 2 * (l & 3);
        ld4_tf32<R>(b, p, 1, 8 * ST, 8 * ST + 1);
    }
    // B[k][n] = s[(k0 + k) * ST + n0 + n], k permuted as a_acc
    template <bool R = false> PK_DEV static void b_krows_pk(uint32_t (&b)[4], const float *s, int ST, int k0, int n0) {
        const int l = lane_id();
        const float *p = s + (k0 + 2 * (l & 3)) * ST + n0 + (l >> 2);
        ld4_tf32<R>(b, p, ST, 8, ST + 8);
    }
};

// The converting loads' 16-byte loads in flight per thread for a kernel of head dim D (four at D 128
// with FATTN_PATH_LOAD_OVERLAP, where the registers are there: four at D <= 64 spill in the
// 128-register kernels of two CTAs per SM).
template <int D> constexpr int cvt_if() { return FATTN_PATH_LOAD_OVERLAP && D > 64 ? 4 : 2; }

// Geometry of the f32 tile-algebra kernels with NW warps: 64 x D and 64 x 64 tiles, and the
// n-tiles per warp tile that give each warp one tile of a 64 x D product (NB) and of a 64 x 64
// one (NB64): 8 warps, 16 x D/2 and 16 x 32; 16 warps, half as wide.
template <int D, int NW = 8> struct F32Tiles {
    static constexpr int SD = tile_stride<float>(D), S64 = tile_stride<float>(64);
    static constexpr size_t BIG = tile_bytes<float>(64, D), SMALL = tile_bytes<float>(64, 64);
    static constexpr int NB = D / 16 * 8 / NW, NB64 = 32 / NW;
};

// Accumulator element i (0..3) of n-tile j at this lane: row (within the 16-row tile), column.
PK_DEV int acc_row(int i) { return (lane_id() >> 2) + (i >> 1) * 8; }
PK_DEV int acc_col(int j, int i) { return 8 * j + 2 * (lane_id() & 3) + (i & 1); }

template <int N> PK_DEV void zero_acc(float (&c)[N][4]) {
    for (int j = 0; j < N; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
}

// One k-step of a warp's 16 x 8N tile: acc += a (this warp's A fragment at k0) B[k0 .., n0 .. n0+8N),
// two n-tiles per B fragment. BK: B is stored with rows = k (else rows = n).
template <typename E, bool BK, int N, bool RB = false, bool PK = false>
PK_DEV void mma_row(float (&acc)[N][4], const uint32_t (&a)[4], const E *B, int ldb, int k0, int n0) {
    static_assert(N % 2 == 0, "two n-tiles per B fragment");
    for (int j = 0; j < N / 2; ++j) {
        uint32_t b[4];
        if constexpr (PK && FATTN_PATH_TF32_PERMK && sizeof(E) == 4) {  // A from accumulators in Frag<float>::a_acc's k order
            if (BK) Frag<E>::template b_krows_pk<RB>(b, B, ldb, k0, n0 + 16 * j);
            else Frag<E>::template b_rows_pk<RB>(b, B, ldb, n0 + 16 * j, k0);
        } else if (BK) {
            Frag<E>::template b_krows<RB>(b, B, ldb, k0, n0 + 16 * j);
        } else {
            Frag<E>::template b_rows<RB>(b, B, ldb, n0 + 16 * j, k0);
        }
        mma<E>(acc[2 * j], a, b[0], b[1]);
        mma<E>(acc[2 * j + 1], a, b[2], b[3]);
    }
}

// Operand flags of the f32 GEMMs (ignored for 16-bit tiles): the A / B tile holds tf32 values
// already (tf32_op), so its fragments skip the rounding. -DFATTN_PATH_TF32_FLAGS=0 ignores them
// (every fragment rounds: the same products, for an A/B of the instruction counts).
#ifndef FATTN_PATH_TF32_FLAGS
#define FATTN_PATH_TF32_FLAGS 1
#endif
constexpr int kRA = FATTN_PATH_TF32_FLAGS ? 1 : 0, kRB = FATTN_PATH_TF32_FLAGS ? 2 : 0;

// acc[N][4] (16 x 8N) += A[m0 .. m0+16, 0 .. KD) B[0 .. KD, n0 .. n0+8N) from shared tiles.
// AT: A is stored transposed (tile rows = k); BK: B is stored with rows = k (else rows = n).
template <typename E, bool AT, bool BK, int N, int RND = 0>
PK_DEV void warp_gemm(float (&acc)[N][4], const E *A, int lda, const E *B, int ldb, int m0, int n0, int KD) {
    static_assert(N % 2 == 0, "two n-tiles per B fragment");
    for (int k0 = 0; k0 < KD; k0 += Frag<E>::KS) {
        uint32_t a[4];
        if (AT) Frag<E>::template a_cols<(RND & kRA) != 0>(a, A, lda, k0, m0);
        else Frag<E>::template a_rows<(RND & kRA) != 0>(a, A, lda, m0, k0);
        mma_row<E, BK, N, (RND & kRB) != 0>(acc, a, B, ldb, k0, n0);
    }
}

// Same with A from accumulators (this warp's 16 rows of a register tile c, k = its columns).
template <typename E, bool BK, int N, int NC, bool RB = false>
PK_DEV void warp_gemm_acc(float (&acc)[N][4], const float (&c)[NC][4], float sc, const E *B, int ldb, int n0) {
    constexpr int KD = 8 * NC;
    for (int kk = 0; kk < KD / Frag<E>::KS; ++kk) {
        uint32_t a[4];
        Frag<E>::a_acc(a, c, kk, sc);
        mma_row<E, BK, N, RB, true>(acc, a, B, ldb, kk * Frag<E>::KS, n0);
    }
}

// ---- tf32 products of an f32 tile with a 16-bit one ----
// f16 and bf16 values are exact in tf32, so an f32 tile times a 16-bit tile runs on the tf32 mma
// with no f32 copy of the 16-bit tile. ldmatrix hands lane (g, t) the k pair 2t, 2t + 1 of each
// 8-wide k slice of the 16-bit tile; the pair fills the tf32 fragment's slots t and t + 4, and the
// f32 operand reads its k indices in that same order: the same sum over k, in another order inside
// each mma. A step covers 16 k (two tf32 mmas per output n-tile).

// The f32 bits of element lo (hi = false) or hi of a packed 16-bit pair.
template <typename E> PK_DEV uint32_t tf32_half(uint32_t pair, bool hi) {
    const uint16_t b = uint16_t(hi ? pair >> 16 : pair & 0xffffu);
    if constexpr (std::is_same<E, bf16_t>::value) {
        return uint32_t(b) << 16;
    } else {
        E x;
        std::memcpy(&x, &b, 2);
        const float f = to_f(x);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return u;
    }
}
// A fragments of k-steps k0 (a[0]) and k0 + 8 (a[1]), rows m0 .. m0 + 16 of A; AT: A stored
// transposed (tile rows = k). R: an f32 tile of tf32 values (no rounding).
template <typename E, bool AT, bool R> PK_DEV void mix_a(uint32_t (&a)[2][4], const E *s, int ST, int m0, int k0) {
    if constexpr (sizeof(E) == 2) {
        uint32_t x[4];
        if (AT) Frag<E>::a_cols(x, s, ST, k0, m0);
        else Frag<E>::a_rows(x, s, ST, m0, k0);
        for (int h = 0; h < 2; ++h) {
            a[h][0] = tf32_half<E>(x[2 * h], false);
            a[h][1] = tf32_half<E>(x[2 * h + 1], false);
            a[h][2] = tf32_half<E>(x[2 * h], true);
            a[h][3] = tf32_half<E>(x[2 * h + 1], true);
        }
    } else {
        const int l = lane_id(), g = l >> 2, t = l & 3;
        for (int h = 0; h < 2; ++h) {
            const int kb = k0 + 8 * h;
            if (AT) {
                const float *p = s + (kb + 2 * t) * ST + m0 + g;
                a[h][0] = tf32_op<R>(p[0]), a[h][1] = tf32_op<R>(p[8]), a[h][2] = tf32_op<R>(p[ST]), a[h][3] = tf32_op<R>(p[ST + 8]);
            } else {
                const F2 u = ld_f2(s + (m0 + g) * ST + kb + 2 * t), v = ld_f2(s + (m0 + g + 8) * ST + kb + 2 * t);
                a[h][0] = tf32_op<R>(u.x), a[h][1] = tf32_op<R>(v.x), a[h][2] = tf32_op<R>(u.y), a[h][3] = tf32_op<R>(v.y);
            }
        }
    }
}
// B fragments of k-steps k0 (b[0]) and k0 + 8 (b[1]) for n-tiles n0 (b[h][0..1]) and n0 + 8
// (b[h][2..3]); BK: B stored with rows = k (else rows = n).
template <typename E, bool BK, bool R> PK_DEV void mix_b(uint32_t (&b)[2][4], const E *s, int ST, int n0, int k0) {
    if constexpr (sizeof(E) == 2) {
        uint32_t x[4];
        if (BK) Frag<E>::b_krows(x, s, ST, k0, n0);
        else Frag<E>::b_rows(x, s, ST, n0, k0);
        for (int h = 0; h < 2; ++h) {
            b[h][0] = tf32_half<E>(x[h], false);
            b[h][1] = tf32_half<E>(x[h], true);
            b[h][2] = tf32_half<E>(x[2 + h], false);
            b[h][3] = tf32_half<E>(x[2 + h], true);
        }
    } else {
        const int l = lane_id(), g = l >> 2, t = l & 3;
        for (int h = 0; h < 2; ++h) {
            const int kb = k0 + 8 * h;
            if (BK) {
                const float *p = s + (kb + 2 * t) * ST + n0 + g;
                b[h][0] = tf32_op<R>(p[0]), b[h][1] = tf32_op<R>(p[ST]), b[h][2] = tf32_op<R>(p[8]), b[h][3] = tf32_op<R>(p[ST + 8]);
            } else {
                const F2 u = ld_f2(s + (n0 + g) * ST + kb + 2 * t), v = ld_f2(s + (n0 + g + 8) * ST + kb + 2 * t);
                b[h][0] = tf32_op<R>(u.x), b[h][1] = tf32_op<R>(u.y), b[h][2] = tf32_op<R>(v.x), b[h][3] = tf32_op<R>(v.y);
            }
        }
    }
}
// warp_gemm for operand tiles of two element types (one f32, one 16-bit: tf32 mma), or of one
// (warp_gemm itself). KD % 16 == 0 when the types differ.
template <typename EA, typename EB, bool AT, bool BK, int N, int RND = 0>
PK_DEV void warp_gemm2(float (&acc)[N][4], const EA *A, int lda, const EB *B, int ldb, int m0, int n0, int KD) {
    if constexpr (std::is_same<EA, EB>::value) {
        warp_gemm<EA, AT, BK, N, RND>(acc, A, lda, B, ldb, m0, n0, KD);
    } else {
        static_assert(sizeof(EA) + sizeof(EB) == 6, "one f32 operand and one 16-bit one");
        static_assert(N % 2 == 0, "two n-tiles per B fragment");
        for (int k0 = 0; k0 < KD; k0 += 16) {
            uint32_t a[2][4];
            mix_a<EA, AT, (RND & kRA) != 0>(a, A, lda, m0, k0);
            for (int j = 0; j < N / 2; ++j) {
                uint32_t b[2][4];
                mix_b<EB, BK, (RND & kRB) != 0>(b, B, ldb, n0 + 16 * j, k0);
                for (int h = 0; h < 2; ++h) {
                    mma<float>(acc[2 * j], a[h], b[h][0], b[h][1]);
                    mma<float>(acc[2 * j + 1], a[h], b[h][2], b[h][3]);
                }
            }
        }
    }
}

// Out (M x N) = op(A) op(B) over KD, tiles of 16 x (8 NB) dealt to the NW warps round robin;
// epi(row, col, value) once per element. M % 16 == 0, N % (8 NB) == 0. B's element type EB may
// differ from A's (one f32 tile, one 16-bit: warp_gemm2).
template <typename E, bool AT, bool BK, int NB, int NW, int RND = 0, class EB = E, class Epi>
PK_DEV void cta_gemm(int M, int N, int KD, const E *A, int lda, const EB *B, int ldb, Epi &&epi) {
    const int tn = N / (8 * NB), tiles = (M / 16) * tn;
    for (int tile = warp_id(); tile < tiles; tile += NW) {
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 8 * NB;
        float acc[NB][4];
        zero_acc(acc);
        warp_gemm2<E, EB, AT, BK, NB, RND>(acc, A, lda, B, ldb, m0, n0, KD);
        for (int j = 0; j < NB; ++j)
            for (int i = 0; i < 4; ++i) epi(m0 + acc_row(i), n0 + acc_col(j, i), acc[j][i]);
    }
}

// Warps per CTA of the tile-algebra kernels that take it (chain-A, chain-B). At D 128 one CTA
// fills an SM's shared memory (and chain-A has fewer segments than SMs), so they take sixteen
// warps on warp tiles of half the width: each SM has twice the independent products in flight.
// Eight at D <= 64, where two CTAs share an SM. -DFATTN_PATH_WIDE128=0: eight everywhere, for an
// A/B. (Sixteen warps in the own-chunk and seg-intra kernels measured within noise:
// docs/EXPERIMENTS.md.)
#ifndef FATTN_PATH_WIDE128
#define FATTN_PATH_WIDE128 1
#endif
constexpr int wide_warps(int D) { return FATTN_PATH_WIDE128 && D >= 128 ? 16 : 8; }

// G (M x N, row stride ldg (even), rows >= rows_valid untouched) += sign * op(A) op(B): each warp
// issues the loads of its output tile of G (pairs of columns, 8 bytes) before the products, which
// start from zero, so the loads' latency overlaps the products; then G + sign * acc is stored once.
// sign = -1 gives G -= A B. Replaces an epilogue that reads and writes G element by element (a
// dependent L2 round trip each).
// Warp tiles of 16 x 8 NB: a caller short of registers passes half its usual NB, so the
// prefetched G and the accumulators both stay in registers beside its state (chain-A; at the
// other call sites the full width measured as fast or faster: docs/EXPERIMENTS.md).
template <typename E, bool AT, bool BK, int NB, int NW, int RND = 0, class EB = E>
PK_DEV void cta_gemm_rmw(int M, int N, int KD, const E *A, int lda, const EB *B, int ldb, float *G, int64_t ldg,
                         float sign, int rows_valid) {
    const int tn = N / (8 * NB), tiles = (M / 16) * tn;
    for (int tile = warp_id(); tile < tiles; tile += NW) {
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 8 * NB;
        F2 g[NB][2];
        for (int j = 0; j < NB; ++j)
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + acc_row(2 * h), c = n0 + acc_col(j, 0);
                g[j][h] = r < rows_valid ? ld_f2(G + r * ldg + c) : F2{0.f, 0.f};
            }
        float acc[NB][4];
        zero_acc(acc);
        warp_gemm2<E, EB, AT, BK, NB, RND>(acc, A, lda, B, ldb, m0, n0, KD);
        for (int j = 0; j < NB; ++j)
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + acc_row(2 * h), c = n0 + acc_col(j, 0);
                if (r < rows_valid) st_f2(G + r * ldg + c, g[j][h].x + sign * acc[j][2 * h], g[j][h].y + sign * acc[j][2 * h + 1]);
            }
    }
}

// acc (16 x 8N) += A B in f32 accuracy on tf32 tensor cores (3xTF32: a b ~ ah bh + ah bl + al bh,
// x = xh + xl with xh = tf32(x), xl = tf32(x - xh)); A rows (m, k), B rows (n, k), f32 tiles.
template <int N>
PK_DEV void warp_gemm_3xtf32(float (&acc)[N][4], const float *A, int lda, const float *B, int ldb, int m0, int n0, int KD) {
    const int l = lane_id(), g = l >> 2, t = l & 3;
    for (int k0 = 0; k0 < KD; k0 += 8) {
        float af[4] = {A[(m0 + g) * lda + k0 + t], A[(m0 + g + 8) * lda + k0 + t], A[(m0 + g) * lda + k0 + t + 4],
                       A[(m0 + g + 8) * lda + k0 + t + 4]};
        uint32_t ah[4], al[4];
        for (int i = 0; i < 4; ++i) ah[i] = to_tf32(af[i]), al[i] = to_tf32(af[i] - as_float(ah[i]));
        for (int j = 0; j < N; ++j) {
            const float b0 = B[(n0 + 8 * j + g) * ldb + k0 + t], b1 = B[(n0 + 8 * j + g) * ldb + k0 + t + 4];
            const uint32_t bh0 = to_tf32(b0), bh1 = to_tf32(b1);
            const uint32_t bl0 = to_tf32(b0 - as_float(bh0)), bl1 = to_tf32(b1 - as_float(bh1));
            mma<float>(acc[j], al, bh0, bh1);
            mma<float>(acc[j], ah, bl0, bl1);
            mma<float>(acc[j], ah, bh0, bh1);
        }
    }
}

// Store this warp's register tile (rows r0.., N n-tiles) into an f32 shared tile read only as a
// tf32 operand: the values rounded once here, so the products that read the tile pass kRA / kRB
// (the bits of rounding at every fragment load).
template <int N> PK_DEV void acc_to_tile_tf32(float *s, int ST, int r0, const float (&c)[N][4]) {
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < 4; ++i) s[(r0 + acc_row(i)) * ST + acc_col(j, i)] = tf32_round(c[j][i]);
}
// Load this warp's register tile from a shared tile.
template <typename E, int N>
PK_DEV void tile_to_acc(float (&c)[N][4], const E *s, int ST, int r0) {
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < 4; ++i) c[j][i] = to_f(s[(r0 + acc_row(i)) * ST + acc_col(j, i)]);
}

// The walk products of the register-resident kernels (forward, history), this warp's 16 rows at r0:
// QW = LT(X W^T) of a chunk's own rows (column b <= row a), and one walk back through a chunk,
// X <- X - (X W^T) U. W, U: 64-row tiles of the walk type Tw (row stride ST).
template <typename Tw, int NX>
PK_DEV void qw_lower(float (&QW)[8][4], const float (&X)[NX][4], const Tw *W, int ST, int r0) {
    zero_acc(QW);
    warp_gemm_acc<Tw, false>(QW, X, 1.f, W, ST, 0);
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i)
            if (acc_col(j, i) > r0 + acc_row(i)) QW[j][i] = 0.f;
}
template <typename Tw, int NX> PK_DEV void walk_back(float (&X)[NX][4], const Tw *W, const Tw *U, int ST) {
    float XW[8][4];
    zero_acc(XW);
    warp_gemm_acc<Tw, false>(XW, X, 1.f, W, ST, 0);
    warp_gemm_acc<Tw, true>(X, XW, -1.f, U, ST, 0);
}

// Row reductions of a register tile over the 4 lanes of a quad (a row's columns live there).
PK_DEV float quad_sum(float x) {
    x += shfl_xor(x, 1);
    return x + shfl_xor(x, 2);
}
PK_DEV float quad_max(float x) {
    x = fmax_(x, shfl_xor(x, 1));
    return fmax_(x, shfl_xor(x, 2));
}

// ---- 128-byte swizzled tiles and accumulators (the wgmma kernels: *_sm90.cuh) ----
// Whether a wgmma kernel serves a (dtype, kernel head dim): built (its switch on, in a build with
// wgmma), 16-bit inputs, at D 128, and at D 64 where d64 (the switch's value that adds it).
constexpr bool wgmma_at(bool built, bool d64, size_t in_bytes, int d) {
    return built && in_bytes == 2 && (d == 128 || (d == 64 && d64));
}
// The m16n8 accumulators [N][4] of a warp as the wgmma accumulator list (element 4j + i: the
// same fragment map, a warp's 16 rows of the warpgroup's 64).
template <int N> PK_DEV float (&wg_acc(float (&a)[N][4]))[4 * N] {
    return reinterpret_cast<float(&)[4 * N]>(a);
}

// Where element (r, c) of a [64, D] 16-bit tile lies in its 128-byte swizzled panels (elements from
// the tile's 1024-aligned base): panel c / 64, row r, 16-byte chunk (c % 64) / 8 XOR r % 8, the
// layout TMA's SWIZZLE_128B writes and the wgmma descriptors of ptx.cuh read.
constexpr int sw128_elem(int r, int c) { return (c / 64) * kC * 64 + r * 64 + (((c % 64) / 8) ^ (r & 7)) * 8 + c % 8; }

// 64 x D tile of g (row stride gstride) into the swizzled panels at s (sw128_elem), NT threads. Rows
// >= rows_valid and columns >= cols_valid are 0. vec: cp.async (the caller commits and waits), as
// load_tile's; else plain stores.
// kStep (FATTN_PATH_LOAD_STEP_SW; cp.async only): thread t takes the same chunks as the loop below,
// written as a fixed column and a row step (a pointer step per copy instead of the 64-bit product
// of its row and the source stride). Off by default: on an H100 (2026-12-07, docs/PERF.md) the
// D128 fwd+bwd with it was within the rounds' spread of the default's.
#ifndef FATTN_PATH_LOAD_STEP_SW
#define FATTN_PATH_LOAD_STEP_SW 0
#endif
template <typename Tin, int D, int NT, bool kStep = FATTN_PATH_LOAD_STEP_SW != 0>
PK_DEV void load_tile_sw(Tin *s, const Tin *g, int64_t gstride, int rows_valid, int cols_valid, bool vec) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
    if constexpr (kStep && NT % CPR == 0) {
        if (vec) {
            constexpr int RS = NT / CPR;  // rows per step
            const int c8 = tid() % CPR;  // this thread's 16-byte chunk of a row: column 8 c8
            const bool cok = 8 * c8 < cols_valid;
            int r = tid() / CPR;
            const Tin *gp = g + r * gstride + 8 * c8;
            Tin *pan = s + (c8 / 8) * kC * 64;  // its panel (sw128_elem with c % 8 = 0)
            for (; r < kC; r += RS, gp += RS * gstride) {
                const bool ok = cok && r < rows_valid;
                cp16(pan + r * 64 + ((c8 % 8) ^ (r & 7)) * 8, ok ? static_cast<const void *>(gp) : static_cast<const void *>(g),
                     ok ? 16 : 0);
            }
            return;
        }
    }
    for (int e = tid(); e < kC * CPR; e += NT) {
        const int r = e / CPR, c8 = e % CPR, c = 8 * c8;
        Tin *dst = s + sw128_elem(r, c);
        if (vec) {
            const bool ok = r < rows_valid && c < cols_valid;
            cp16(dst, ok ? static_cast<const void *>(g + r * gstride + c) : static_cast<const void *>(g), ok ? 16 : 0);
        } else {
            for (int k = 0; k < 8; ++k) dst[k] = r < rows_valid && c + k < cols_valid ? g[r * gstride + c + k] : from_f<Tin>(0.f);
        }
    }
}

}  // namespace fattn::pathk
