// common.cuh — device helpers shared by the fused attention kernels: element conversion, bias
// reads, quad reductions, the tile a CTA owns (CtaTile), the per-tile mask geometry (which key
// tiles a query tile sees, and the reverse), the bias tile-map lookup, and the kernel argument
// block (KArgs).
//
// Mask semantics are those of core/attn_params.h (key_range): query i (inside its sequence) sees
// key j iff lo(i) <= j <= hi(i); lo and hi are non-decreasing in i, which is what makes whole-tile
// skipping analytic: a tile of rows [m0, m1) and keys [n0, n1) is empty iff n0 > hi(m1-1) or
// n1-1 < lo(m0), and needs no per-element mask iff n0 >= lo(m1-1) and n1-1 <= hi(m0).
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
// The kernel's dynamic shared memory, 16-byte aligned bytes or floats (the emulation names its
// block's buffer).
#define FATTN_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define FATTN_DYN_SMEM_F32(name) extern __shared__ float name[]
#else
#include "emu/cuda_host.h"  // the CPU emulation (src/emu): the same kernel source on the host
#define FATTN_DYN_SMEM(name) FATTN_EMU_DYN_SMEM(name)
#define FATTN_DYN_SMEM_F32(name) float *name = reinterpret_cast<float *>(fattn::emu::smem())
#endif

#include <cfloat>
#include <cstdint>

#include "core/attn_params.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Bias ceilings (as on the CPU, cpu/attn_impl.h): every kernel adds a row's bias as (bias − c),
// c = the row's largest allowed bias (0 when none), and reports LSE = c + lse'. Softmax is
// unchanged by the per-row constant; a Hugging Face padding row (all keys at finfo.min or -1e9)
// keeps its scores, and (bias − c)·log2e cannot overflow where bias·log2e did (finfo.min·log2e
// is -inf). The backward needs lse' itself: lse − c is exact enough while |c| <= kCeilExact;
// rows with a larger ceiling get lse' recomputed by the forward kernel in stats mode.
// Tiles whose bias is not read (absent, all zero) hold no row with c < 0 (a zero the row may see
// bounds its c below by 0), so their keys use the public LSE: exp(s − lse) there is exact enough
// even when c is large (such keys are then negligible), and the fast paths stay as they were.
constexpr float kCeilExact = 16.0f;

// Everything a kernel reads besides the params: workspace pointers and launch-time flags.
struct KArgs {
    const uint8_t *map;       // bias tile map (nullptr: no bias, or no map)
    int64_t map_nh, map_nm, map_nn;
    const float *ceil;        // bias ceilings [map_nb, map_nh, total_q] (nullptr: no bias)
    const float *lse_rel;     // bwd with a bias: lse' = lse − ceiling [B_view, Hq, total_q]
    float *stats;             // forward in stats mode (bwd): write lse' here for the q tiles
                              // holding a row with |ceiling| > kCeilExact; nothing else
    float *delta;             // bwd: rowsum(dO∘O) [B_view, Hq, total_q]
    bool vec;                 // 16-byte cp.async loads are legal (alignment, strides, d % 8)
    bool bias_pair;           // the bias pointer is aligned to two elements (load_bias_pair)
    int64_t kv_head0;         // the sm90 tf32 backward, run in passes of kv heads (workspace.h):
                              // the pass's first kv head (grid y counts from it); else 0
};

