// bwd_dq_kernel.cuh — the sm_90a dQ kernel of the deterministic backward (bf16/f16, or f32 inputs
// on tf32; D 64/128; 16-bit D 256 with FATTN_SM90_D256: 32-key steps).
//
// Query-stationary, like the portable dQ kernel (mma_bwd.cuh): one CTA per (128-row query tile,
// q head, sequence) loops over the key tiles in order and owns its rows' dQ (a fixed-order sum:
// deterministic without atomics, at the price of recomputing S and dP — 7 products instead of 5).
// The forward's warp roles (fwd_kernel.cuh): the producer loads Q and dO once and 64-key K/V
// tiles into a 2-stage ring; each consumer warpgroup (64 rows) computes S = Q·Kᵀ and
// dP = dO·Vᵀ (m64n64k16, K-major operands), P = exp(S − lse) and dS = P∘(dP − δ) per row in
// registers, then dQ += dS·K (m64nDk16, dS as A fragments from registers, K read MN-major).
// f32 inputs (T = float, tf32 m64nNk8): K and V rows come from k and v in place, rounded to tf32
// in shared memory by warps 1-3 of the producer warpgroup once a stage lands (readyK / readyV:
// the consumers wait on those), and dQ's B operand from the pre-pass's rounded Kᵀ copy, 8-key
// groups in tf32_key_order (stage_tf32.cu), all three per stage; each consumer warpgroup rounds
// its own rows of Q and dO in shared memory; dS is packed as tf32 A fragments as the forward
// packs P.
#pragma once

#include "cuda/attn/sm90/fwd_kernel.cuh"

namespace fattn::cuda::attn {

namespace sm90dq {  // tile shapes and their reasons: tiles.h (sm90_dq_*)
constexpr int kBM = sm90_dq_bm();  // query rows per CTA (two consumer warpgroups × 64)
constexpr int bn(int d, size_t es = 2) { return sm90_dq_bn(d, es); }
constexpr int stages(int d, size_t es = 2) { return sm90_dq_stages(d, es); }
constexpr int kThreads = 384;
// Register split (128·P + 256·C <= 64K): 24/240 measured ~1% faster than 40/232 at D64 and the
// same at D128 (H200, fattn-bench --preset targets-bf16, 2026-12-01).
// tf32: 40/232, since the producer warpgroup also rounds the K and V stages (24/240 spilled 188 B).
constexpr int producer_regs(size_t es) { return es == 4 ? 40 : 24; }
constexpr int consumer_regs(size_t es) { return es == 4 ? 232 : 240; }
constexpr size_t panel(int rows) { return size_t(rows) * 128; }
constexpr size_t dq_smem(int d, size_t es = 2) { return sm90_dq_smem(d, es); }
}  // namespace sm90dq

// tm_kt: the Kᵀ copy's tensor map (tf32 only; unused by the 16-bit instances).
template <typename T, int D>
__global__ void __launch_bounds__(sm90dq::kThreads, 1)
    sm90_dq_kernel(const AttnBwdParams p, const KArgs a, const __grid_constant__ Sm90Maps maps,
                   const __grid_constant__ CUtensorMap tm_do, const __grid_constant__ CUtensorMap tm_kt) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || !defined(__CUDACC__)
    using namespace sm90dq;
    using namespace sm90;
    constexpr bool kTf32 = sizeof(T) == 4;
    constexpr int kBN = bn(D, sizeof(T)), kStages = stages(D, sizeof(T));
    constexpr int PC = 128 / int(sizeof(T));  // elements per 128-byte panel row
    constexpr int KS = kTf32 ? 8 : 16;        // k of one wgmma (32 bytes of a panel row)
    constexpr int NP = D / PC, NS = kBN / 8, NO = D / 8, NK = kBN / KS;
    constexpr int kBiasBatch = NS < 4 ? NS : 4;  // key pairs per batch of bias loads (masked tiles)
    FATTN_DYN_SMEM(smem_raw);
    unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    T *sQ = reinterpret_cast<T *>(base);                        // NP × [kBM, PC]
    T *sdO = reinterpret_cast<T *>(base + panel(kBM) * NP);     // NP × [kBM, PC]
    T *sK = reinterpret_cast<T *>(base + 2 * panel(kBM) * NP);  // kStages × NP × [kBN, PC]
    T *sV = reinterpret_cast<T *>(base + (2 * panel(kBM) + kStages * panel(kBN)) * NP);
    // tf32: kStages × kBN/32 × [D, 32 keys] (Kᵀ); the 16-bit kernel reads K MN-major instead.
    T *sKt = reinterpret_cast<T *>(base + (2 * panel(kBM) + 2 * kStages * panel(kBN)) * NP);
    uint64_t *bars = reinterpret_cast<uint64_t *>(base + (2 * panel(kBM) + (kTf32 ? 3 : 2) * kStages * panel(kBN)) * NP);
    uint64_t *barQ = bars, *fullK = bars + 1, *fullV = fullK + kStages, *empty = fullV + kStages;
    uint64_t *readyK = empty + kStages, *readyV = readyK + kStages;  // tf32: a stage's K, V rounded
    constexpr size_t kStageElems = size_t(kBN) * D;

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32;
    const CtaTile cta = CtaTile::queries(p, kBM);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    // tf32: a pass of kv heads from a.kv_head0 on (bwd.cu): query heads from a.kv_head0 · group, the
    // staged Kᵀ counting kv heads from a.kv_head0 (q, k, v and dO are read in place).
    const int64_t hb = kTf32 ? a.kv_head0 : 0;
    const int64_t h = cta.head + hb * p.group(), lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1(), hk = h / p.group();
    // tf32: how many key tiles the rounding warps wait for (counted here, so that their loop holds
    // no tile state)
    const int nsteps = kTf32 ? walk_count(KeyTiles(p, a, sr, h, m0, m1, kBN)) : 0;

