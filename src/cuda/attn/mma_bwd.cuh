// mma_bwd.cuh — tensor-core backward (prec NATIVE bf16/f16 and prec TF32, one body through
// MmaOp<T>) without floating-point atomics.
//
// Why two kernels instead of FlashAttention-2's single pass with atomicAdd on dQ: FA2's dQ is a
// sum over key tiles accumulated by many CTAs in arrival order, so its bits change run to run.
// Here every output has exactly one owner that sums in a fixed order:
//   dK/dV: a CTA owns (64-key tile, kv head, sequence; at head-dim bucket 256 also one half of
//          the output columns) and loops over the query heads of its GQA group, then over the
//          query tiles, in that order (GQA reduced inside the kernel, K/V never expanded);
//   dQ:    a CTA owns (query tile, q head, sequence) and loops over the key tiles in order,
//          recomputing P from the saved LSE and dP = dO·Vᵀ.
// The price is recomputing S and dP in the dQ kernel (7 GEMM-sized products instead of 5); the
// gain is bitwise determinism by construction and no dQ accumulation buffer (memory stays linear).
// δ = rowsum(dO∘O) comes from a small preprocess kernel (prep.cuh). The bias gradient has its own
// kernel (mma_dbias_kernel, at the end).
#pragma once

#include "cuda/attn/mma.cuh"

namespace fattn::cuda::attn {

// The helpers below are the dQ kernel's steps, shared with the bias-gradient kernel (one source
// for P and dS: after the portable backward, dbias is the gradient of exactly its P). A thread holds
// rows row_of(r), r = 2t + half of its m-tile t, and keys n0 + j·8 + 2·t4 + {0, 1}.

// lse2 = the row's LSE in log2 units (-inf: no row, or fully masked) and dl = its δ.
template <int MT, class RowOf>
__device__ __forceinline__ void bwd_row_stats(float (&lse2)[2 * MT], float (&dl)[2 * MT], RowOf row_of,
                                              const AttnBwdParams &p, const KArgs &a, const SeqRange &sr,
                                              int64_t h, int64_t lq) {
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int64_t qi = row_of(r);
        lse2[r] = -INFINITY;
        dl[r] = 0.f;
        if (qi < lq) {
            // -inf marks a fully masked row; a finite LSE whose log2 would overflow (a padding
            // row at finfo.min) is clamped: such a row only meets read bias tiles, which use lse'.
            const float l = row_lse(p, sr, h, qi);
            lse2[r] = l == -INFINITY ? -INFINITY : fmaxf(l * kLog2e, -FLT_MAX);
            dl[r] = a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + qi];
        }
    }
}

// S = Q·Kᵀ and dP = dO·Vᵀ for this warp's MT m-tiles against NS n8-tiles of keys (tiles in shared
// memory, row stride ST); each K/V fragment feeds MT m-tiles.
template <typename T, int DB, int MT, int NS, int NW, int ST>
__device__ __forceinline__ void bwd_s_dp(float (&s)[MT][NS][4], float (&dp)[MT][NS][4], const T *sQ, const T *sdO,
                                         const T *cK, const T *cV, int warp, int lane) {
    using Op = MmaOp<T>;
    constexpr int KD = DB / Op::K;
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[t][j][e] = dp[t][j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
        uint32_t aq[MT][4], ad[MT][4];
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            Op::template load_a<ST>(aq[t], sQ, (t * NW + warp) * 16, kk * Op::K, lane);
            Op::template load_a<ST>(ad[t], sdO, (t * NW + warp) * 16, kk * Op::K, lane);
        }
#pragma unroll
        for (int j2 = 0; j2 < NS / 2; ++j2) {
            uint32_t b[4];
            Op::template load_b2<ST>(b, cK, j2 * 16, kk * Op::K, lane);
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                Op::mma(s[t][2 * j2], aq[t], b[0], b[1]);
                Op::mma(s[t][2 * j2 + 1], aq[t], b[2], b[3]);
            }
            Op::template load_b2<ST>(b, cV, j2 * 16, kk * Op::K, lane);
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                Op::mma(dp[t][2 * j2], ad[t], b[0], b[1]);
                Op::mma(dp[t][2 * j2 + 1], ad[t], b[2], b[3]);
            }
        }
    }
}