// The bias ceiling of row qi (inside sequence sr) of query head h; 0 without a bias.
__device__ __forceinline__ float row_ceil(const AttnFwdParams &p, const KArgs &a, const SeqRange &sr,
                                          int64_t h, int64_t qi) {
    if (!a.ceil) return 0.f;
    const int64_t mb = p.bias_sb ? sr.batch_index : 0, mh = p.bias_sh ? h : 0;
    return a.ceil[(mb * a.map_nh + mh) * p.total_q + sr.q_begin + qi];
}
// The saved LSE of a row (natural log) and, with a bias, its lse' (relative to the ceiling).
__device__ __forceinline__ float row_lse(const AttnFwdParams &p, const SeqRange &sr, int64_t h, int64_t qi) {
    return p.lse[sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + qi];
}
__device__ __forceinline__ float row_lse_rel(const AttnFwdParams &p, const KArgs &a, const SeqRange &sr,
                                             int64_t h, int64_t qi) {
    return a.lse_rel ? a.lse_rel[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + qi] : row_lse(p, sr, h, qi);
}
// Where a row's lse' goes in stats mode (same indexing as delta).
__device__ __forceinline__ int64_t stats_at(const AttnFwdParams &p, const SeqRange &sr, int64_t h, int64_t qi) {
    return (sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + qi;
}
// Stats mode: true when some row of [m0, m1) has a ceiling the backward cannot subtract exactly.
// Block-uniform (a barrier): call from every thread.
__device__ __forceinline__ bool tile_needs_stats(const AttnFwdParams &p, const KArgs &a, const SeqRange &sr,
                                                 int64_t h, int64_t m0, int64_t m1) {
    int need = 0;
    for (int64_t i = m0 + threadIdx.x; i < m1; i += blockDim.x) need |= !(fabsf(row_ceil(p, a, sr, h, i)) <= kCeilExact);
    return __syncthreads_or(need) != 0;
}

// Max and sum over the four lanes of a quad: the lanes that hold one row of an mma accumulator tile.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float load_bias(const void *bias, fattn_dtype dt, int64_t off) {
    switch (dt) {
    case FATTN_F16: return __half2float(static_cast<const __half *>(bias)[off]);
    case FATTN_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(bias)[off]);
    default: return static_cast<const float *>(bias)[off];
    }
}

// A bias element's bits, unconverted (f32: the float's bits; f16/bf16: its 16 bits), so that a
// thread can issue a batch of loads before the first conversion waits on one (bias_from_bits).
// The sm90 kernels' masked tiles load this way: a band bias leaves most live tiles partly masked,
// and one load waiting on L2 per element was most of such a tile's time.
__device__ __forceinline__ uint32_t load_bias_bits(const void *bias, fattn_dtype dt, int64_t off) {
    if (dt == FATTN_F16 || dt == FATTN_BF16) return static_cast<const uint16_t *>(bias)[off];
    return static_cast<const uint32_t *>(bias)[off];
}
__device__ __forceinline__ float bias_from_bits(uint32_t b, fattn_dtype dt) {
    switch (dt) {
    case FATTN_F16: return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
    case FATTN_BF16: return __uint_as_float(b << 16);
    default: return __uint_as_float(b);
    }
}
// load_bias_pair's bits (below): keys kj, kj + 1 of one row, 0 (= 0.0 in every dtype) where
// row_ok is false or a key is past lkv; an aligned in-range f32 pair is one 8-byte load.
__device__ __forceinline__ void load_bias_pair_bits(const void *bias, fattn_dtype dt, bool pair_ok, bool row_ok,
                                                    int64_t rb, int64_t kj, int64_t lkv, uint32_t (&b)[2]) {
    b[0] = b[1] = 0u;
    if (!row_ok) return;
    const int64_t off = rb + kj;
    if (dt == FATTN_F32 && pair_ok && (off & 1) == 0 && kj + 1 < lkv) {
        const uint2 v = *reinterpret_cast<const uint2 *>(static_cast<const float *>(bias) + off);
        b[0] = v.x, b[1] = v.y;
        return;
    }
    if (kj < lkv) b[0] = load_bias_bits(bias, dt, off);
    if (kj + 1 < lkv) b[1] = load_bias_bits(bias, dt, off + 1);
}

