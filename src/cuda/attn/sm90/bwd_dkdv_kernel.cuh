// bwd_dkdv_kernel.cuh — the sm_90a dK/dV kernel of the deterministic backward (bf16/f16, or f32
// inputs on tf32; D 64/128; 16-bit D 256 with FATTN_SM90_D256).
//
// K/V-stationary, like the portable dK/dV kernel (mma_bwd.cuh): one CTA per (128-key tile, kv
// head, sequence) owns those keys' dK and dV in f32 registers and loops over the query heads of
// its GQA group, then over 64-row query tiles, in that fixed order (GQA reduced inside the
// kernel; no atomics: bitwise deterministic). 3 warpgroups:
//   WG0 (producer): warp 0 loads K and V once (TMA), then per work item the Q and dO tiles (TMA)
//        into a 2-stage ring and the rows' lse / δ (and, with a bias, lse' and the ceilings) with
//        plain loads into shared memory; the stage's full barrier counts the TMA bytes and the 32
//        lanes' stores.
//   WG1, WG2 (consumers): 64 keys each. Per item: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (m64n64k16, both
//        operands K-major in shared memory), Pᵀ = exp(Sᵀ − lse) and dSᵀ = Pᵀ∘(dPᵀ − δ) on the
//        registers (columns are queries), then dV += Pᵀ·dO and dK += dSᵀ·Q (m64nDk16, Pᵀ/dSᵀ as
//        16-bit A fragments from registers, Q and dO read MN-major).
// Masks, bias tiles and ceilings follow the portable kernel exactly (common.cuh).
// D 256 (kSplit, 16-bit; tiles.h: sm90_dkdv_split): 64-key CTAs; both consumer warpgroups take the
// same 64 keys, each computes the item's Sᵀ and dPᵀ over all of D and owns half of dK and dV's
// columns (dV += Pᵀ·dO and dK += dSᵀ·Q over its 128 columns: m64n128k16).
// f32 inputs (T = float, tf32 m64nNk8): 32-query items, since every operand is 4 bytes and tf32
// reads K-major operands only: K and V rows come from k and v in place, each consumer warpgroup
// rounding its 64 keys to tf32 in shared memory once; Q and dO rows from q and dout in place,
// rounded by warps 1-3 of the producer warpgroup once a stage lands (the consumers wait on the
// stage's `ready` barrier after them); and
// the B operands of dV += Pᵀ·dO and dK += dSᵀ·Q as the pre-pass's dOᵀ and Qᵀ copies (8-query
// groups in tf32_key_order: stage_tf32.cu). The rows (for Sᵀ, dPᵀ) and the transposed tiles (for
// dV, dK) have rings of their own: a consumer releases an item's rows after its softmax, its
// transposed tiles after dV/dK, so at D128 (K and V of 128 keys: 128 KB) two row stages and one
// transposed stage fit, and the next item's rows load under this item's dV/dK.
// Fused dQ (kFused: FATTN_SM90_DQ_FUSED, 16-bit, no bias; tiles.h): each consumer also stores its
// dSᵀ transposed into a shared dS tile [64 queries, 128 keys], and the item's dQ = dS·K (m64n64,
// dS K-major, K read MN-major) lands in f32 in a shared staging tile: at D128 each warpgroup owns
// 64 of the columns over all 128 keys; at D64 each sums its own 64 keys and the second adds its
// part to the first's; the tile is kept in the accumulators' order (tiles.h: sm90_dqf_index), so
// each thread stores whole float4s and the tile is one contiguous block. Warp 1 of the producer
// warpgroup (the dQ writer) then adds the tile to the workspace's f32 accumulator (a tile of the
// same order: one bulk reduction per item), the CTAs of one query tile one after another in
// descending key-tile order (a counter per tile: a CTA waits until it reads the number of later
// key tiles that also add to that tile, adds, then increments it once the add is done), so the
// sums are bitwise repeatable; the convert kernel (dq_fused.cuh) reads the tiles back in that order. Grid x runs the key tiles in reverse (CtaTile::keys_reversed): a CTA waits only on
// CTAs launched before it, which are resident or done, so the waits always end; under a causal
// or banded mask a later key tile reaches a query tile first, so in the steady state no CTA waits.
#pragma once

#include "cuda/attn/sm90/fwd_kernel.cuh"