// P = exp2(logit·log2e − lse·log2e) (0 where masked or the row is fully masked); dS = P ∘ (dP − δ),
// into s. Keys [n0, n0 + 8·NS) of the rows [m0, m0 + bm): full = tile_full of that rectangle,
// use_bias = the tile reads the bias (kBiasRead); lq, lkv the sequence's lengths, bb = seq_bias,
// sl2 = scale·log2e.
template <int MT, int NS, class RowOf>
__device__ __forceinline__ void bwd_ds(float (&s)[MT][NS][4], const float (&dp)[MT][NS][4], const float (&lse2)[2 * MT],
                                       const float (&dl)[2 * MT], RowOf row_of, const AttnBwdParams &p, const KArgs &a,
                                       const SeqRange &sr, int64_t h, int64_t lq, int64_t lkv, int64_t bb, float sl2,
                                       int64_t n0, bool full, bool use_bias, int t4) {
    if (full && !use_bias) {  // interior tile: every row has keys, so lse is finite
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int j = 0; j < NS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 2 * t + (e >> 1);
                    s[t][j][e] = fast_exp2(s[t][j][e] * sl2 - lse2[r]) * (dp[t][j][e] - dl[r]);
                }
        return;
    }
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int t = r >> 1, e0 = 2 * (r & 1);
        const int64_t qi = row_of(r);
        int64_t lo, hi;
        key_range(p, qi, lq, lkv, &lo, &hi);
        if (qi >= lq || lse2[r] == -INFINITY) hi = -1;  // no row, or a fully masked one
        const int64_t rb = bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin;
        // A read bias enters relative to the row's ceiling, against lse' (common.cuh).
        float c = 0.f, l2 = lse2[r];
        if (use_bias && hi >= 0) c = row_ceil(p, a, sr, h, qi), l2 = row_lse_rel(p, a, sr, h, qi) * kLog2e;
#pragma unroll
        for (int j = 0; j < NS; ++j) {
            const int64_t kj0 = n0 + j * 8 + 2 * t4;
            float bv[2];
            load_bias_pair(p.bias, p.bias_dtype, a.bias_pair, use_bias && hi >= 0, rb, kj0, lkv, bv);
#pragma unroll
            for (int e = e0; e < e0 + 2; ++e) {
                const int64_t kj = kj0 + (e & 1);
                const bool ok = (full && hi >= 0) || (kj < lkv && kj >= lo && kj <= hi);
                const float x = s[t][j][e] * sl2 + (bv[e & 1] - c) * kLog2e;
                const float pr = ok ? fast_exp2(x - l2) : 0.f;
                s[t][j][e] = pr * (dp[t][j][e] - dl[r]);
            }
        }
    }
}