// The bias values of keys kj and kj + 1 of one row (offset rb of the row's key 0) into b[0..1],
// for a thread whose accumulator pair covers two adjacent keys. Rows past the sequence (row_ok
// false) and keys past lkv read nothing (0). pair: one 4-byte (f16/bf16) or 8-byte (f32) load,
// legal when the base pointer is aligned to it (KArgs::bias_pair), rb + kj is even and both keys
// are in range; otherwise two element loads.
__device__ __forceinline__ void load_bias_pair(const void *bias, fattn_dtype dt, bool pair_ok, bool row_ok,
                                               int64_t rb, int64_t kj, int64_t lkv, float (&b)[2]) {
    b[0] = b[1] = 0.f;
    if (!row_ok) return;
    const int64_t off = rb + kj;
    if (pair_ok && ((off & 1) == 0) && kj + 1 < lkv) {
        switch (dt) {
        case FATTN_F16: {
            const float2 v = __half22float2(*reinterpret_cast<const __half2 *>(static_cast<const __half *>(bias) + off));
            b[0] = v.x, b[1] = v.y;
            return;
        }
        case FATTN_BF16: {
            const float2 v = __bfloat1622float2(
                *reinterpret_cast<const __nv_bfloat162 *>(static_cast<const __nv_bfloat16 *>(bias) + off));
            b[0] = v.x, b[1] = v.y;
            return;
        }
        default: {
            const float2 v = *reinterpret_cast<const float2 *>(static_cast<const float *>(bias) + off);
            b[0] = v.x, b[1] = v.y;
            return;
        }
        }
    }
    if (kj < lkv) b[0] = load_bias(bias, dt, off);
    if (kj + 1 < lkv) b[1] = load_bias(bias, dt, off + 1);
}

// Where one sequence's rows start in each view: q and dout for query head h, k and v for kv head
// hk, and the offset of the bias plane of (sequence, h). Row r of the sequence is base + r·(token stride).
template <typename T>
__device__ __forceinline__ const T *seq_q(const AttnFwdParams &p, const SeqRange &sr, int64_t h) {
    return static_cast<const T *>(p.q) + sr.batch_index * p.q_sb + sr.q_begin * p.q_ss + h * p.q_sh;
}
template <typename T>
__device__ __forceinline__ const T *seq_k(const AttnFwdParams &p, const SeqRange &sr, int64_t hk) {
    return static_cast<const T *>(p.k) + sr.batch_index * p.k_sb + sr.kv_begin * p.k_ss + hk * p.k_sh;
}
template <typename T>
__device__ __forceinline__ const T *seq_v(const AttnFwdParams &p, const SeqRange &sr, int64_t hk) {
    return static_cast<const T *>(p.v) + sr.batch_index * p.v_sb + sr.kv_begin * p.v_ss + hk * p.v_sh;
}
template <typename T>
__device__ __forceinline__ const T *seq_dout(const AttnBwdParams &p, const SeqRange &sr, int64_t h) {
    return static_cast<const T *>(p.dout) + sr.batch_index * p.do_sb + sr.q_begin * p.do_ss + h * p.do_sh;
}
__device__ __forceinline__ int64_t seq_bias(const AttnFwdParams &p, const SeqRange &sr, int64_t h) {
    return sr.batch_index * p.bias_sb + h * p.bias_sh;
}

// The tile one CTA owns. Every kernel's grid is (tiles, heads, sequences), sized for the longest
// sequence: blockIdx.z is the sequence (sr: its rows in each view, lq and lkv its lengths),
// blockIdx.y the head, blockIdx.x the tile of the side the kernel is stationary on: rows
// [r0, r1()) of the queries of query head `head` (queries(): the forward and dQ kernels), or of
// the keys of kv head `head` (keys(): dK/dV). past_end(): the tile starts past its sequence's end
// and the CTA has nothing to do; r1() is computed where it is asked for, after that test.
struct CtaTile {
    int64_t head;
    SeqRange sr;
    int64_t lq, lkv, r0;

    __device__ __forceinline__ static CtaTile queries(const AttnFwdParams &p, int bm) { return CtaTile(p, bm, false); }
    // split: CTAs per key tile along grid x (x = tile · split + part; the dK/dV kernel's output
    // column blocks at head-dim bucket 256).
    __device__ __forceinline__ static CtaTile keys(const AttnFwdParams &p, int bn, int split = 1) {
        return CtaTile(p, bn, true, split);
    }
    // The key tiles in reverse grid order (the last tile of the longest sequence at blockIdx.x 0):
    // the sm90 dK/dV kernel with fused dQ, whose CTAs wait only on CTAs of later tiles.
    __device__ __forceinline__ static CtaTile keys_reversed(const AttnFwdParams &p, int bn) {
        return CtaTile(p, bn, true, 1, (p.seqlen_kv + bn - 1) / bn - 1 - int64_t(blockIdx.x));
    }
    __device__ __forceinline__ bool past_end() const { return r0 >= len; }
    __device__ __forceinline__ int64_t r1() const { return r0 + rows < len ? r0 + rows : len; }

