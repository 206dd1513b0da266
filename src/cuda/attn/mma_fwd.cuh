// mma_fwd.cuh — tensor-core forward (prec NATIVE: bf16/f16 m16n8k16; prec TF32: f32 inputs on
// m16n8k8), FlashAttention-2 style, one body for both through the fragment policy MmaOp<T>.
// One CTA per (query tile, q head, sequence) of 4 warps; each warp owns MT 16-row m-tiles
// (tiles.h: MT = 2, except tf32 at D128), so every K/V fragment feeds MT mma. K/V tiles
// stream through shared memory with cp.async double buffering (the next tile is in flight while
// the current one is multiplied); S = Q·Kᵀ and the online softmax stay in registers in the exp2
// domain; P is re-packed from the S accumulators into A fragments for P·V; O and LSE (natural
// log) are written once at the end. Key tiles outside the causal/window band are never visited
// (key_tiles), tiles whose bias is all -inf are skipped (bias tile map), and only tiles that cross
// the band's edge or the sequence end pay for the per-element mask.
#pragma once

#include "cuda/attn/mma.cuh"

namespace fattn::cuda::attn {

template <typename T, int DB>
__global__ void __launch_bounds__(32 * mma_fwd_warps(sizeof(T))) mma_fwd_kernel(const AttnFwdParams p, const KArgs a) {
    constexpr int NW = mma_fwd_warps(sizeof(T)), NT = 32 * NW, MT = mma_fwd_mt(DB, sizeof(T));
    constexpr int BM = mma_fwd_bm(DB, sizeof(T)), BN = mma_fwd_bn(DB, sizeof(T)), ST = mma_stride(DB, sizeof(T));
    constexpr int NS = BN / 8, NO = DB / 8, KD = DB / MmaOp<T>::K;
    using Op = MmaOp<T>;
    FATTN_DYN_SMEM(mma_smem);
    T *sQ = reinterpret_cast<T *>(mma_smem);  // [BM, ST]
    T *sK = sQ + BM * ST;                     // [2][BN, ST]
    T *sV = sK + 2 * BN * ST;                 // [2][BN, ST]
    float *sC = reinterpret_cast<float *>(sV + 2 * BN * ST);  // [BM] bias ceilings of the rows

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const CtaTile cta = CtaTile::queries(p, BM);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int64_t h = cta.head, lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1(), hk = h / p.group();
    const T *gQ = seq_q<T>(p, sr, h);
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
    // Every row's bias ceiling is 0 (no bias, or a 0/-inf mask): unread tiles take the fast path;
    // otherwise they go through the per-element path, which subtracts the ceiling (common.cuh).
    // Stats mode (bwd): only tiles with a row whose ceiling is large run (common.cuh).
    int nz = 0, big = 0;
    for (int i = threadIdx.x; i < BM; i += NT) {
        const float c = m0 + i < m1 ? row_ceil(p, a, sr, h, m0 + i) : 0.f;
        sC[i] = c;
        nz |= c != 0.f;
        big |= !(fabsf(c) <= kCeilExact);
    }
    const bool ceil_zero = !__syncthreads_or(nz);  // also orders sC for every thread
    if (a.stats && !__syncthreads_or(big)) return;

    mma_load_tile<T, BM, DB, NT>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, a.vec);
    int n = kt.next(kt.first);
    if (n <= n_last) load_kv(n, 0);
    cp_async_commit();

    // M-tile t of this warp is rows (t·NW + warp)·16 of the CTA's tile; this thread holds rows g
    // and g + 8 of each (index r = 2t + half). Their key ranges are computed where a tile needs
    // them (the masked path), which keeps 16 registers free in the main loop.
    auto row_of = [&](int r) { return m0 + ((r >> 1) * NW + warp) * 16 + g + (r & 1) * 8; };

    float o[MT][NO][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int d = 0; d < NO; ++d) o[t][d][0] = o[t][d][1] = o[t][d][2] = o[t][d][3] = 0.f;
    float mrow[2 * MT], lrow[2 * MT];
#pragma unroll
    for (int i = 0; i < 2 * MT; ++i) mrow[i] = -INFINITY, lrow[i] = 0.f;
    const float sl2 = p.scale * kLog2e;
    int buf = 0;
    while (n <= n_last) {
        const int nn = kt.next(n + 1);
        if (nn <= n_last) load_kv(nn, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const T *cK = sK + buf * BN * ST, *cV = sV + buf * BN * ST;

        // S = Q·Kᵀ  [MT × 16 rows per warp, BN]; each K fragment feeds MT m-tiles.
        float s[MT][NS][4];
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int j = 0; j < NS; ++j) s[t][j][0] = s[t][j][1] = s[t][j][2] = s[t][j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t aq[MT][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) Op::template load_a<ST>(aq[t], sQ, (t * NW + warp) * 16, kk * Op::K, lane);
#pragma unroll
            for (int j2 = 0; j2 < NS / 2; ++j2) {
                uint32_t b[4];
                Op::template load_b2<ST>(b, cK, j2 * 16, kk * Op::K, lane);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    Op::mma(s[t][2 * j2], aq[t], b[0], b[1]);
                    Op::mma(s[t][2 * j2 + 1], aq[t], b[2], b[3]);
                }
            }
        }