template <typename T, int DB>
__global__ void __launch_bounds__(32 * mma_fwd_warps(sizeof(T))) mma_dq_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int NW = mma_fwd_warps(sizeof(T)), NT = 32 * NW, MT = mma_dq_mt(DB, sizeof(T));
    constexpr int BM = mma_dq_bm(DB, sizeof(T)), BN = mma_dq_bn(DB, sizeof(T)), ST = mma_stride(DB, sizeof(T));
    constexpr int NS = BN / 8, NO = DB / 8;
    using Op = MmaOp<T>;
    FATTN_DYN_SMEM(mma_smem);
    T *sQ = reinterpret_cast<T *>(mma_smem);  // [BM, ST]
    T *sdO = sQ + BM * ST;                    // [BM, ST]
    T *sK = sdO + BM * ST;                    // [2][BN, ST]
    T *sV = sK + 2 * BN * ST;                 // [2][BN, ST]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const CtaTile cta = CtaTile::queries(p, BM);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int64_t h = cta.head, lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1(), hk = h / p.group();
    const T *gQ = seq_q<T>(p, sr, h);
    const T *gdO = seq_dout<T>(p, sr, h);
    const T *gK = seq_k<T>(p, sr, hk);
    const T *gV = seq_v<T>(p, sr, hk);

    const int64_t bb = seq_bias(p, sr, h);

    const KeyTiles kt(p, a, sr, h, m0, m1, BN);
    const int n_last = kt.last;
    auto load_kv = [&](int n, int buf) {
        const int64_t n0 = int64_t(n) * BN;
        mma_load_tile<T, BN, DB, NT>(sK + buf * BN * ST, gK + n0 * p.k_ss, p.k_ss, lkv - n0, p.d, a.vec);
        mma_load_tile<T, BN, DB, NT>(sV + buf * BN * ST, gV + n0 * p.v_ss, p.v_ss, lkv - n0, p.dim_v, a.vec);
    };

    mma_load_tile<T, BM, DB, NT>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, a.vec);
    mma_load_tile<T, BM, DB, NT>(sdO, gdO + m0 * p.do_ss, p.do_ss, m1 - m0, p.dim_v, a.vec);
    int n = kt.next(kt.first);
    if (n <= n_last) load_kv(n, 0);
    cp_async_commit();

    // Rows as in the forward: m-tile t of this warp is rows (t·NW + warp)·16; index r = 2t + half.
    auto row_of = [&](int r) { return m0 + ((r >> 1) * NW + warp) * 16 + g + (r & 1) * 8; };
    float lse2[2 * MT], dl[2 * MT];
    bwd_row_stats<MT>(lse2, dl, row_of, p, a, sr, h, lq);

    float dq[MT][NO][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int d = 0; d < NO; ++d) dq[t][d][0] = dq[t][d][1] = dq[t][d][2] = dq[t][d][3] = 0.f;
    const float sl2 = p.scale * kLog2e;
    int buf = 0;
    while (n <= n_last) {
        const int nn = kt.next(n + 1);
        if (nn <= n_last) load_kv(nn, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const T *cK = sK + buf * BN * ST, *cV = sV + buf * BN * ST;

        float s[MT][NS][4], dp[MT][NS][4];
        bwd_s_dp<T, DB, MT, NS, NW, ST>(s, dp, sQ, sdO, cK, cV, warp, lane);
        const int64_t n0 = int64_t(n) * BN;
        const bool full = tile_full(p, m0, m0 + BM, n0, n0 + BN, lq, lkv);
        bwd_ds<MT, NS>(s, dp, lse2, dl, row_of, p, a, sr, h, lq, lkv, bb, sl2, n0, full,
                       p.bias && kt.state(n) == kBiasRead, t4);
        // dQ += dS·K (K read transposed: k = key, n = head dim); each K fragment feeds MT m-tiles.
#pragma unroll
        for (int kk = 0; kk < BN / Op::K; ++kk) {
            uint32_t as[MT][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) Op::a_from_acc(as[t], s[t], kk, lane);
#pragma unroll
            for (int d2 = 0; d2 < NO / 2; ++d2) {
                uint32_t b[4];
                Op::template load_bt2<ST>(b, cK, kk * Op::K, d2 * 16, lane);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    Op::mma(dq[t][2 * d2], as[t], b[0], b[1]);
                    Op::mma(dq[t][2 * d2 + 1], as[t], b[2], b[3]);
                }
            }
        }
        __syncthreads();
        n = nn;
        buf ^= 1;
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int t = r >> 1, rr = r & 1;
        const int64_t qi = row_of(r);
        if (qi >= lq) continue;
        T *gdQ = static_cast<T *>(p.dq) + sr.batch_index * p.dq_sb + (sr.q_begin + qi) * p.dq_ss + h * p.dq_sh;
#pragma unroll
        for (int d = 0; d < NO; ++d) {
            const int c = d * 8 + 2 * t4;
            if (c < p.d) gdQ[c] = from_f<T>(dq[t][d][2 * rr] * p.scale);
            if (c + 1 < p.d) gdQ[c + 1] = from_f<T>(dq[t][d][2 * rr + 1] * p.scale);
        }
    }
}