  private:
    int64_t len;
    int rows;

    __device__ __forceinline__ CtaTile(const AttnFwdParams &p, int rows_, bool on_keys, int split = 1, int64_t x = -1)
        : head(blockIdx.y), sr(seq_range(p, blockIdx.z)), lq(sr.q_len), lkv(sr.kv_len),
          r0((x >= 0 ? x : int64_t(blockIdx.x / unsigned(split))) * rows_), len(on_keys ? lkv : lq), rows(rows_) {}
};

// Key tiles [n_first, n_last] (tile size bn) that rows [m0, m1) of a sequence may see.
__device__ __forceinline__ void key_tiles(const AttnFwdParams &p, int64_t m0, int64_t m1,
                                          int64_t lq, int64_t lkv, int bn, int64_t *n_first,
                                          int64_t *n_last) {
    int64_t lo0, hi0, lo1, hi1;
    key_range(p, m0, lq, lkv, &lo0, &hi0);
    key_range(p, m1 - 1, lq, lkv, &lo1, &hi1);
    *n_first = lo0 / bn;
    *n_last = (hi1 < lo0 || hi1 < 0) ? -1 : hi1 / bn;
}

// Query rows [*i_lo, *i_hi] (inclusive) of a sequence that may see any key of [n0, n1).
__device__ __forceinline__ void query_rows(const AttnFwdParams &p, int64_t n0, int64_t n1,
                                           int64_t lq, int64_t lkv, int64_t *i_lo, int64_t *i_hi) {
    const int64_t off = p.bottom_right ? lkv - lq : 0;
    if (n1 > lkv) n1 = lkv;
    int64_t lo = 0, hi = lq - 1;
    // hi(i) = i + off + win_right >= n0
    if (p.win_right >= 0 && n0 - off - p.win_right > lo) lo = n0 - off - p.win_right;
    // lo(i) = i + off - win_left <= n1 - 1
    if (p.win_left >= 0 && n1 - 1 - off + p.win_left < hi) hi = n1 - 1 - off + p.win_left;
    *i_lo = lo;
    *i_hi = hi;
}

// True when the tile needs no per-element mask (all rows and keys valid and allowed).
__device__ __forceinline__ bool tile_full(const AttnFwdParams &p, int64_t m0, int64_t m1,
                                          int64_t n0, int64_t n1, int64_t lq, int64_t lkv) {
    if (m1 > lq || n1 > lkv) return false;
    int64_t lo0, hi0, lo1, hi1;
    key_range(p, m0, lq, lkv, &lo0, &hi0);
    key_range(p, m1 - 1, lq, lkv, &lo1, &hi1);
    return n0 >= lo1 && n1 - 1 <= hi0;
}

// Bias tile map cells (workspace.h): 0 = all -inf, 1 = has a value other than 0 and -inf (or a
// NaN), 2 = every value is exactly 0 (a 0/-inf mask's interior: no bias read needed).
enum BiasTile : int { kBiasDead = 0, kBiasRead = 1, kBiasZero = 2 };

// State of the packed rectangle [r0, r1) × [c0, c1) of bias plane (mb, mh) over the map cells it
// touches: dead if all are dead, zero if all are zero, otherwise read (a zero cell beside a dead
// one must read: the dead cell's -inf are not zeros). No map: read.
__device__ __forceinline__ int bias_tile_state(const KArgs &a, int64_t mb, int64_t mh, int64_t r0,
                                               int64_t r1, int64_t c0, int64_t c1) {
    if (!a.map) return kBiasRead;
    const uint8_t *m = a.map + (mb * a.map_nh + mh) * a.map_nm * a.map_nn;
    int live = 0, read = 0, dead = 0;
    for (int64_t br = r0 / kMapBlock; br <= (r1 - 1) / kMapBlock && br < a.map_nm; ++br)
        for (int64_t bc = c0 / kMapBlock; bc <= (c1 - 1) / kMapBlock && bc < a.map_nn; ++bc) {
            const int v = m[br * a.map_nn + bc];
            live |= v != kBiasDead;
            dead |= v == kBiasDead;
            read |= v == kBiasRead;
        }
    return !live ? kBiasDead : (read || dead) ? kBiasRead : kBiasZero;
}