        // logits in the log2 domain, masked to -inf; then the online softmax per row.
        const int64_t n0 = int64_t(n) * BN;
        // Interior tiles whose bias is absent or all zero (the common case) take one multiply
        // per element; the per-element mask and bias cost issue slots the mma pipe would get.
        const bool full = tile_full(p, m0, m0 + BM, n0, n0 + BN, lq, lkv);
        const bool use_bias = p.bias && kt.state(n) == kBiasRead;
        if (full && !use_bias && ceil_zero) {
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[t][j][e] *= sl2;
        } else {
#pragma unroll
            for (int r = 0; r < 2 * MT; ++r) {
                const int t = r >> 1, e0 = 2 * (r & 1);
                const int64_t qi = row_of(r);
                int64_t lo, hi;
                key_range(p, qi, lq, lkv, &lo, &hi);
                if (qi >= lq) hi = -1;  // a row past the sequence sees nothing
                const int64_t rb = bb + (sr.q_begin + qi) * p.bias_si + sr.kv_begin;
                const float c = sC[qi - m0];
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    const int64_t kj0 = n0 + j * 8 + 2 * t4;
                    float bv[2];
                    load_bias_pair(p.bias, p.bias_dtype, a.bias_pair, use_bias && qi < lq, rb, kj0, lkv, bv);
#pragma unroll
                    for (int e = e0; e < e0 + 2; ++e) {
                        const int64_t kj = kj0 + (e & 1);
                        const bool ok = full || (kj < lkv && kj >= lo && kj <= hi);
                        const float x = s[t][j][e] * sl2 + (bv[e & 1] - c) * kLog2e;
                        s[t][j][e] = ok ? x : -INFINITY;
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const int r = 2 * t + rr;
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[t][j][2 * rr], s[t][j][2 * rr + 1]));
                mx = quad_max(mx);
                const float mnew = fmaxf(mrow[r], mx);
                const float base = mnew == -INFINITY ? 0.f : mnew;  // fully masked so far: p = 0, no NaN
                const float alpha = fast_exp2(mrow[r] - base);
                mrow[r] = mnew;
                float ps = 0.f;
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    s[t][j][2 * rr] = fast_exp2(s[t][j][2 * rr] - base);
                    s[t][j][2 * rr + 1] = fast_exp2(s[t][j][2 * rr + 1] - base);
                    ps += s[t][j][2 * rr] + s[t][j][2 * rr + 1];
                }
                lrow[r] = lrow[r] * alpha + ps;  // per-thread partial; the quad is summed at the end
#pragma unroll
                for (int d = 0; d < NO; ++d) {
                    o[t][d][2 * rr] *= alpha;
                    o[t][d][2 * rr + 1] *= alpha;
                }
            }

        // O += P·V, P straight from the S registers; each V fragment feeds MT m-tiles.
#pragma unroll
        for (int kk = 0; kk < BN / Op::K; ++kk) {
            uint32_t ap[MT][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) Op::a_from_acc(ap[t], s[t], kk, lane);
#pragma unroll
            for (int d2 = 0; d2 < NO / 2; ++d2) {
                uint32_t b[4];
                Op::template load_bt2<ST>(b, cV, kk * Op::K, d2 * 16, lane);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    Op::mma(o[t][2 * d2], ap[t], b[0], b[1]);
                    Op::mma(o[t][2 * d2 + 1], ap[t], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the next iteration's prefetch overwrites this buffer
        n = nn;
        buf ^= 1;
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
        const int t = r >> 1, rr = r & 1;
        const float l = quad_sum(lrow[r]);
        const int64_t qi = row_of(r);
        if (qi >= lq) continue;
        const float inv = l != 0.f ? 1.f / l : 0.f;  // l = 0: no key; NaN l (a +inf or NaN score) stays NaN
        if (!a.stats) {
            T *gO = static_cast<T *>(p.o) + sr.batch_index * p.o_sb + (sr.q_begin + qi) * p.o_ss + h * p.o_sh;
#pragma unroll
            for (int d = 0; d < NO; ++d) {
                const int c = d * 8 + 2 * t4;
                if (c < p.dim_v) gO[c] = from_f<T>(o[t][d][2 * rr] * inv);
                if (c + 1 < p.dim_v) gO[c + 1] = from_f<T>(o[t][d][2 * rr + 1] * inv);
            }
        }
        if (t4 == 0) {  // LSE = ceiling + lse'; stats mode: lse' alone
            const float lse_rel = l != 0.f ? (mrow[r] + log2f(l)) * kLn2 : -INFINITY;
            if (a.stats) a.stats[stats_at(p, sr, h, qi)] = lse_rel;
            else p.lse[sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + qi] = l != 0.f ? sC[qi - m0] + lse_rel : -INFINITY;
        }
    }
}

}  // namespace fattn::cuda::attn