namespace fattn::cuda::attn {

namespace sm90bwd {  // es: element size (2: bf16/f16, 4: f32 inputs on tf32); shapes: tiles.h (sm90_dkdv_*)
constexpr int consumers(size_t = 2) { return 2; }  // warpgroups of 64 keys
constexpr int bn(int d = 128) { return sm90_dkdv_bn(d); }
constexpr int bm(int, size_t es = 2) { return sm90_dkdv_bm(es); }
constexpr int stages(int d, size_t es = 2) { return sm90_dkdv_stages(d, es); }  // row stages (Q, dO, the rows' lse/δ)
constexpr int t_stages(int d, size_t es = 2) { return sm90_dkdv_t_stages(d, es); }  // tf32's Qᵀ, dOᵀ
constexpr int threads(size_t es = 2) { return 128 * (1 + consumers(es)); }
// Register split (128·P + 128·consumers·C <= 64K): the producer's item walk spills under 56
// registers; at D128 the consumers' dK + dV (128) + Sᵀ, dPᵀ (64) + fragments need more than 224
// (ptxas -v). tf32 D128 (with the opaque K/V bases below): 40/232 ran 2% faster fwd+bwd than
// 24/240, whose producer spills ~1.8 KB of loads (its consumers 12 B against 112 B at 232); since
// the producer warpgroup also rounds the Q and dO stages, 56/224 (ptxas: 20 B of spill stores,
// against 248 B at 40/232).
constexpr int producer_regs(int d, size_t es = 2) { return d > 64 && es == 2 ? 40 : 56; }
constexpr int consumer_regs(int d, size_t es = 2) { return d > 64 && es == 2 ? 232 : 224; }
constexpr size_t panel(int rows) { return size_t(rows) * 128; }
constexpr size_t dkdv_smem(int d, size_t es = 2, bool fused_dq = false) { return sm90_dkdv_smem(d, es, fused_dq); }
}  // namespace sm90bwd

// The fused dQ's workspace (workspace.h; unused by the other instances): acc, f32 [B_view, Hq,
// rows, D] in tiles of 64 rows in the order of sm90_dqf_index (tiles.h); cnt, one counter per
// (sequence, query head, 64-row query tile) at [sequence · Hq + head] · mtiles + tile, zero
// before the kernel.
struct Sm90DqAcc {
    float *acc;
    int *cnt;
    int64_t mtiles, rows;
    // The accumulator tile of sequence s (range sr), query head h, rows from m0: varlen sequences
    // are 64 rows apart, so the last tile of one ends before the next one's first (workspace.h).
    FATTN_HD float *tile(const AttnBwdParams &p, const SeqRange &sr, int64_t s, int64_t h, int64_t m0, int d) const {
        return acc + ((sr.batch_index * p.hq + h) * rows + sr.q_begin + (p.cu_seqlens_q ? sm90_dkdv_bm() * s : 0) + m0) * d;
    }
};

// tm_qt, tm_dot: the Qᵀ and dOᵀ copies' tensor maps (tf32 only; unused by the 16-bit instances).
template <typename T, int D, bool kFused = false>
__global__ void __launch_bounds__(sm90bwd::threads(sizeof(T)), 1)
    sm90_dkdv_kernel(const AttnBwdParams p, const KArgs a, const __grid_constant__ Sm90Maps maps,
                     const __grid_constant__ CUtensorMap tm_do, const __grid_constant__ CUtensorMap tm_qt,
                     const __grid_constant__ CUtensorMap tm_dot, const Sm90DqAcc fd) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || !defined(__CUDACC__)
    using namespace sm90bwd;
    using namespace sm90;
    constexpr bool kTf32 = sizeof(T) == 4;
    constexpr bool kSplit = sm90_dkdv_split(D);  // D 256: both warpgroups on the same keys, half the columns each
    constexpr int kBN = bn(D), kBM = bm(D, sizeof(T)), NC = consumers(sizeof(T)), TS = t_stages(D, sizeof(T));
    constexpr int DO = sm90_dkdv_cols(D);  // dK, dV columns of one consumer warpgroup
    constexpr int kStages = stages(D, sizeof(T));
    constexpr int PC = 128 / int(sizeof(T));  // elements per 128-byte panel row
    constexpr int KS = kTf32 ? 8 : 16;        // k of one wgmma (32 bytes of a panel row)
    constexpr int NP = D / PC, NO = DO / 8, NQ = kBM / 8, NK = kBM / KS;
    static_assert(!kFused || (!kTf32 && kBM == 64 && kBN == 128 && NC == 2), "fused dQ: 16-bit, 64-query items, 128 keys");
    static_assert(!kSplit || (!kTf32 && !kFused && kBN == 64 && DO == 128), "D 256: 16-bit, unfused, 64 keys");
    constexpr int kDqBufs = kFused ? sm90_dqf_bufs() : 1;
    FATTN_DYN_SMEM(smem_raw);
    unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    T *sK = reinterpret_cast<T *>(base);                           // NP × [kBN, PC]
    T *sV = reinterpret_cast<T *>(base + panel(kBN) * NP);         // NP × [kBN, PC]
    T *sQ = reinterpret_cast<T *>(base + 2 * panel(kBN) * NP);     // kStages × NP × [kBM, PC]
    T *sdO = reinterpret_cast<T *>(base + (2 * panel(kBN) + kStages * panel(kBM)) * NP);
    // tf32: TS × kBM/32 × [D, 32 queries] each (Qᵀ, dOᵀ)
    T *sQt = reinterpret_cast<T *>(base + (2 * panel(kBN) + 2 * kStages * panel(kBM)) * NP);
    T *sdOt = reinterpret_cast<T *>(base + (2 * panel(kBN) + (2 * kStages + TS) * panel(kBM)) * NP);
    // kFused: two dS buffers of two 64-key panels [kBM, 64], then the f32 dQ tiles [kBM, D]
    // (sm90_dqf_index's order)
    T *sDs = reinterpret_cast<T *>(base + (2 * panel(kBN) + 2 * (kStages + TS) * panel(kBM)) * NP);
    float *sDq = reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(sDs) + (kFused ? 4 * panel(kBM) : 0));
    float *sRow = sDq + (kFused ? kDqBufs * kBM * D : 0);
    // per row stage: [0] lse (natural; -inf: masked row) [1] δ [2] lse' [3] ceiling, kBM each;
    // the fused dQ takes no bias: [0] and [1] only
    constexpr int kRowArr = sm90_dkdv_row_arrays(kFused);
    uint64_t *bars = reinterpret_cast<uint64_t *>(sRow + kStages * kRowArr * kBM);
    uint64_t *barKV = bars, *full = bars + 1, *empty = full + kStages, *tfull = empty + kStages, *tempty = tfull + TS;
    uint64_t *dq_full = tempty + TS, *dq_empty = dq_full + kDqBufs;  // kFused
    uint64_t *ready = dq_full + (kFused ? 2 * kDqBufs : 0);           // tf32: a stage's rows rounded
    constexpr size_t kTileElems = size_t(kBM) * D;

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32;
    const CtaTile cta = kFused ? CtaTile::keys_reversed(p, kBN) : CtaTile::keys(p, kBN);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    // tf32: a pass of kv heads from a.kv_head0 on (bwd.cu), whose staged copies count heads from it.
    const int64_t hb = kTf32 ? a.kv_head0 : 0;
    const int64_t hk = cta.head + hb, lq = cta.lq, lkv = cta.lkv, n0 = cta.r0, n1 = cta.r1();
    // Work items in the fixed order (head of the group, query tile), trimmed to live ones.
    const QueryItems qi(p, a, sr, hk, n0, n1, kBM);
    // tf32: how many the rounding warps wait for (counted here, so that their loop holds no item state)
    const int nitems = kTf32 ? walk_count(qi) : 0;

    if (tid == 0) {
        mbar_init(barKV, 1);
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1 + 32);  // the TMA arrival + the producer lanes' row stores
            mbar_init(&empty[s], 128 * NC);  // every consumer thread: each read the stage's row arrays
        }
        for (int s = 0; s < TS; ++s) {
            mbar_init(&tfull[s], 1);
            mbar_init(&tempty[s], 128 * NC);
        }
        if constexpr (kTf32)
            for (int s = 0; s < kStages; ++s) mbar_init(&ready[s], 3);  // one arrival per rounding warp
        if constexpr (kFused)
            for (int s = 0; s < kDqBufs; ++s) {
                mbar_init(&dq_full[s], 128 * NC);  // every consumer thread, after its part of the tile
                mbar_init(&dq_empty[s], 1);        // the writer, once its bulk copies have read the tile
            }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {  // ---------------------------------------------------------------- producer
        regs_dealloc<producer_regs(D, sizeof(T))>();
        if constexpr (kFused) {
            if (warp == 1 && lane == 0) {  // the dQ writer
                // The CTAs adding to query tile ti: the key tiles from this one up to the last
                // whose first query tile (QueryItems' t_first) is at most ti. The first query tile
                // and the last of a key tile grow with it (causal, window or no mask), so they are
                // contiguous, and for the rising ti of one head the last only moves up.
                const int64_t nt0 = n0 / kBN, nkt = (lkv + kBN - 1) / kBN;
                auto first_tile = [&](int64_t nn) {
                    int64_t lo, hi;
                    query_rows(p, nn * kBN, nn * kBN + kBN < lkv ? nn * kBN + kBN : lkv, lq, lkv, &lo, &hi);
                    return hi >= lo ? lo / kBM : INT64_MAX;
                };
                int64_t hcur = -1, nlast = nt0;
                int *pending = nullptr;  // the counter of the last tile added, released once its add is done
                auto release = [&](int *c) {
                    fence_proxy_async_global();
                    counter_release_inc(c);
                };
                int it = 0;
                for (int idx = qi.next(qi.first); idx <= qi.last; idx = qi.next(idx + 1), ++it) {
                    const int b = it % kDqBufs;
                    const int64_t h = qi.head(idx), m0 = qi.row0(idx), ti = m0 / kBM;
                    if (h != hcur) hcur = h, nlast = nt0;
                    while (nlast + 1 < nkt && first_tile(nlast + 1) <= ti) ++nlast;
                    int *cnt = fd.cnt + (int64_t(blockIdx.z) * p.hq + h) * fd.mtiles + ti;
                    float *g = fd.tile(p, sr, blockIdx.z, h, m0, D);
                    const float *st = sDq + b * kBM * D;
                    const int rank = int(nlast - nt0);
                    mbar_wait(&dq_full[b], (it / kDqBufs) & 1);
                    constexpr bool kOrdered = FATTN_SM90_DQ_FUSED != 2;  // (2: a measurement build, tiles.h)
                    if (kOrdered) counter_wait_eq(cnt, rank);  // the later key tiles have added theirs
                    fence_proxy_async_global();
                    // the whole tile (rows past the sequence included: the tile's own rows) in one copy
                    if (kOrdered && rank == 0)
                        bulk_s2g(g, st, uint32_t(kBM * D * 4));
                    else
                        bulk_s2g_add_f32(g, st, uint32_t(kBM * D * 4));
                    bulk_commit();
                    bulk_wait_read<0>();
                    mbar_arrive(&dq_empty[b]);
                    // The previous tile's add is done (all groups but this one): its counter lets
                    // the next key tile add to it. Waiting one tile late, the writer does not stall
                    // on the add it has just issued (tiles.h: FATTN_SM90_DQF_LAG; with one buffer
                    // it waits, so the release comes one tile sooner).
                    constexpr bool kLag = FATTN_SM90_DQF_LAG != 0 && kDqBufs > 1;  // (tiles.h)
                    if (!kLag) {
                        bulk_wait<0>();
                        release(cnt);
                    } else {
                        if (pending) {
                            bulk_wait<1>();
                            release(pending);
                        }
                        pending = cnt;
                    }
                }
                if (pending) {
                    bulk_wait<0>();
                    release(pending);
                }
            }
        }
        if constexpr (kTf32) {
            if (warp != 0) {  // warps 1-3: each landed stage's Q and dO rows to tf32, in place
                for (int it = 0; it < nitems; ++it) {
                    const int st = it % kStages;
                    mbar_wait(&full[st], (it / kStages) & 1);
                    sm90_round_stage_tf32(sQ + st * kTileElems, int(kTileElems));
                    sm90_round_stage_tf32(sdO + st * kTileElems, int(kTileElems));
                    fence_proxy_async_smem();  // the consumers' wgmma read them through the async proxy
                    mbar_arrive_warp(&ready[st]);
                }
                return;
            }
        }
        if (warp != 0) return;
        // q, k, v and dout are read in place (tf32 as 16-bit inputs); tf32's Qᵀ/dOᵀ copies count
        // their columns per sequence and their heads from the pass's first.
        const int64_t q_col0 = sm90_vt_col0(sr.batch_index * p.total_q + sr.q_begin, blockIdx.z);
        if (lane == 0) {
            mbar_arrive_expect_tx(barKV, uint32_t(2 * kBN * D * sizeof(T)));
            for (int pn = 0; pn < NP; ++pn) {
                tma_load_4d(sK + pn * kBN * PC, &maps.k, barKV, pn * PC, int(sr.kv_begin + n0), int(hk), int(sr.batch_index));
                tma_load_4d(sV + pn * kBN * PC, &maps.v, barKV, pn * PC, int(sr.kv_begin + n0), int(hk), int(sr.batch_index));
            }
        }
        int it = 0;
        for (int idx = qi.next(qi.first); idx <= qi.last; idx = qi.next(idx + 1), ++it) {
            const int st = it % kStages;
            if (it >= kStages) mbar_wait(&empty[st], ((it / kStages) - 1) & 1);
            const int64_t h = qi.head(idx), m0 = qi.row0(idx);
            if (lane == 0) {
                mbar_arrive_expect_tx(&full[st], uint32_t(2 * kBM * D * sizeof(T)));
                for (int pn = 0; pn < NP; ++pn) {
                    tma_load_4d(sQ + st * kTileElems + pn * kBM * PC, &maps.q, &full[st], pn * PC, int(sr.q_begin + m0),
                                int(h), int(sr.batch_index));
                    tma_load_4d(sdO + st * kTileElems + pn * kBM * PC, &tm_do, &full[st], pn * PC, int(sr.q_begin + m0),
                                int(h), int(sr.batch_index));
                }
            }
            float *rows = sRow + st * kRowArr * kBM;
            for (int c = lane; c < kBM; c += 32) {
                const int64_t i = m0 + c;
                const bool ok = i < lq;
                rows[c] = ok ? row_lse(p, sr, h, i) : -INFINITY;
                rows[kBM + c] = ok ? a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + i] : 0.f;
                if constexpr (!kFused) {
                    rows[2 * kBM + c] = ok && p.bias ? row_lse_rel(p, a, sr, h, i) : -INFINITY;
                    rows[3 * kBM + c] = ok ? row_ceil(p, a, sr, h, i) : 0.f;
                }
            }
            mbar_arrive(&full[st]);  // release: the row stores above are visible to the waiters
            if constexpr (kTf32) {  // this item's Qᵀ, dOᵀ once every consumer is done with the last one's
                const int ts = it % TS;
                if (it >= TS) mbar_wait(&tempty[ts], ((it / TS) - 1) & 1);
                if (lane == 0) {
                    mbar_arrive_expect_tx(&tfull[ts], uint32_t(2 * kBM * D * sizeof(T)));
                    for (int pn = 0; pn < kBM / 32; ++pn) {
                        const int col = int(q_col0 + m0 + pn * 32);
                        tma_load_4d(sQt + ts * kTileElems + pn * D * 32, &tm_qt, &tfull[ts], col, 0, int(h - hb * p.group()), 0);
                        tma_load_4d(sdOt + ts * kTileElems + pn * D * 32, &tm_dot, &tfull[ts], col, 0, int(h - hb * p.group()), 0);
                    }
                }
            }
        }
        return;
    }

    // -------------------------------------------------------------------------------- consumers
    regs_alloc<consumer_regs(D, sizeof(T))>();
    const int cw = wg - 1, wl = warp % 4, g = lane >> 2, t4 = lane & 3;
    const int64_t k0w = n0 + (kSplit ? 0 : 64 * cw);  // this warpgroup's first key
    const int64_t kj[2] = {k0w + 16 * wl + g, k0w + 16 * wl + g + 8};
    const int c0 = kSplit ? DO * cw : 0;  // this warpgroup's first column of dK and dV
    float dk[DO / 2], dv[DO / 2];