__device__ __forceinline__ bool bias_tile_dead(const KArgs &a, int64_t mb, int64_t mh, int64_t r0,
                                               int64_t r1, int64_t c0, int64_t c1) {
    return bias_tile_state(a, mb, mh, r0, r1, c0, c1) == kBiasDead;
}

// The first and the last index in [n, last] whose tile is not dead (first: last + 1 if none;
// last: n - 1 if none), 32 candidates per step: lane l tests one index and a ballot picks. The
// kernels trim their tile range with these once, before the main loop, and walk the (rare)
// dead tiles between two live ones one by one: a serial walk over a band mask's dead tiles paid
// one dependent map read (~0.5 µs from L2) per tile and was most of the kernels' time, and a
// ballot scan inside the main loop costs registers the accumulators need.
// Call from warp-uniform control flow; every warp gets the same answer.
template <class Dead>
__device__ __forceinline__ int first_live(int n, int last, Dead &&dead) {
    const int lane = threadIdx.x & 31;
    for (; n <= last; n += 32) {
        const int c = n + lane;
        const unsigned live = __ballot_sync(0xffffffffu, c <= last && !dead(c));
        if (live) return n + __ffs(live) - 1;
    }
    return last + 1;
}
template <class Dead>
__device__ __forceinline__ int last_live(int first, int n, Dead &&dead) {
    const int lane = threadIdx.x & 31;
    for (; n >= first; n -= 32) {
        const int c = n - lane;
        const unsigned live = __ballot_sync(0xffffffffu, c >= first && !dead(c));
        if (live) return n - (__ffs(live) - 1);
    }
    return first - 1;
}

// The key tiles (size bn) that query rows [m0, m1) of a sequence visit: the analytic range of
// key_tiles, trimmed with a bias to its first and last live tile; state(n) is tile n's bias-map
// state and next(n) the first tile >= n that is not dead. Used by every kernel that owns a query
// tile (forward and dQ, tensor-core and scalar).
struct KeyTiles {
    const AttnFwdParams &p;
    const KArgs &a;
    int64_t mb, mh, r0, r1, c0, lkv;
    int bn, first, last;

    __device__ __forceinline__ KeyTiles(const AttnFwdParams &p_, const KArgs &a_, const SeqRange &sr, int64_t h,
                                        int64_t m0, int64_t m1, int bn_)
        : p(p_), a(a_), mb(p_.bias_sb ? sr.batch_index : 0), mh(p_.bias_sh ? h : 0), r0(sr.q_begin + m0),
          r1(sr.q_begin + m1), c0(sr.kv_begin), lkv(sr.kv_len), bn(bn_) {
        int64_t f, l;
        key_tiles(p, m0, m1, sr.q_len, sr.kv_len, bn, &f, &l);
        first = int(f), last = int(l);  // tile indices fit in 32 bits
        if (p.bias) {
            auto dead = [&](int c) { return state(c) == kBiasDead; };
            first = first_live(first, last, dead);
            last = last_live(first, last, dead);
        }
    }
    __device__ __forceinline__ int state(int n) const {
        const int64_t n0 = int64_t(n) * bn, n1 = n0 + bn < lkv ? n0 + bn : lkv;
        return bias_tile_state(a, mb, mh, r0, r1, c0 + n0, c0 + n1);
    }
    __device__ __forceinline__ int next(int n) const {
        while (n <= last && p.bias && state(n) == kBiasDead) ++n;
        return n;
    }
};

