// fwd_kernel.cuh — the sm_90a forward of softmax attention (bf16/f16, or f32 inputs on tf32; D 64
// or 128): TMA loads,
// a producer warp and two consumer warpgroups, wgmma with S kept in registers and P fed from
// registers into the P·V wgmma: FlashAttention-3's structure (docs/CUDA-notes.md, "sm90"), with
// its intra-warpgroup pipeline (no ping-pong between the consumer warpgroups).
//
// One CTA per (128-row query tile, q head, sequence), 3 warpgroups:
//   WG0 (producer): warp 0 issues every TMA load — the Q tile once, then K and V tiles of
//        128 keys into 2-stage rings (full/empty mbarriers, K and V released separately) — in
//        the key-tile order of the consumers (KeyTiles: the causal/window band, dead bias tiles
//        skipped). Registers cut to 40 (24 at D64: producer_regs).
//   WG1, WG2 (consumers): 64 query rows each (m64 of wgmma). Per key tile j: S_j = Q·K_jᵀ
//        (m64n128k16, both operands K-major in shared memory) is issued, then O += P_{j-1}·V_{j-1}
//        (m64nDk16, P from registers, V read MN-major) behind it; while both run, the warpgroup
//        waits for S_j alone, releases K_j and does its mask/bias/online softmax (the same
//        per-element rules as the mma.sync forward). Then it waits for the P·V product, releases
//        V_{j-1}, rescales O and packs P_j into 16-bit A fragments. So the softmax of one tile overlaps
//        the tensor cores' work on two. O and LSE are written once at the end. With
//        FATTN_SM90_PINGPONG (tiles.h) the two warpgroups also take turns issuing their products
//        (named barriers 3 and 4: a warpgroup waits on its own, issues, then arrives on the
//        other's), so the tensor cores alternate between them.
// f32 inputs (T = float, tf32 wgmma m64nNk8): tf32 takes K-major operands only and truncates, so a
// pre-pass (sm90/fwd.cu) stages K rounded to tf32 and Vᵀ rounded, 8-key groups in the order of
// tf32_key_order (workspace.h), and the producer loads those instead of k and v; each consumer
// warpgroup rounds its own 64 rows of Q in shared memory, and P is rounded as it is packed. A
// panel row is 128 bytes in both cases: 64 16-bit or 32 f32 elements.
// Bias ceilings and LSE as in common.cuh. Row r of a consumer's accumulator tile: warp w of the
// warpgroup holds rows 16w + g and 16w + g + 8 (g = lane / 4), columns 8j + 2(lane % 4) + {0, 1}
// of each 8-column block j (the mma.sync C layout, repeated over N / 8 blocks).
#pragma once

#include <type_traits>  // std::true_type / false_type: the masked tiles' two copies

#include "cuda/attn/common.cuh"
#include "cuda/attn/mma.cuh"
#include "cuda/attn/sm90/ptx.cuh"
#include "cuda/attn/sm90/wgmma_ops.cuh"
#include "cuda/attn/sm90/wgmma_products.cuh"
#include "cuda/attn/tiles.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {

// TMA descriptors of one call (built on the host: sm90/fwd.cu), by value in parameter space.
struct Sm90Maps {
    CUtensorMap q, k, v;
};

namespace sm90cfg {  // tile shapes and their reasons: tiles.h (sm90_fwd_*)
constexpr int kBM = sm90_fwd_bm();
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
// Register split (128·P + 256·C <= 64K; the launch holds 168 a thread): measured on the H200
// (fattn-bench --preset targets-bf16, 2026-12-01): D64 runs 5-7% faster with 24/240 than with
// 40/232 although its producer then spills; D128 runs ~1% faster with 40/232 (its consumers
// hold S, the P fragments of the previous step and O at once, and spill 80 B there). tf32 at
// D128 holds less (64-key steps): 24/240.
constexpr int producer_regs(int d, size_t es) { return es == 2 && d > 64 ? 40 : 24; }
constexpr int consumer_regs(int d, size_t es) { return es == 2 && d > 64 ? 232 : 240; }
constexpr size_t panel_bytes(int rows) { return size_t(rows) * 128; }
constexpr size_t smem_bytes(int d, size_t es) { return sm90_fwd_smem(d, es); }
}  // namespace sm90cfg