template <typename T, int DB>
__global__ void __launch_bounds__(128) mma_dkdv_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int NT = mma_threads();
    constexpr int BN = mma_bwd_bn(), BM = mma_bwd_bm(DB, sizeof(T)), ST = mma_stride(DB, sizeof(T));
    // DC output columns of dK and dV per CTA (all DB but at bucket 256: tiles.h)
    constexpr int DC = mma_dkdv_cols(DB), NSPLIT = mma_dkdv_splits(DB);
    constexpr int NQ = BM / 8, NO = DC / 8, KD = DB / MmaOp<T>::K;
    using Op = MmaOp<T>;
    FATTN_DYN_SMEM(mma_smem);
    T *sK = reinterpret_cast<T *>(mma_smem);  // [BN, ST]
    T *sV = sK + BN * ST;                     // [BN, ST]
    T *sQ = sV + BN * ST;                     // [2][BM, ST]
    T *sdO = sQ + 2 * BM * ST;                // [2][BM, ST]
    float *sL = reinterpret_cast<float *>(sdO + 2 * BM * ST);  // [2][BM] lse (natural log; -inf: masked row)
    float *sD = sL + 2 * BM;                                   // [2][BM] delta

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const CtaTile cta = CtaTile::keys(p, BN, NSPLIT);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int64_t hk = cta.head, lq = cta.lq, lkv = cta.lkv, n0 = cta.r0, n1 = cta.r1();
    const int c0 = NSPLIT > 1 ? int(blockIdx.x % NSPLIT) * DC : 0;  // this CTA's output columns
    const T *gK = seq_k<T>(p, sr, hk);
    const T *gV = seq_v<T>(p, sr, hk);
    // Work items in the fixed order (head of the group, query tile), trimmed to live ones.
    const QueryItems qi(p, a, sr, hk, n0, n1, BM);
    auto load_q = [&](int idx, int buf) {
        const int64_t h = qi.head(idx), m0 = qi.row0(idx);
        const T *gQ = seq_q<T>(p, sr, h) + m0 * p.q_ss;
        const T *gdO = seq_dout<T>(p, sr, h) + m0 * p.do_ss;
        mma_load_tile<T, BM, DB, NT>(sQ + buf * BM * ST, gQ, p.q_ss, lq - m0, p.d, a.vec);
        mma_load_tile<T, BM, DB, NT>(sdO + buf * BM * ST, gdO, p.do_ss, lq - m0, p.dim_v, a.vec);
        // lse and δ of the tile's rows ride the same cp.async group (zero past the sequence end,
        // where the masked path never reads them): a plain load here stalled warp 0 for a full
        // L2 round trip every item, and the CTA with it at the next barrier.
        for (int c = threadIdx.x; c < BM; c += NT) {
            const int64_t i = m0 + c;
            const bool ok = i < lq;
            const float *l = p.lse + sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + (ok ? i : 0);
            const float *d = a.delta + (sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + (ok ? i : 0);
            cp_async4(smem_u32(sL + buf * BM + c), l, ok ? 4 : 0);
            cp_async4(smem_u32(sD + buf * BM + c), d, ok ? 4 : 0);
        }
    };

    mma_load_tile<T, BN, DB, NT>(sK, gK + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, a.vec);
    mma_load_tile<T, BN, DB, NT>(sV, gV + n0 * p.v_ss, p.v_ss, n1 - n0, p.dim_v, a.vec);
    int idx = qi.next(qi.first);
    if (idx <= qi.last) load_q(idx, 0);
    cp_async_commit();

    const int64_t kj[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};  // this thread's key rows
    float dk[NO][4], dv[NO][4];
#pragma unroll
    for (int d = 0; d < NO; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.f;
    const float sl2 = p.scale * kLog2e;
    int buf = 0;
    while (idx <= qi.last) {
        const int nidx = qi.next(idx + 1);
        if (nidx <= qi.last) load_q(nidx, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const T *cQ = sQ + buf * BM * ST, *cdO = sdO + buf * BM * ST;
        const float *cL = sL + buf * BM, *cD = sD + buf * BM;
        const int64_t h = qi.head(idx), m0 = qi.row0(idx);
        const int64_t bb = seq_bias(p, sr, h);

        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ  [16 key rows per warp, BM queries]
        float st[NQ][4], dpt[NQ][4];
#pragma unroll
        for (int j = 0; j < NQ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t ak[4], av[4];
            Op::template load_a<ST>(ak, sK, warp * 16, kk * Op::K, lane);
            Op::template load_a<ST>(av, sV, warp * 16, kk * Op::K, lane);
#pragma unroll
            for (int j2 = 0; j2 < NQ / 2; ++j2) {
                uint32_t b[4];
                Op::template load_b2<ST>(b, cQ, j2 * 16, kk * Op::K, lane);
                Op::mma(st[2 * j2], ak, b[0], b[1]);
                Op::mma(st[2 * j2 + 1], ak, b[2], b[3]);
                Op::template load_b2<ST>(b, cdO, j2 * 16, kk * Op::K, lane);
                Op::mma(dpt[2 * j2], av, b[0], b[1]);
                Op::mma(dpt[2 * j2 + 1], av, b[2], b[3]);
            }
        }
        // Pᵀ into st, dSᵀ = Pᵀ ∘ (dPᵀ − δ) into dpt.
        const bool full = tile_full(p, m0, m0 + BM, n0, n0 + BN, lq, lkv);
        const bool use_bias = p.bias && qi.state(idx) == kBiasRead;
        if (full && !use_bias) {  // interior tile: every query row has keys, so lse is finite
#pragma unroll
            for (int j = 0; j < NQ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int c = j * 8 + 2 * t4 + (e & 1);
                    const float pr = fast_exp2(st[j][e] * sl2 - cL[c] * kLog2e);
                    st[j][e] = pr;
                    dpt[j][e] = pr * (dpt[j][e] - cD[c]);
                }
        } else
#pragma unroll
        for (int j = 0; j < NQ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1, c = j * 8 + 2 * t4 + (e & 1);
                const int64_t qi = m0 + c;
                bool ok = full;
                if (!ok && qi < lq && kj[r] < lkv) {
                    int64_t lo, hi;
                    key_range(p, qi, lq, lkv, &lo, &hi);
                    ok = kj[r] >= lo && kj[r] <= hi;
                }
                ok = ok && cL[c] != -INFINITY;
                float x = st[j][e] * sl2, l2 = cL[c] * kLog2e;
                if (ok && use_bias) {  // relative to the row's ceiling, against lse' (common.cuh)
                    const float bv = load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin + kj[r]);
                    x += (bv - row_ceil(p, a, sr, h, qi)) * kLog2e;
                    l2 = row_lse_rel(p, a, sr, h, qi) * kLog2e;
                }
                const float pr = ok ? fast_exp2(x - l2) : 0.f;
                st[j][e] = pr;
                dpt[j][e] = pr * (dpt[j][e] - cD[c]);
            }
        // dV += Pᵀ·dO and dK += dSᵀ·Q (dO, Q read transposed: k = query, n = head dim).
#pragma unroll
        for (int kk = 0; kk < BM / Op::K; ++kk) {
            uint32_t ap[4];
            Op::a_from_acc(ap, st, kk, lane);
            uint32_t as[4];
            Op::a_from_acc(as, dpt, kk, lane);
#pragma unroll
            for (int d2 = 0; d2 < NO / 2; ++d2) {
                uint32_t b[4];
                Op::template load_bt2<ST>(b, cdO, kk * Op::K, c0 + d2 * 16, lane);
                Op::mma(dv[2 * d2], ap, b[0], b[1]);
                Op::mma(dv[2 * d2 + 1], ap, b[2], b[3]);
                Op::template load_bt2<ST>(b, cQ, kk * Op::K, c0 + d2 * 16, lane);
                Op::mma(dk[2 * d2], as, b[0], b[1]);
                Op::mma(dk[2 * d2 + 1], as, b[2], b[3]);
            }
        }
        __syncthreads();
        idx = nidx;
        buf ^= 1;
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (kj[r] >= lkv) continue;
        T *gdK = static_cast<T *>(p.dk) + sr.batch_index * p.dk_sb + (sr.kv_begin + kj[r]) * p.dk_ss + hk * p.dk_sh;
        T *gdV = static_cast<T *>(p.dv) + sr.batch_index * p.dv_sb + (sr.kv_begin + kj[r]) * p.dv_ss + hk * p.dv_sh;
#pragma unroll
        for (int d = 0; d < NO; ++d) {
            const int c = c0 + d * 8 + 2 * t4;
            if (c < p.d) gdK[c] = from_f<T>(dk[d][2 * r] * p.scale);
            if (c + 1 < p.d) gdK[c + 1] = from_f<T>(dk[d][2 * r + 1] * p.scale);
            if (c < p.dim_v) gdV[c] = from_f<T>(dv[d][2 * r]);
            if (c + 1 < p.dim_v) gdV[c + 1] = from_f<T>(dv[d][2 * r + 1]);
        }
    }
}

// The bias gradient: dbias = dS summed over the bias's broadcast dims (AttnBwdParams::dbias), in a
// fixed order, without atomics and without a workspace. A CTA owns one piece of dbias and sums
// every contribution to it itself, recomputing S and dP (bwd_s_dp, bwd_ds: the dQ kernel's P).
// Which piece and which contributions: DbiasTile (common.cuh), with tiles of 64 rows × BN keys
// (BN = 64; 32 for tf32 at head-dim bucket 256, tiles.h).
// Order: sequences, then heads, then query tiles, each tile's dS added elementwise to the CTA's
// accumulators; with dbias_si == 0 the 64 rows are then summed (the two rows of a thread, a xor
// tree over the 8 row groups of a warp, the 4 warps in order). Tiles no row may see (masks) or
// whose bias is all -inf add nothing; an element no tile reaches is written as 0. The exact-zero
// property of dead tiles makes skipping them exact. Varlen: entries between two sequences are
// zeroed by the launch sequence first (dbias_zero_kernel).
// The kernel's grid (x, y, z), host side: DbiasTile's (common.cuh).
inline void mma_dbias_grid(const AttnBwdParams &p, int db, size_t es, int64_t (&grid)[3]) {
    dbias_grid(p, mma_dbias_bm(), mma_dbias_bn(db, es), grid);
}

template <typename T, int DB>
__global__ void __launch_bounds__(128) mma_dbias_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int NW = 4, NT = 32 * NW, BM = mma_dbias_bm(), BN = mma_dbias_bn(DB, sizeof(T));
    constexpr int ST = mma_stride(DB, sizeof(T));
    constexpr int NS = BN / 8;
    static_assert(BM == 16 * NW, "one m-tile per warp");
    FATTN_DYN_SMEM(mma_smem);
    T *sQ = reinterpret_cast<T *>(mma_smem);  // [BM, ST]
    T *sdO = sQ + BM * ST;                    // [BM, ST]
    T *sK = sdO + BM * ST;                    // [BN, ST]
    T *sV = sK + BN * ST;                     // [BN, ST]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const DbiasTile dt(p, BM, BN);
    if (dt.past_end()) return;
    const int64_t n0 = dt.n0;

    float acc[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const float sl2 = p.scale * kLog2e;
    dt.for_each_contribution(p, a, [&](const SeqRange &sr, int64_t h, int64_t m0, int64_t m1, int st, bool first) {
        const int64_t lq = sr.q_len, lkv = sr.kv_len, hk = h / p.group();
        if (first) {
            mma_load_tile<T, BN, DB, NT>(sK, seq_k<T>(p, sr, hk) + n0 * p.k_ss, p.k_ss, lkv - n0, p.d, a.vec);
            mma_load_tile<T, BN, DB, NT>(sV, seq_v<T>(p, sr, hk) + n0 * p.v_ss, p.v_ss, lkv - n0, p.dim_v, a.vec);
        }
        mma_load_tile<T, BM, DB, NT>(sQ, seq_q<T>(p, sr, h) + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, a.vec);
        mma_load_tile<T, BM, DB, NT>(sdO, seq_dout<T>(p, sr, h) + m0 * p.do_ss, p.do_ss, m1 - m0, p.dim_v, a.vec);
        cp_async_commit();
        auto row_of = [&](int r) { return m0 + warp * 16 + g + (r & 1) * 8; };
        float lse2[2], dl[2];
        bwd_row_stats<1>(lse2, dl, row_of, p, a, sr, h, lq);
        cp_async_wait<0>();
        __syncthreads();
        float sc[1][NS][4], dp[1][NS][4];
        bwd_s_dp<T, DB, 1, NS, NW, ST>(sc, dp, sQ, sdO, sK, sV, warp, lane);
        const bool full = tile_full(p, m0, m0 + BM, n0, n0 + BN, lq, lkv);
        bwd_ds<1, NS>(sc, dp, lse2, dl, row_of, p, a, sr, h, lq, lkv, seq_bias(p, sr, h), sl2, n0, full,
                      st == kBiasRead, t4);
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] += sc[0][j][e];
        __syncthreads();  // the next tile's loads overwrite shared memory
    });

    float *out = dt.out(p);
    if (!dt.sum_rows) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int64_t qi = dt.mt * BM + warp * 16 + g + r * 8;
            if (qi >= dt.sr0.q_len) continue;
            float *row = out + qi * p.dbias_si;
#pragma unroll
            for (int j = 0; j < NS; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int c = j * 8 + 2 * t4 + e;
                    if (n0 + c < dt.sr0.kv_len) row[c] = acc[j][2 * r + e];
                }
        }
        return;
    }
    // Sum over the rows: a thread's two rows, then the 8 row groups of the warp (xor over lane bits
    // 2-4: partners add the same two values, so every lane ends with the same bits), then the warps.
    float *red = reinterpret_cast<float *>(mma_smem);  // [NW][BN]
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float v = acc[j][e] + acc[j][2 + e];
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (g == 0) red[warp * BN + j * 8 + 2 * t4 + e] = v;
        }
    __syncthreads();
    for (int c = threadIdx.x; c < BN; c += NT) {
        float v = red[c];
#pragma unroll
        for (int w = 1; w < NW; ++w) v += red[w * BN + c];
        if (n0 + c < dt.sr0.kv_len) out[c] = v;
    }
}

}  // namespace fattn::cuda::attn