// The work items of a key tile [n0, n1) of kv head hk: for each query head of the GQA group in
// turn, the query tiles (bm rows) that can see those keys (query_rows), in the fixed order
// idx = hh · nt + (t − t_first) (32-bit: G · nt < 2^31 for any sequence the grid can hold),
// trimmed with a bias to the first and last live item; state(idx) is an item's bias-map state and
// next(idx) the first item >= idx that is not dead. KeyTiles' counterpart, for the kernels that
// own a key tile (the portable and the sm90 dK/dV kernels).
struct QueryItems {
    const AttnFwdParams &p;
    const KArgs &a;
    const SeqRange &sr;
    int64_t hk, n0, n1;
    int G;
    int64_t mb, t_first;
    int bm, nt, first, last;

    __device__ __forceinline__ QueryItems(const AttnFwdParams &p_, const KArgs &a_, const SeqRange &sr_, int64_t hk_,
                                          int64_t n0_, int64_t n1_, int bm_)
        : p(p_), a(a_), sr(sr_), hk(hk_), n0(n0_), n1(n1_), G(int(p_.group())), mb(p_.bias_sb ? sr_.batch_index : 0),
          bm(bm_) {
        int64_t i_lo, i_hi;
        query_rows(p, n0, n1, sr.q_len, sr.kv_len, &i_lo, &i_hi);
        t_first = i_lo / bm;
        const int64_t t_last = i_hi >= i_lo ? i_hi / bm : -1;
        nt = t_last >= t_first ? int(t_last - t_first + 1) : 0;
        first = 0, last = G * nt - 1;
        if (p.bias) {
            auto dead = [&](int c) { return state(c) == kBiasDead; };
            first = first_live(first, last, dead);
            last = last_live(first, last, dead);
        }
    }
    __device__ __forceinline__ int64_t head(int idx) const { return hk * G + idx / nt; }
    __device__ __forceinline__ int64_t row0(int idx) const { return (t_first + idx % nt) * bm; }
    __device__ __forceinline__ int state(int idx) const {
        const int64_t h = head(idx), m0 = row0(idx);
        const int64_t m1 = m0 + bm < sr.q_len ? m0 + bm : sr.q_len;
        return bias_tile_state(a, mb, p.bias_sh ? h : 0, sr.q_begin + m0, sr.q_begin + m1, sr.kv_begin + n0,
                               sr.kv_begin + n1);
    }
    __device__ __forceinline__ int next(int idx) const {
        while (idx <= last && p.bias && state(idx) == kBiasDead) ++idx;
        return idx;
    }
};

// The number of indices a walk (KeyTiles, QueryItems) visits: next(first), next(i + 1), ... up to last.
template <class W> __device__ __forceinline__ int walk_count(const W &w) {
    if (!w.p.bias) return w.last >= w.first ? w.last - w.first + 1 : 0;
    int n = 0;
    for (int i = w.next(w.first); i <= w.last; i = w.next(i + 1)) ++n;
    return n;
}

// The piece of dbias a bias-gradient CTA owns (mma_dbias_kernel, sc_dbias_kernel: one source of
// truth for both) and what sums into it. Grid (dbias_grid): x the bm × bn tile of a dbias plane
// (query tile · key tiles + key tile), or the bn-key tile when the bias is broadcast over queries
// (dbias_si == 0: the CTA also sums over the query tiles); y the dbias head (0 when summed over
// heads); z the sequence (varlen, or a dbias per batch) or 0 (dense, summed over batches).
// Contributions (for_each_contribution): sequences [s_lo, s_hi), heads [h_lo, h_hi), their query tiles; dense
// sequences share their lengths, so sr0 (the first) gives the tile's geometry.
struct DbiasTile {
    bool sum_rows;
    int64_t mt, nt, hout, zout, s_lo, s_hi, h_lo, h_hi, n0, n1;
    SeqRange sr0;