    if (kTf32 && tid == 0)
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&readyK[s], 3);  // one arrival per rounding warp
            mbar_init(&readyV[s], 3);
        }
    mbar_init_query_pipeline<kStages, 1>(bars);  // (fences the inits and syncs the CTA)

    if (wg == 0) {  // ---------------------------------------------------------------- producer
        regs_dealloc<producer_regs(sizeof(T))>();
        if constexpr (kTf32) {
            if (warp != 0) {  // warps 1-3: each landed stage's K and V rows to tf32, in place
                for (int it = 0; it < nsteps; ++it) {
                    const int st = it % kStages;
                    const uint32_t ph = (it / kStages) & 1;
                    for (int t = 0; t < 2; ++t) {
                        mbar_wait(t == 0 ? &fullK[st] : &fullV[st], ph);
                        sm90_round_stage_tf32((t == 0 ? sK : sV) + st * kStageElems, int(kStageElems));
                        fence_proxy_async_smem();  // the consumers' wgmma read them through the async proxy
                        mbar_arrive_warp(t == 0 ? &readyK[st] : &readyV[st]);
                    }
                }
                return;
            }
        }
        if (warp != 0) return;
        const KeyTiles kt(p, a, sr, h, m0, m1, kBN);
        if (lane == 0) {
            mbar_arrive_expect_tx(barQ, uint32_t(2 * kBM * D * sizeof(T)));
            for (int pn = 0; pn < NP; ++pn) {
                tma_load_4d(sQ + pn * kBM * PC, &maps.q, barQ, pn * PC, int(sr.q_begin + m0), int(h), int(sr.batch_index));
                tma_load_4d(sdO + pn * kBM * PC, &tm_do, barQ, pn * PC, int(sr.q_begin + m0), int(h), int(sr.batch_index));
            }
        }
        if constexpr (kTf32) {  // K, V rows in place; Kᵀ from kt ([Hkv pass heads, D, cols]) with V (fullV)
            const int64_t flat0 = sr.batch_index * p.total_kv + sr.kv_begin, col0 = sm90_vt_col0(flat0, blockIdx.z);
            int it = 0;
            for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1), ++it) {
                const int st = it % kStages;
                if (it >= kStages) mbar_wait(&empty[st], ((it / kStages) - 1) & 1);
                if (lane == 0) {
                    const int row = int(sr.kv_begin + int64_t(n) * kBN), col = int(col0 + int64_t(n) * kBN);
                    mbar_arrive_expect_tx(&fullK[st], uint32_t(kBN * D * 4));
                    for (int pn = 0; pn < NP; ++pn)
                        tma_load_4d(sK + st * kStageElems + pn * kBN * 32, &maps.k, &fullK[st], pn * 32, row, int(hk),
                                    int(sr.batch_index));
                    mbar_arrive_expect_tx(&fullV[st], uint32_t(2 * kBN * D * 4));
                    for (int pn = 0; pn < NP; ++pn)
                        tma_load_4d(sV + st * kStageElems + pn * kBN * 32, &maps.v, &fullV[st], pn * 32, row, int(hk),
                                    int(sr.batch_index));
                    for (int pn = 0; pn < kBN / 32; ++pn)
                        tma_load_4d(sKt + st * kStageElems + pn * D * 32, &tm_kt, &fullV[st], col + pn * 32, 0, int(hk - hb), 0);
                }
                __syncwarp();
            }
        } else {
            sm90_produce_kv<T, D, kBN, kStages>(kt, sr, hk, maps, sK, sV, fullK, fullV, empty, empty, lane);
        }
        return;
    }

    // -------------------------------------------------------------------------------- consumers
    regs_alloc<consumer_regs(sizeof(T))>();
    const int cw = wg - 1, wl = warp % 4, g = lane >> 2, t4 = lane & 3;
    const int64_t r0 = m0 + 64 * cw;
    auto row_of = [&](int hf) { return r0 + 16 * wl + g + 8 * hf; };
    const KeyTiles kt(p, a, sr, h, m0, m1, kBN);
    const int64_t bb = seq_bias(p, sr, h);
    // Per row: log2-domain LSE (public; clamped as in mma_bwd.cuh), lse' and ceiling, δ.
    float lse2[2], lr2[2], cl[2], dl[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int64_t qi = row_of(hf);
        lse2[hf] = -INFINITY, lr2[hf] = -INFINITY, cl[hf] = 0.f, dl[hf] = 0.f;
        if (qi < lq) {
            const float l = row_lse(p, sr, h, qi);
            lse2[hf] = l == -INFINITY ? -INFINITY : fmaxf(l * kLog2e, -FLT_MAX);
            lr2[hf] = row_lse_rel(p, a, sr, h, qi) * kLog2e;
            cl[hf] = row_ceil(p, a, sr, h, qi);
            dl[hf] = a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + qi];
        }
    }
    float dq[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq[i] = 0.f;
    const float sl2 = p.scale * kLog2e;
    const uint32_t q_base = saddr(sQ) + uint32_t(cw * 64 * 128), do_base = saddr(sdO) + uint32_t(cw * 64 * 128);

    mbar_wait(barQ, 0);
    if constexpr (kTf32) {
        sm90_round_rows_tf32<NP, kBM>(reinterpret_cast<float *>(sQ), cw);
        sm90_round_rows_tf32<NP, kBM>(reinterpret_cast<float *>(sdO), cw);
        sm90_rows_written(cw);
    }
    int it = 0;
    for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1), ++it) {
        const int st = it % kStages;
        const uint32_t ph = (it / kStages) & 1;
        const uint32_t k_base = saddr(sK + st * kStageElems), v_base = saddr(sV + st * kStageElems);
        const uint32_t kt_base = saddr(sKt + st * kStageElems);
        // D256: Q's and dO's descriptors formed per step (opaque), not hoisted out of the loop: 2·D/16
        // of them live across it spilled (ptxas)
        const uint32_t qb = D > 128 ? opaque(q_base) : q_base, dob = D > 128 ? opaque(do_base) : do_base;
        float s[kBN / 2], dp[kBN / 2];
        mbar_wait(&fullK[st], ph);
        if constexpr (kTf32) mbar_wait(&readyK[st], ph);  // rounded by the producer's warps 1-3
        wgmma_fence();
        sm90_ss_product<T, D, kBN>(s, qb, uint32_t(panel(kBM)), k_base, uint32_t(panel(kBN)));
        wgmma_commit();
        mbar_wait(&fullV[st], ph);
        if constexpr (kTf32) mbar_wait(&readyV[st], ph);
        wgmma_fence();
        sm90_ss_product<T, D, kBN>(dp, dob, uint32_t(panel(kBM)), v_base, uint32_t(panel(kBN)));
        wgmma_commit();

        // P = exp2(logit·log2e − lse·log2e) (0 where masked or the row is fully masked); dS in s.
        // Interior tiles take P while dP is still running (wait<1>: S alone); the masked path
        // waits for both (its dS is 0 where masked, whatever dP holds).
        const int64_t n0 = int64_t(n) * kBN;
        const bool full = tile_full(p, r0, r0 + 64, n0, n0 + kBN, lq, lkv);  // uniform per warpgroup
        const bool use_bias = p.bias && kt.state(n) == kBiasRead;
        if (full && !use_bias) {
            wgmma_wait<1>();
            reg_fence(s);
#pragma unroll
            for (int i = 0; i < kBN / 2; ++i) s[i] = fast_exp2(s[i] * sl2 - lse2[(i >> 1) & 1]);
            wgmma_wait<0>();
            reg_fence(dp);
#pragma unroll
            for (int i = 0; i < kBN / 2; ++i) s[i] = s[i] * (dp[i] - dl[(i >> 1) & 1]);
        } else {
            wgmma_wait<0>();
            reg_fence(s);
            reg_fence(dp);
            // As the forward's masked tiles: kBiasBatch key pairs' bias loads issued before the
            // first is used; tf32: two copies, with bias reads (kB) and without (sm90_split_masked).
            auto masked = [&](auto with_bias) {
                constexpr bool kB = decltype(with_bias)::value;
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int64_t qi = row_of(hf);
                    int64_t lo, hi;
                    key_range(p, qi, lq, lkv, &lo, &hi);
                    if (qi >= lq || lse2[hf] == -INFINITY) hi = -1;
                    const int64_t rb = bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin;
                    const float c = kB && use_bias ? cl[hf] : 0.f, l2 = kB && use_bias ? lr2[hf] : lse2[hf];
#pragma unroll
                    for (int j0 = 0; j0 < NS; j0 += kBiasBatch) {
                        uint32_t bv[kBiasBatch][2] = {};
                        if constexpr (kB) {
#pragma unroll
                            for (int jj = 0; jj < kBiasBatch; ++jj)
                                load_bias_pair_bits(p.bias, p.bias_dtype, a.bias_pair, use_bias && hi >= 0, rb,
                                                    n0 + (j0 + jj) * 8 + 2 * t4, lkv, bv[jj]);
                        }
#pragma unroll
                        for (int jj = 0; jj < kBiasBatch; ++jj)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int j = j0 + jj;
                                const int64_t kj = n0 + j * 8 + 2 * t4 + e;
                                const int i = 4 * j + 2 * hf + e;
                                const bool ok = (full && hi >= 0) || (kj < lkv && kj >= lo && kj <= hi);
                                const float b = kB ? bias_from_bits(bv[jj][e], p.bias_dtype) : 0.f;
                                const float x = s[i] * sl2 + (b - c) * kLog2e;
                                s[i] = ok ? fast_exp2(x - l2) * (dp[i] - dl[hf]) : 0.f;
                            }
                    }
                }
            };
            if (!sm90_split_masked<T>() || use_bias) masked(std::true_type{});
            else masked(std::false_type{});
        }
        // dS as A fragments (sm90_a_frag; tf32: in Kᵀ's key order).
        uint32_t sa[NK][4];
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) sm90_a_frag<T>(s, kk, sa[kk]);

        // dQ += dS·K  [64 rows, D]. 16-bit: K read MN-major (keys = K); tf32: Kᵀ, K-major.
        wgmma_fence();
        sm90_rs_product<T, D>(dq, sa, kt_base, k_base, uint32_t(panel(kBN)));
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(dq);
        mbar_arrive_warp(&empty[st]);
    }

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int64_t qi = row_of(hf);
        if (qi >= lq) continue;
        T *gdQ = static_cast<T *>(p.dq) + sr.batch_index * p.dq_sb + (sr.q_begin + qi) * p.dq_ss + h * p.dq_sh;
#pragma unroll
        for (int j = 0; j < NO; ++j) {
            const int c = j * 8 + 2 * t4;
            if (c < p.d) gdQ[c] = from_f<T>(dq[4 * j + 2 * hf] * p.scale);  // head dims below the bucket
            if (c + 1 < p.d) gdQ[c + 1] = from_f<T>(dq[4 * j + 2 * hf + 1] * p.scale);
        }
    }
#endif
}

}  // namespace fattn::cuda::attn