// The producer side of a query-stationary kernel (the forward, dQ): warp 0 of warpgroup 0 loads
// the K and V tiles (BN keys, D/64 panels each) that kt walks into Stages-deep rings, waiting
// on a stage's empty barrier before it is refilled; consumers wait on fullK/fullV. K and V have
// their own empty barriers (the forward's pipeline frees K_j a step before V_j); the dQ kernel
// passes one barrier for both.
template <typename T, int D, int BN, int Stages>
__device__ __forceinline__ void sm90_produce_kv(const KeyTiles &kt, const SeqRange &sr, int64_t hk, const Sm90Maps &maps,
                                                T *sK, T *sV, uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK,
                                                uint64_t *emptyV, int lane) {
    using namespace sm90;
    constexpr size_t kStageElems = size_t(BN) * D;
    int it = 0;
    for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1), ++it) {
        const int st = it % Stages;
        const uint32_t ph = ((it / Stages) - 1) & 1;
        const int row = int(sr.kv_begin + int64_t(n) * BN);
        auto load = [&](T *s, const CUtensorMap *map, uint64_t *full, uint64_t *empty) {
            if (it >= Stages) mbar_wait(&empty[st], ph);
            if (lane == 0) {
                mbar_arrive_expect_tx(&full[st], uint32_t(BN * D * sizeof(T)));
                for (int pn = 0; pn < D / 64; ++pn)
                    tma_load_4d(s + st * kStageElems + pn * BN * 64, map, &full[st], pn * 64, row, int(hk),
                                int(sr.batch_index));
            }
        };
        load(sK, &maps.k, fullK, emptyK);
        load(sV, &maps.v, fullV, emptyV);
        __syncwarp();
    }
}

// Four f32 values rounded to tf32 (cvt.rna, as the pre-pass rounds: wgmma would truncate).
__device__ __forceinline__ float4 round4_tf32(float4 x) {
    x.x = __uint_as_float(to_tf32(x.x));
    x.y = __uint_as_float(to_tf32(x.y));
    x.z = __uint_as_float(to_tf32(x.z));
    x.w = __uint_as_float(to_tf32(x.w));
    return x;
}
// Warps 1-3 of a producer warpgroup (96 threads) round n floats of a landed ring stage in place
// (element-wise: the swizzle is moot); the caller then fences (the consumers' wgmma read them
// through the async proxy) and arrives on the stage's ready barrier (the dK/dV and dQ kernels).
// FATTN_SM90_TF32_ROUND=0 (tiles.h): no rounding, a measurement build.
__device__ __forceinline__ void sm90_round_stage_tf32(float *x, int n) {
    float4 *v = reinterpret_cast<float4 *>(x);
    if constexpr (FATTN_SM90_TF32_ROUND != 0)
        for (int i = int(threadIdx.x) - 32; i < n / 4; i += 96) v[i] = round4_tf32(v[i]);
}
// tf32 consumers: round warpgroup cw's 64 rows of a [BM, NP·32] f32 tile (NP panels of [BM, 32];
// the rows are contiguous in each panel, and the swizzle only moves 16-byte chunks within a row).
template <int NP, int BM>
__device__ __forceinline__ void sm90_round_rows_tf32(float *tile, int cw) {
#pragma unroll
    for (int pn = 0; pn < NP; ++pn) {
        float4 *rows = reinterpret_cast<float4 *>(tile + pn * BM * 32 + cw * 64 * 32);
#pragma unroll
        for (int i = threadIdx.x % 128; i < 64 * 32 / 4; i += 128) rows[i] = round4_tf32(rows[i]);
    }
}
// Whether a kernel's masked tiles come in two copies, with bias reads and without (the forward,
// dQ and dK/dV kernels' `masked` lambdas). tf32: yes, a tile with no bias to read then loads and
// converts nothing (f32 HOT-Step sites without a bias, S 625–3000: 10–20% faster fwd+bwd on the
// H200). 16-bit: one copy, because there the second copy's registers made the unmasked tiles
// slower (bf16 D64 S4096 fwd+bwd 7.24 → 8.16 ms, D128 4.66 → 4.89; docs/EXPERIMENTS.md, 2026-12-02).
template <typename T>
__device__ constexpr bool sm90_split_masked() { return sizeof(T) == 4; }
// K-step kk of an accumulator (its columns are the next product's k) as a wgmma A fragment.
// 16-bit: blocks 2kk (a0, a1) and 2kk + 1 (a2, a3) as pairs. tf32: block kk; a0..a3 = (g, t),
// (g + 8, t), (g, t + 4), (g + 8, t + 4) in the fragment's k-columns, which the B operand's copy
// maps to this thread's columns 2t, 2t, 2t + 1, 2t + 1 by storing each 8-group in tf32_key_order
// (workspace.h): no shuffles. Used for P (forward), dS (dQ), Pᵀ and dSᵀ (dK/dV).
template <typename T, int N>
__device__ __forceinline__ void sm90_a_frag(const float (&acc)[N], int kk, uint32_t (&a)[4]) {
    if constexpr (sizeof(T) == 4) {
        a[0] = to_tf32(acc[4 * kk]);
        a[1] = to_tf32(acc[4 * kk + 2]);
        a[2] = to_tf32(acc[4 * kk + 1]);
        a[3] = to_tf32(acc[4 * kk + 3]);
    } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = pack2<T>(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
    }
}