    __device__ __forceinline__ DbiasTile(const AttnBwdParams &p, int bm, int bn)
        : sum_rows(p.dbias_si == 0), bm_(bm), bn_(bn) {
        const int64_t n_nt = (p.seqlen_kv + bn - 1) / bn;
        mt = sum_rows ? 0 : int64_t(blockIdx.x) / n_nt;
        nt = sum_rows ? int64_t(blockIdx.x) : int64_t(blockIdx.x) % n_nt;
        hout = blockIdx.y, zout = blockIdx.z;
        const bool per_seq = p.cu_seqlens_q || p.dbias_sb != 0;
        s_lo = per_seq ? zout : 0, s_hi = per_seq ? zout + 1 : p.batch;
        h_lo = p.dbias_sh ? hout : 0, h_hi = p.dbias_sh ? hout + 1 : p.hq;
        sr0 = seq_range(p, s_lo);
        n0 = nt * bn, n1 = n0 + bn < sr0.kv_len ? n0 + bn : sr0.kv_len;
    }
    // The tile starts past its sequence's end: it holds no element.
    __device__ __forceinline__ bool past_end() const {
        return n0 >= sr0.kv_len || (!sum_rows && mt * bm_ >= sr0.q_len);
    }
    // Calls f(sr, h, m0, m1, state, first) for every query tile [m0, m1) of head h (sequence sr)
    // that adds into this piece, in the fixed order: sequences, heads, query tiles. state: the
    // tile's bias-map state (kBiasRead: the bias is read; kBiasZero, or no bias: it is not);
    // first: the head's first such tile (K and V of its kv head are loaded then). Tiles that add
    // nothing (no row sees these keys, or the bias there is all -inf: their P is exactly 0) are
    // skipped. Block-uniform: f may synchronize.
    template <class F>
    __device__ __forceinline__ void for_each_contribution(const AttnBwdParams &p, const KArgs &a, F &&f) const {
        for (int64_t sq = s_lo; sq < s_hi; ++sq) {
            const SeqRange sr = seq_range(p, sq);
            int64_t t_lo = mt, t_hi = mt;
            if (sum_rows) {
                int64_t i_lo, i_hi;
                query_rows(p, n0, n1, sr.q_len, sr.kv_len, &i_lo, &i_hi);
                t_lo = i_lo / bm_, t_hi = i_hi >= i_lo ? i_hi / bm_ : -1;
            }
            for (int64_t h = h_lo; h < h_hi; ++h) {
                bool first = true;
                for (int64_t t = t_lo; t <= t_hi; ++t) {
                    const int64_t m0 = t * bm_, m1 = m0 + bm_ < sr.q_len ? m0 + bm_ : sr.q_len;
                    int64_t nf, nl;
                    key_tiles(p, m0, m1, sr.q_len, sr.kv_len, bn_, &nf, &nl);
                    if (nt < nf || nt > nl) continue;
                    const int st = p.bias ? bias_tile_state(a, p.bias_sb ? sr.batch_index : 0, p.bias_sh ? h : 0,
                                                            sr.q_begin + m0, sr.q_begin + m1, sr.kv_begin + n0,
                                                            sr.kv_begin + n1)
                                          : kBiasZero;
                    if (st == kBiasDead) continue;
                    f(sr, h, m0, m1, st, first);
                    first = false;
                }
            }
        }
    }
    // Element (row i of the tile's sequence, key n0 + c) of this CTA's dbias plane is out[i·si + c]
    // (with dbias_si == 0 the one row).
    __device__ __forceinline__ float *out(const AttnBwdParams &p) const {
        const int64_t zoff = p.cu_seqlens_q ? 0 : zout * p.dbias_sb;  // dense: the batch's plane (0 when summed)
        return p.dbias + zoff + hout * p.dbias_sh + sr0.q_begin * p.dbias_si + sr0.kv_begin + n0;
    }

  private:
    int bm_, bn_;
};

// Host side: the bias-gradient grid for tiles of bm rows × bn keys (DbiasTile).
inline void dbias_grid(const AttnBwdParams &p, int bm, int bn, int64_t (&grid)[3]) {
    const int64_t nm = (p.seqlen_q + bm - 1) / bm, nn = (p.seqlen_kv + bn - 1) / bn;
    grid[0] = p.dbias_si ? nm * nn : nn;
    grid[1] = p.dbias_sh ? p.hq : 1;
    grid[2] = p.cu_seqlens_q || p.dbias_sb ? p.batch : 1;
}

}  // namespace fattn::cuda::attn