#pragma unroll
    for (int i = 0; i < DO / 2; ++i) dk[i] = dv[i] = 0.f;
    const float sl2 = p.scale * kLog2e;
    const uint32_t kw_off = uint32_t(kSplit ? 0 : cw * 64 * 128);
    const uint32_t k_base0 = saddr(sK) + kw_off, v_base0 = saddr(sV) + kw_off;

    // kPipe (tiles.h: FATTN_SM90_DKDV_PIPE): the next item's Sᵀ and dPᵀ are issued behind this
    // item's dV and dK, so the two groups run back to back
    constexpr bool kPipe = !kTf32 && !kFused && !kSplit && FATTN_SM90_DKDV_PIPE >= (D > 64 ? 2 : 1);
    float s[kBM / 2], dp[kBM / 2];  // an item's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ  [64 keys, kBM queries]
    // issues and commits the products into s and dp for the Q and dO rows at q_b and do_b
    auto issue_scores = [&](uint32_t k_base, uint32_t v_base, uint32_t q_b, uint32_t do_b) {
        wgmma_fence();
        sm90_ss_product<T, D, kBM>(s, k_base, uint32_t(panel(kBN)), q_b, uint32_t(panel(kBM)));
        sm90_ss_product<T, D, kBM>(dp, v_base, uint32_t(panel(kBN)), do_b, uint32_t(panel(kBM)));
        wgmma_commit();
    };
    mbar_wait(barKV, 0);
    if constexpr (kTf32) {  // this warpgroup's 64 keys of K and V to tf32, once
        sm90_round_rows_tf32<NP, kBN>(reinterpret_cast<float *>(sK), cw);
        sm90_round_rows_tf32<NP, kBN>(reinterpret_cast<float *>(sV), cw);
        sm90_rows_written(cw);
    }
    int it = 0;
    for (int idx = qi.next(qi.first); idx <= qi.last; idx = qi.next(idx + 1), ++it) {
        const int st = it % kStages;
        mbar_wait(&full[st], (it / kStages) & 1);
        const int64_t h = qi.head(idx), m0 = qi.row0(idx);
        // (cLr, cC: read only with a bias, which the fused dQ never has: its stage has no such rows)
        const float *cL = sRow + st * kRowArr * kBM, *cD = cL + kBM, *cLr = cL + 2 * kBM, *cC = cL + 3 * kBM;
        const uint32_t q_base = saddr(sQ + st * kTileElems), do_base = saddr(sdO + st * kTileElems);
        if constexpr (kTf32) mbar_wait(&ready[st], (it / kStages) & 1);  // its Q and dO rows rounded

        // Sᵀ and dPᵀ (kPipe: after the first item, issued and waited for by the iteration before).
        // tf32: opaque per item, so ptxas forms the descriptors of K and V here instead of keeping
        // all 2·D/KS of them live across the loop (D128 consumers spilled 172 B in the item loop,
        // 48 B without; the dK/dV kernel 3.30 -> 2.56 ms by ncu at 24/240). The 16-bit kernel ran
        // 2-6% slower fwd+bwd with it at D128, so it keeps the hoisted form.
        const uint32_t k_base = kTf32 ? opaque(k_base0) : k_base0, v_base = kTf32 ? opaque(v_base0) : v_base0;
        if (!kPipe || it == 0) {
            issue_scores(k_base, v_base, q_base, do_base);
            wgmma_wait<0>();
        }
        reg_fence(s);
        reg_fence(dp);

        // Pᵀ into s, dSᵀ = Pᵀ ∘ (dPᵀ − δ) into dp. Element (j, e) of row half hf: key kj[hf],
        // query column c = 8j + 2·t4 + (e & 1).
        const bool full_tile = tile_full(p, m0, m0 + kBM, k0w, k0w + 64, lq, lkv);
        const bool use_bias = !kFused && p.bias && qi.state(idx) == kBiasRead;  // (the fused dQ: never a bias)
        if (full_tile && !use_bias) {  // interior: every query row has keys, so lse is finite
#pragma unroll
            for (int j = 0; j < NQ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int c = j * 8 + 2 * t4 + (e & 1);
                    const float pr = fast_exp2(s[4 * j + e] * sl2 - cL[c] * kLog2e);
                    s[4 * j + e] = pr;
                    dp[4 * j + e] = pr * (dp[4 * j + e] - cD[c]);
                }
        } else {
            const int64_t bb = seq_bias(p, sr, h);
            // Four query blocks (16 elements) at a time: their bias loads are all issued before the
            // first is used. (One load waiting on L2 per element made a band bias's partly masked
            // items several times slower than whole ones.) tf32: two copies, with bias reads (kB)
            // and without, so that a masked item without one loads and converts nothing
            // (sm90_split_masked).
            constexpr int CJ = kTf32 ? (NQ < 4 ? NQ : 4) : 2;
            auto masked = [&](auto with_bias) {
                constexpr bool kB = decltype(with_bias)::value;
#pragma unroll
                for (int j0 = 0; j0 < NQ; j0 += CJ) {
                    uint32_t bv[CJ * 4] = {};  // bits (common.cuh: load_bias_bits)
                    if constexpr (kB) {
#pragma unroll
                        for (int i = 0; i < CJ * 4; ++i) {
                            const int hf = (i & 3) >> 1;
                            const int64_t qi = m0 + (j0 + i / 4) * 8 + 2 * t4 + (i & 1);
                            if (use_bias && qi < lq && kj[hf] < lkv)
                                bv[i] = load_bias_bits(p.bias, p.bias_dtype, bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin + kj[hf]);
                        }
                    }
#pragma unroll
                    for (int jj = 0; jj < CJ; ++jj)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int j = j0 + jj, hf = e >> 1, c = j * 8 + 2 * t4 + (e & 1);
                            const int64_t qi = m0 + c;
                            bool ok = full_tile;
                            if (!ok && qi < lq && kj[hf] < lkv) {
                                int64_t lo, hi;
                                key_range(p, qi, lq, lkv, &lo, &hi);
                                ok = kj[hf] >= lo && kj[hf] <= hi;
                            }
                            ok = ok && cL[c] != -INFINITY;
                            float x = s[4 * j + e] * sl2, l2 = cL[c] * kLog2e;
                            if (kB && use_bias) {  // relative to the row's ceiling, against lse' (common.cuh)
                                x += (bias_from_bits(bv[4 * jj + e], p.bias_dtype) - cC[c]) * kLog2e;
                                l2 = cLr[c] * kLog2e;
                            }
                            const float pr = ok ? fast_exp2(x - l2) : 0.f;
                            s[4 * j + e] = pr;
                            // A select, not pr · (..): a masked row's dPᵀ may be NaN (rows past a
                            // sequence are not inputs of this call), and dK sums over the query columns.
                            dp[4 * j + e] = ok ? pr * (dp[4 * j + e] - cD[c]) : 0.f;
                        }
                }
            };
            if (!sm90_split_masked<T>() || use_bias) masked(std::true_type{});
            else masked(std::false_type{});
        }
        if constexpr (kTf32) mbar_arrive(&empty[st]);  // the rows and row arrays are read (dV/dK read Qᵀ, dOᵀ)
        if constexpr (kFused) {
            // dSᵀ transposed into panel cw of dS buffer it % 2 (row = query, 128-byte swizzle);
            // the buffer was last read by item it - 2's dQ product, which both warpgroups waited
            // for before the barrier of item it - 1
            unsigned char *ds = reinterpret_cast<unsigned char *>(sDs) + (it & 1) * 2 * panel(kBM) + cw * panel(kBM);
#pragma unroll
            for (int j = 0; j < NQ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int c = j * 8 + 2 * t4 + (e & 1), kl = 16 * wl + g + 8 * (e >> 1);
                    *reinterpret_cast<T *>(ds + c * 128 + (((kl >> 3) ^ (c & 7)) << 4) + ((kl & 7) << 1)) = from_f<T>(dp[4 * j + e]);
                }
            fence_proxy_async_smem();
            named_barrier_sync(1, 128 * NC);
        }
        // Pᵀ and dSᵀ as A fragments (sm90_a_frag; tf32: in Qᵀ/dOᵀ's query order).
        uint32_t pa[NK][4], sa[NK][4];
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) {
            sm90_a_frag<T>(s, kk, pa[kk]);
            sm90_a_frag<T>(dp, kk, sa[kk]);
        }

        // dV += Pᵀ·dO, dK += dSᵀ·Q  [64 keys, DO columns from c0]. 16-bit: dO and Q read MN-major
        // (queries = K; kSplit: from the panel of column c0); tf32: dOᵀ and Qᵀ, K-major.
        const int ts = kTf32 ? it % (TS > 0 ? TS : 1) : 0;
        if constexpr (kTf32) mbar_wait(&tfull[ts], (it / TS) & 1);
        const uint32_t qt_base = saddr(sQt + ts * kTileElems), dot_base = saddr(sdOt + ts * kTileElems);
        const uint32_t col_off = uint32_t((c0 / PC) * panel(kBM));
        wgmma_fence();
        sm90_rs_product<T, DO>(dv, pa, dot_base, do_base + col_off, uint32_t(panel(kBM)));
        sm90_rs_product<T, DO>(dk, sa, qt_base, q_base + col_off, uint32_t(panel(kBM)));
        wgmma_commit();
        const bool more = !kPipe || qi.next(idx + 1) <= qi.last;  // kPipe: an item after this one
        if constexpr (kPipe) {
            // The next item's Sᵀ and dPᵀ behind them, once its stage has landed; then this item's
            // group (the older of the two) is waited for before its stage is released. After the
            // last item the products are issued on its own stage and discarded, so that s and dp
            // are always the wgmma's outputs (a branch around it would merge them with register
            // moves inside the group, which ptxas serializes: C7514).
            const int nst = more ? (it + 1) % kStages : st;
            if (more) mbar_wait(&full[nst], ((it + 1) / kStages) & 1);
            issue_scores(k_base, v_base, saddr(sQ + nst * kTileElems), saddr(sdO + nst * kTileElems));
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        reg_fence(dv);
        reg_fence(dk);
        // releases this thread's reads of the stage (the producer stores into it next)
        if constexpr (kTf32)
            mbar_arrive(&tempty[ts]);
        else if (more)
            mbar_arrive(&empty[st]);
        // kPipe: the next item's products are waited for here, in this iteration, so that no move
        // of the loop-carried s and dp falls inside their wgmma group (ptxas would serialize it);
        // after the last item, before its stage is released (the discarded products read it)
        if constexpr (kPipe) {
            wgmma_wait<0>();
            if (!more) mbar_arrive(&empty[st]);
        }
        if constexpr (kFused) {
            // dQ = dS·K [64 queries, 64 columns]: at D128 columns 64·cw.. over all 128 keys, at D64
            // all columns over this warpgroup's 64 keys (dS read K-major, K's rows MN-major). Issued
            // after dV and dK are done, so that the P/dS fragments are dead while its accumulators live.
            constexpr int KD = D > 64 ? 8 : 4;
            const uint32_t a0 = saddr(sDs) + uint32_t((it & 1) * 2 * panel(kBM) + (D > 64 ? 0 : cw * panel(kBM)));
            const uint32_t b0 = saddr(sK) + uint32_t(D > 64 ? cw * panel(kBN) : cw * 64 * 128);
            float dq[32];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KD; ++kk)
                Wgmma<T, 64>::ss_tb(dq, desc_sw128(a0 + uint32_t((kk / 4) * panel(kBM) + (kk % 4) * 32), 16, 1024),
                                    desc_sw128(b0 + uint32_t(kk * 16 * 128), uint32_t(panel(kBN)), 1024), kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dq);
            // the item's dQ into staging tile it % kDqBufs once the writer has read it out; at D64
            // the second warpgroup adds its keys' part to the first's (a fixed order)
            const int b = it % kDqBufs;
            if (it >= kDqBufs) mbar_wait(&dq_empty[b], ((it / kDqBufs) - 1) & 1);
            // this thread's four values of register group j (columns 8j.. of its warpgroup's
            // block) as float4 j·128 + its thread (sm90_dqf_index)
            float4 *dqs = reinterpret_cast<float4 *>(sDq + b * kBM * D) + (D > 64 ? cw * 8 * 128 : 0) + (tid % 128);
            auto put = [&](bool add) {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    float4 v = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
                    if (add) {
                        const float4 o = dqs[j * 128];
                        v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
                    }
                    dqs[j * 128] = v;
                }
            };
            if constexpr (D > 64) {
                put(false);
            } else {
                if (cw == 0) put(false);
                named_barrier_sync(2, 128 * NC);
                if (cw == 1) put(true);
            }
            fence_proxy_async_smem();  // the writer's bulk copies read the tile through the async proxy
            mbar_arrive(&dq_full[b]);
        }
    }

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        if (kj[hf] >= lkv) continue;
        T *gdK = static_cast<T *>(p.dk) + sr.batch_index * p.dk_sb + (sr.kv_begin + kj[hf]) * p.dk_ss + hk * p.dk_sh;
        T *gdV = static_cast<T *>(p.dv) + sr.batch_index * p.dv_sb + (sr.kv_begin + kj[hf]) * p.dv_ss + hk * p.dv_sh;
#pragma unroll
        for (int j = 0; j < NO; ++j) {
            const int c = c0 + j * 8 + 2 * t4;
            if (c < p.d) gdK[c] = from_f<T>(dk[4 * j + 2 * hf] * p.scale);  // head dims below the bucket
            if (c + 1 < p.d) gdK[c + 1] = from_f<T>(dk[4 * j + 2 * hf + 1] * p.scale);
            if (c < p.dim_v) gdV[c] = from_f<T>(dv[4 * j + 2 * hf]);
            if (c + 1 < p.dim_v) gdV[c + 1] = from_f<T>(dv[4 * j + 2 * hf + 1]);
        }
    }
#endif
}

}  // namespace fattn::cuda::attn
