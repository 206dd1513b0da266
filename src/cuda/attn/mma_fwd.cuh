// mma_fwd.cuh — tensor-core forward (prec NATIVE: bf16/f16 m16n8k16; prec TF32: f32 inputs on
// m16n8k8), FlashAttention-2 style, one body for both through the fragment policy MmaOp<T>.
// One CTA per (query tile, q head, sequence), 16 query rows per warp (tiles.h: 8 warps for
// bf16/f16, 4 for tf32). K/V tiles of 64 keys
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
    constexpr int NT = 32 * mma_fwd_warps(sizeof(T));
    constexpr int BM = mma_fwd_bm(sizeof(T)), BN = mma_fwd_bn(sizeof(T)), ST = mma_stride(DB, sizeof(T));
    constexpr int NS = BN / 8, NO = DB / 8, KD = DB / MmaOp<T>::K;
    using Op = MmaOp<T>;
    extern __shared__ __align__(16) unsigned char mma_smem[];
    T *sQ = reinterpret_cast<T *>(mma_smem);  // [BM, ST]
    T *sK = sQ + BM * ST;                     // [2][BN, ST]
    T *sV = sK + 2 * BN * ST;                 // [2][BN, ST]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int64_t h = blockIdx.y;
    const SeqRange sr = seq_range(p, blockIdx.z);
    const int64_t lq = sr.q_len, lkv = sr.kv_len;
    const int64_t m0 = int64_t(blockIdx.x) * BM;
    if (m0 >= lq) return;
    const int64_t m1 = m0 + BM < lq ? m0 + BM : lq;
    const int64_t hk = h / p.group();
    const T *gQ = static_cast<const T *>(p.q) + sr.batch_index * p.q_sb + sr.q_begin * p.q_ss + h * p.q_sh;
    const T *gK = static_cast<const T *>(p.k) + sr.batch_index * p.k_sb + sr.kv_begin * p.k_ss + hk * p.k_sh;
    const T *gV = static_cast<const T *>(p.v) + sr.batch_index * p.v_sb + sr.kv_begin * p.v_ss + hk * p.v_sh;
    const int64_t bb = sr.batch_index * p.bias_sb + h * p.bias_sh;
    const int64_t mb = p.bias_sb ? sr.batch_index : 0, mh = p.bias_sh ? h : 0;

    int64_t n_first, n_last;
    key_tiles(p, m0, m1, lq, lkv, BN, &n_first, &n_last);
    auto next_tile = [&](int64_t n) {
        while (n <= n_last) {
            const int64_t n0 = n * BN, n1 = n0 + BN < lkv ? n0 + BN : lkv;
            if (!bias_tile_dead(a, mb, mh, sr.q_begin + m0, sr.q_begin + m1, sr.kv_begin + n0, sr.kv_begin + n1))
                break;
            ++n;
        }
        return n;
    };
    auto load_kv = [&](int64_t n, int buf) {
        const int64_t n0 = n * BN;
        mma_load_tile<T, BN, DB, NT>(sK + buf * BN * ST, gK + n0 * p.k_ss, p.k_ss, lkv - n0, p.d, a.vec);
        mma_load_tile<T, BN, DB, NT>(sV + buf * BN * ST, gV + n0 * p.v_ss, p.v_ss, lkv - n0, p.dim_v, a.vec);
    };

    mma_load_tile<T, BM, DB, NT>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, a.vec);
    int64_t n = next_tile(n_first);
    if (n <= n_last) load_kv(n, 0);
    cp_async_commit();

    // This thread's two query rows (g and g + 8 of the warp's 16) and their allowed key ranges.
    const int64_t qi[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};
    int64_t lo[2], hi[2];
    key_range(p, qi[0], lq, lkv, &lo[0], &hi[0]);
    key_range(p, qi[1], lq, lkv, &lo[1], &hi[1]);

    float o[NO][4];