// After a warpgroup's generic-proxy writes to shared memory, before its wgmma (async proxy) read
// them: each thread's fence, then the warpgroup's named barrier (id 1 + cw).
__device__ __forceinline__ void sm90_rows_written(int cw) {
    sm90::fence_proxy_async_smem();
    sm90::named_barrier_sync(1 + cw, 128);
}

// The tf32 producer: K tiles from the rounded copy kr (maps.k: [Hkv, R, D], D/32 panels of
// [BN, 32]) and Vᵀ tiles from vt (maps.v: [Hkv, D, vt_cols], BN/32 panels of [D, 32 keys]).
template <int D, int BN, int Stages>
__device__ __forceinline__ void sm90_produce_kvt(const KeyTiles &kt, const SeqRange &sr, int64_t s, int64_t total_kv,
                                                 int64_t hk, const Sm90Maps &maps, float *sK, float *sV,
                                                 uint64_t *fullK, uint64_t *fullV, uint64_t *emptyK, uint64_t *emptyV,
                                                 int lane) {
    using namespace sm90;
    constexpr size_t kStageElems = size_t(BN) * D;
    const int64_t flat0 = sr.batch_index * total_kv + sr.kv_begin;
    const int64_t col0 = sm90_vt_col0(flat0, s);
    int it = 0;
    for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1), ++it) {
        const int st = it % Stages;
        const uint32_t ph = ((it / Stages) - 1) & 1;
        if (it >= Stages) mbar_wait(&emptyK[st], ph);
        if (lane == 0) {
            mbar_arrive_expect_tx(&fullK[st], uint32_t(BN * D * 4));
            for (int pn = 0; pn < D / 32; ++pn)
                tma_load_4d(sK + st * kStageElems + pn * BN * 32, &maps.k, &fullK[st], pn * 32,
                            int(flat0 + int64_t(n) * BN), int(hk), 0);
        }
        if (it >= Stages) mbar_wait(&emptyV[st], ph);
        if (lane == 0) {
            mbar_arrive_expect_tx(&fullV[st], uint32_t(BN * D * 4));
            for (int pn = 0; pn < BN / 32; ++pn)
                tma_load_4d(sV + st * kStageElems + pn * D * 32, &maps.v, &fullV[st],
                            int(col0 + int64_t(n) * BN + pn * 32), 0, int(hk), 0);
        }
        __syncwarp();
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(sm90cfg::kThreads, 1)
    sm90_fwd_kernel(const AttnFwdParams p, const KArgs a, const __grid_constant__ Sm90Maps maps) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || !defined(__CUDACC__)
    using namespace sm90cfg;
    using namespace sm90;
    constexpr bool kTf32 = sizeof(T) == 4;
    constexpr int kBN = sm90_fwd_bn(D, sizeof(T)), kStages = sm90_fwd_stages(D, sizeof(T));
    constexpr int PC = 128 / int(sizeof(T));  // elements per 128-byte panel row
    constexpr int KS = kTf32 ? 8 : 16;        // k of one wgmma (32 bytes of a panel row)
    constexpr int NP = D / PC;                // panels per Q/K tile row
    constexpr int NS = kBN / 8;               // 8-column blocks of S
    // Key pairs per batch of bias loads in masked tiles (1 at 16-bit D128, where 4 spilled 156 B).
    constexpr int kBiasBatch = sizeof(T) == 2 && D > 64 ? 1 : (NS < 4 ? NS : 4);
    constexpr int NO = D / 8;                 // 8-column blocks of O
    constexpr int NK = kBN / KS;              // k-steps of P·V (A fragments of P)
    FATTN_DYN_SMEM(smem_raw);
    unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    T *sQ = reinterpret_cast<T *>(base);                                   // NP × [kBM, PC]
    T *sK = reinterpret_cast<T *>(base + panel_bytes(kBM) * NP);           // kStages × NP × [kBN, PC]
    T *sV = reinterpret_cast<T *>(base + (panel_bytes(kBM) + kStages * panel_bytes(kBN)) * NP);  // V or Vᵀ
    uint64_t *bars = reinterpret_cast<uint64_t *>(base + (panel_bytes(kBM) + 2 * kStages * panel_bytes(kBN)) * NP);
    uint64_t *barQ = bars, *fullK = bars + 1, *fullV = fullK + kStages, *emptyK = fullV + kStages,
             *emptyV = emptyK + kStages;
    constexpr size_t kStageElems = size_t(kBN) * D;  // elements of one K (or V) stage

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32;
    const CtaTile cta = CtaTile::queries(p, kBM);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int64_t h = cta.head, lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1(), hk = h / p.group();

    mbar_init_query_pipeline<kStages, 2>(bars);  // emptyK, emptyV: one arrival per consumer warp

    if (wg == 0) {  // ---------------------------------------------------------------- producer
        regs_dealloc<producer_regs(D, sizeof(T))>();
        if (warp != 0) return;
        const KeyTiles kt(p, a, sr, h, m0, m1, kBN);
        if (lane == 0) {
            tma_prefetch_desc(&maps.q);
            tma_prefetch_desc(&maps.k);
            tma_prefetch_desc(&maps.v);
            mbar_arrive_expect_tx(barQ, uint32_t(kBM * D * sizeof(T)));
            for (int pn = 0; pn < NP; ++pn)
                tma_load_4d(sQ + pn * kBM * PC, &maps.q, barQ, pn * PC, int(sr.q_begin + m0), int(h), int(sr.batch_index));
        }
        if constexpr (kTf32)
            sm90_produce_kvt<D, kBN, kStages>(kt, sr, blockIdx.z, p.total_kv, hk, maps, sK, sV, fullK, fullV, emptyK,
                                              emptyV, lane);
        else
            sm90_produce_kv<T, D, kBN, kStages>(kt, sr, hk, maps, sK, sV, fullK, fullV, emptyK, emptyV, lane);
        return;
    }

    // -------------------------------------------------------------------------------- consumers
    regs_alloc<consumer_regs(D, sizeof(T))>();
    const int cw = wg - 1, wl = warp % 4, g = lane >> 2, t4 = lane & 3;
    const int64_t r0 = m0 + 64 * cw;  // this warpgroup's first row
    auto row_of = [&](int hf) { return r0 + 16 * wl + g + 8 * hf; };
    const KeyTiles kt(p, a, sr, h, m0, m1, kBN);
    const int64_t bb = seq_bias(p, sr, h);
    float cl[2];  // bias ceilings of this thread's two rows (common.cuh)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) cl[hf] = row_of(hf) < lq ? row_ceil(p, a, sr, h, row_of(hf)) : 0.f;
    const bool ceil_zero = __all_sync(0xffffffffu, cl[0] == 0.f && cl[1] == 0.f);

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    const float sl2 = p.scale * kLog2e;
    const uint32_t q_base = saddr(sQ) + uint32_t(cw * 64 * 128);  // this warpgroup's 64 rows of each panel

    // S = Q·K_nᵀ [64 rows, kBN keys] from stage st, issued and committed (not waited for).
    auto issue_s = [&](float (&s)[kBN / 2], int st) {
        const uint32_t k_base = saddr(sK + st * kStageElems);
        wgmma_fence();
        sm90_ss_product<T, D, kBN>(s, q_base, uint32_t(panel_bytes(kBM)), k_base, uint32_t(panel_bytes(kBN)));
        wgmma_commit();
    };
    // O += P·V [64 rows, D] from stage st. 16-bit: V is [kBN keys, D] in panels, an MN-major B
    // (keys = K). tf32: Vᵀ is [D, kBN keys] in panels of 32 keys, K-major like K in issue_s.
    auto issue_pv = [&](const uint32_t (&pa)[NK][4], int st) {
        const uint32_t v_base = saddr(sV + st * kStageElems);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) {
            if constexpr (kTf32) {
                const uint32_t off = uint32_t((kk % 4) * 32);
                const uint64_t db = desc_sw128(v_base + uint32_t(kk / 4) * uint32_t(panel_bytes(D)) + off, 16, 1024);
                Wgmma<T, D>::template rs<0>(o, pa[kk], db, 1);
            } else {
                const uint64_t db = desc_sw128(v_base + uint32_t(kk * 16 * 128), uint32_t(panel_bytes(kBN)), 1024);
                Wgmma<T, D>::template rs<1>(o, pa[kk], db, 1);
            }
        }
        wgmma_commit();
    };
    // Logits of key tile n in the log2 domain, masked to -inf; then the online softmax per row:
    // s becomes P, mrow/lrow move on, alpha[hf] is the factor O must still be rescaled by.
    auto softmax = [&](float (&s)[kBN / 2], int n, float (&alpha)[2]) {
        const int64_t n0 = int64_t(n) * kBN;
        const bool full = tile_full(p, r0, r0 + 64, n0, n0 + kBN, lq, lkv);
        const bool use_bias = p.bias && kt.state(n) == kBiasRead;
        if (full && !use_bias && ceil_zero) {
#pragma unroll
            for (int i = 0; i < kBN / 2; ++i) s[i] *= sl2;
        } else {
            // Masked tiles. kBiasBatch key pairs at a time: their bias loads are issued before the
            // first is used (common.cuh: load_bias_bits). tf32: in two copies, with bias reads (kB)
            // and without, so that a tile without one loads and converts nothing (sm90_split_masked).
            auto masked = [&](auto with_bias) {
                constexpr bool kB = decltype(with_bias)::value;
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int64_t qi = row_of(hf);
                    int64_t lo, hi;
                    key_range(p, qi, lq, lkv, &lo, &hi);
                    if (qi >= lq) hi = -1;
                    const int64_t rb = bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin;
#pragma unroll
                    for (int j0 = 0; j0 < NS; j0 += kBiasBatch) {
                        uint32_t bv[kBiasBatch][2] = {};
                        if constexpr (kB) {
#pragma unroll
                            for (int jj = 0; jj < kBiasBatch; ++jj)
                                load_bias_pair_bits(p.bias, p.bias_dtype, a.bias_pair, use_bias && qi < lq, rb,
                                                    n0 + (j0 + jj) * 8 + 2 * t4, lkv, bv[jj]);
                        }
#pragma unroll
                        for (int jj = 0; jj < kBiasBatch; ++jj)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int j = j0 + jj;
                                const int64_t kj = n0 + j * 8 + 2 * t4 + e;
                                const bool ok = full || (kj < lkv && kj >= lo && kj <= hi);
                                const float b = kB ? bias_from_bits(bv[jj][e], p.bias_dtype) : 0.f;
                                const float x = s[4 * j + 2 * hf + e] * sl2 + (b - cl[hf]) * kLog2e;
                                s[4 * j + 2 * hf + e] = ok ? x : -INFINITY;
                            }
                    }
                }
            };
            if (!sm90_split_masked<T>() || use_bias) masked(std::true_type{});
            else masked(std::false_type{});
        }
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
            mx = quad_max(mx);
            const float mnew = fmaxf(mrow[hf], mx);
            const float bse = mnew == -INFINITY ? 0.f : mnew;  // fully masked so far: p = 0, no NaN
            alpha[hf] = fast_exp2(mrow[hf] - bse);
            mrow[hf] = mnew;
            float ps = 0.f;