#pragma unroll
    for (int d = 0; d < NO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    const float sl2 = p.scale * kLog2e;
    int buf = 0;
    while (n <= n_last) {
        const int64_t nn = next_tile(n + 1);
        if (nn <= n_last) load_kv(nn, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const T *cK = sK + buf * BN * ST, *cV = sV + buf * BN * ST;

        // S = Q·Kᵀ  [16 rows per warp, BN]
        float s[NS][4];
#pragma unroll
        for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t aq[4];
            Op::template load_a<ST>(aq, sQ, warp * 16, kk * Op::K, lane);
#pragma unroll
            for (int j2 = 0; j2 < NS / 2; ++j2) {
                uint32_t b[4];
                Op::template load_b2<ST>(b, cK, j2 * 16, kk * Op::K, lane);
                Op::mma(s[2 * j2], aq, b[0], b[1]);
                Op::mma(s[2 * j2 + 1], aq, b[2], b[3]);
            }
        }

        // logits in the log2 domain, masked to -inf; then the online softmax per row.
        const int64_t n0 = n * BN;
        // Interior tiles without a bias (the common case) take one multiply per element; the
        // per-element mask and bias cost issue slots the mma pipe would otherwise get.
        const bool full = tile_full(p, m0, m0 + BM, n0, n0 + BN, lq, lkv);
        if (full && !p.bias) {
#pragma unroll
            for (int j = 0; j < NS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[j][e] *= sl2;
        } else {
#pragma unroll
            for (int j = 0; j < NS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = e >> 1;
                    const int64_t kj = n0 + j * 8 + 2 * t4 + (e & 1);
                    const bool ok = full || (qi[r] < lq && kj < lkv && kj >= lo[r] && kj <= hi[r]);
                    float x = s[j][e] * sl2;
                    if (ok && p.bias)
                        x += load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + qi[r]) * p.bias_si + sr.kv_begin + kj) * kLog2e;
                    s[j][e] = ok ? x : -INFINITY;
                }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mnew = fmaxf(mrow[r], mx);
            const float base = mnew == -INFINITY ? 0.f : mnew;  // fully masked so far: p = 0, no NaN
            const float alpha = fast_exp2(mrow[r] - base);
            mrow[r] = mnew;
            float ps = 0.f;
#pragma unroll
            for (int j = 0; j < NS; ++j) {
                s[j][2 * r] = fast_exp2(s[j][2 * r] - base);
                s[j][2 * r + 1] = fast_exp2(s[j][2 * r + 1] - base);
                ps += s[j][2 * r] + s[j][2 * r + 1];
            }
            lrow[r] = lrow[r] * alpha + ps;  // per-thread partial; the quad is summed at the end
#pragma unroll
            for (int d = 0; d < NO; ++d) {
                o[d][2 * r] *= alpha;
                o[d][2 * r + 1] *= alpha;
            }
        }

        // O += P·V, P straight from the S registers.
#pragma unroll
        for (int kk = 0; kk < BN / Op::K; ++kk) {
            uint32_t ap[4];
            Op::a_from_acc(ap, s, kk, lane);
#pragma unroll
            for (int d2 = 0; d2 < NO / 2; ++d2) {
                uint32_t b[4];
                Op::template load_bt2<ST>(b, cV, kk * Op::K, d2 * 16, lane);
                Op::mma(o[2 * d2], ap, b[0], b[1]);
                Op::mma(o[2 * d2 + 1], ap, b[2], b[3]);
            }
        }
        __syncthreads();  // the next iteration's prefetch overwrites this buffer
        n = nn;
        buf ^= 1;
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (qi[r] >= lq) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        T *gO = static_cast<T *>(p.o) + sr.batch_index * p.o_sb + (sr.q_begin + qi[r]) * p.o_ss + h * p.o_sh;
#pragma unroll
        for (int d = 0; d < NO; ++d) {
            const int c = d * 8 + 2 * t4;
            if (c < p.dim_v) gO[c] = from_f<T>(o[d][2 * r] * inv);
            if (c + 1 < p.dim_v) gO[c + 1] = from_f<T>(o[d][2 * r + 1] * inv);
        }
        if (t4 == 0)
            p.lse[sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + qi[r]] =
                l > 0.f ? (mrow[r] + log2f(l)) * kLn2 : -INFINITY;
    }
}

}  // namespace fattn::cuda::attn