#pragma unroll
            for (int j = 0; j < NS; ++j) {
                s[4 * j + 2 * hf] = fast_exp2(s[4 * j + 2 * hf] - bse);
                s[4 * j + 2 * hf + 1] = fast_exp2(s[4 * j + 2 * hf + 1] - bse);
                ps += s[4 * j + 2 * hf] + s[4 * j + 2 * hf + 1];
            }
            lrow[hf] = lrow[hf] * alpha[hf] + ps;  // per-thread partial; the quad is summed at the end
        }
    };
    auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int j = 0; j < NO; ++j) {
                o[4 * j + 2 * hf] *= alpha[hf];
                o[4 * j + 2 * hf + 1] *= alpha[hf];
            }
    };
    // P as A fragments (sm90_a_frag; tf32: in Vᵀ's key order).
    auto pack_p = [&](const float (&s)[kBN / 2], uint32_t (&pa)[NK][4]) {
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) sm90_a_frag<T>(s, kk, pa[kk]);
    };

    // FATTN_SM90_PINGPONG: the turns. Both warpgroups walk the same key tiles, so each takes the
    // same number of turns; warpgroup 0 goes first (warpgroup 1 arrives on its barrier once), and
    // warpgroup 1 does not hand over after its last turn, so every barrier phase completes.
    constexpr bool kPing = FATTN_SM90_PINGPONG != 0;
    auto turn_begin = [&] {
        if constexpr (kPing) named_barrier_sync(3 + cw, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (kPing)
            if (!(last && cw == 1)) named_barrier_arrive(4 - cw, 256);
    };

    // The pipeline: S_j is issued before O += P_{j-1}·V_{j-1}, and the softmax of S_j runs while
    // the P·V product is still on the tensor cores (wgmma groups complete in commit order, so
    // wait<1> is S_j alone). O is rescaled only after that product has landed.
    mbar_wait(barQ, 0);
    if constexpr (kTf32) {
        sm90_round_rows_tf32<NP, kBM>(reinterpret_cast<float *>(sQ), cw);
        sm90_rows_written(cw);
    }
    float s[kBN / 2];
    uint32_t pa[NK][4];
    float alpha[2];
    int n = kt.next(kt.first), it = 0, prev = 0;
    if (n <= kt.last) {
        if (kPing && cw == 1) named_barrier_arrive(3, 256);
        mbar_wait(&fullK[0], 0);
        turn_begin();
        issue_s(s, 0);
        turn_end(false);
        wgmma_wait<0>();
        reg_fence(s);
        mbar_arrive_warp(&emptyK[0]);
        softmax(s, n, alpha);  // O is still 0: nothing to rescale
        pack_p(s, pa);
        for (n = kt.next(n + 1), it = 1; n <= kt.last; n = kt.next(n + 1), ++it) {
            const int st = it % kStages;
            mbar_wait(&fullK[st], (it / kStages) & 1);
            turn_begin();
            issue_s(s, st);
            mbar_wait(&fullV[prev], ((it - 1) / kStages) & 1);
            issue_pv(pa, prev);
            turn_end(false);
            wgmma_wait<1>();
            reg_fence(s);
            mbar_arrive_warp(&emptyK[st]);
            softmax(s, n, alpha);
            wgmma_wait<0>();
            reg_fence(o);
            reg_fence(pa);
            mbar_arrive_warp(&emptyV[prev]);
            rescale_o(alpha);
            pack_p(s, pa);
            prev = st;
        }
        mbar_wait(&fullV[prev], ((it - 1) / kStages) & 1);
        turn_begin();
        issue_pv(pa, prev);
        turn_end(true);
        wgmma_wait<0>();
        reg_fence(o);
        mbar_arrive_warp(&emptyV[prev]);
    }

    // O = acc / l and LSE = ceiling + lse', written once (rows past the sequence: nothing).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const float l = quad_sum(lrow[hf]);
        const int64_t qi = row_of(hf);
        if (qi >= lq) continue;
        const float inv = l != 0.f ? 1.f / l : 0.f;  // l = 0: no key; NaN l (a +inf or NaN score) stays NaN
        T *gO = static_cast<T *>(p.o) + sr.batch_index * p.o_sb + (sr.q_begin + qi) * p.o_ss + h * p.o_sh;
#pragma unroll
        for (int j = 0; j < NO; ++j) {
            const int c = j * 8 + 2 * t4;
            if (c < p.dim_v) gO[c] = from_f<T>(o[4 * j + 2 * hf] * inv);  // head dims below the bucket: TMA
            if (c + 1 < p.dim_v) gO[c + 1] = from_f<T>(o[4 * j + 2 * hf + 1] * inv);  // read zeros past them
        }
        if (t4 == 0)
            p.lse[sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + qi] =
                l != 0.f ? cl[hf] + (mrow[hf] + log2f(l)) * kLn2 : -INFINITY;
    }
#endif
}

}  // namespace fattn::cuda::attn
