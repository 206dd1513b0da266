// scalar.cuh — strict-f32 fused attention kernels (prec F32): forward, dQ and dK/dV with plain
// fp32 FMA in a fixed order, any input dtype (converted to f32 on load), head dims up to 256,
// any sm_75+ GPU. Same tiling idea as the tensor-core kernels, kept simple: 16 rows per CTA,
// 8 threads per row, each thread owning DB/8 output columns (strided by 8 so that the 8 lanes of
// a row read consecutive shared-memory words).
//
// Backward scheme (shared with the tensor-core kernels, see mma_bwd.cuh): dK/dV are owned by a CTA
// per key tile that loops over query tiles and over the query heads of the GQA group in a fixed
// order; dQ is owned by a CTA per query tile that loops over key tiles. No atomics anywhere, so
// every output is a fixed-order sum: bitwise deterministic by construction.
#pragma once

#include <cmath>

#include "cuda/attn/common.cuh"
#include "cuda/attn/tiles.h"

namespace fattn::cuda::attn {

// Rows [r_begin, r_begin + ROWS) of a [*, S, H, D] view into shared floats, zero outside.
template <typename T, int ROWS, int ST>
__device__ __forceinline__ void sc_load_rows(float *s, const T *g, int64_t rstride, int64_t rows_valid,
                                             int64_t cols_valid, int cols) {
    for (int e = threadIdx.x; e < ROWS * cols; e += sc_threads()) {
        const int r = e / cols, c = e % cols;
        s[r * ST + c] = (r < rows_valid && c < cols_valid) ? to_f(g[r * rstride + c]) : 0.f;
    }
}

template <typename T, int DB>
__global__ void __launch_bounds__(128) sc_fwd_kernel(const AttnFwdParams p, const KArgs a) {
    constexpr int R = sc_rows(), C = sc_cols(DB), ST = sc_stride(DB), KC = C / 8, OC = DB / 8;
    FATTN_DYN_SMEM_F32(sc_smem);
    float *sQ = sc_smem;     // [R, ST]
    float *sKV = sQ + R * ST; // [C, ST]  K tile, then V tile
    float *sP = sKV + C * ST; // [R, C]

    const int tid = threadIdx.x, r = tid / 8, l8 = tid % 8;
    const CtaTile cta = CtaTile::queries(p, R);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int h = int(cta.head);
    const int64_t lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1();
    if (a.stats && !tile_needs_stats(p, a, sr, h, m0, m1)) return;
    const int64_t hk = h / p.group();
    const T *gQ = seq_q<T>(p, sr, h);
    const T *gK = seq_k<T>(p, sr, hk);
    const T *gV = seq_v<T>(p, sr, hk);
    const int64_t bb = seq_bias(p, sr, h);

    sc_load_rows<T, R, ST>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, DB);

    const int64_t i = m0 + r;
    int64_t lo, hi;
    key_range(p, i, lq, lkv, &lo, &hi);
    const float ceil = i < lq ? row_ceil(p, a, sr, h, i) : 0.f;  // bias ceiling (common.cuh)
    const KeyTiles kt(p, a, sr, h, m0, m1, C);

    float o[OC];
    for (int u = 0; u < OC; ++u) o[u] = 0.f;
    float m = -INFINITY, l = 0.f;
    for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1)) {
        const int64_t n0 = int64_t(n) * C, n1 = n0 + C < lkv ? n0 + C : lkv;
        __syncthreads();
        sc_load_rows<T, C, ST>(sKV, gK + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, DB);
        __syncthreads();
        float x[KC];
        float mx = -INFINITY;
        for (int k = 0; k < KC; ++k) {
            const int c = l8 + 8 * k;
            const int64_t j = n0 + c;
            float acc = 0.f;
            for (int e = 0; e < p.d; ++e) acc = fmaf(sQ[r * ST + e], sKV[c * ST + e], acc);
            const bool ok = i < lq && j < lkv && j >= lo && j <= hi;
            float t = acc * p.scale;
            if (ok && p.bias) t += load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + i) * p.bias_si + sr.kv_begin + j) - ceil;
            x[k] = ok ? t * kLog2e : -INFINITY;
            mx = fmaxf(mx, x[k]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        const float mnew = fmaxf(m, mx);
        const float base = mnew == -INFINITY ? 0.f : mnew;  // a fully masked row so far stays 0
        const float alpha = exp2f(m - base);
        m = mnew;
        float ps = 0.f;
        for (int k = 0; k < KC; ++k) {
            const float pk = exp2f(x[k] - base);
            sP[r * C + l8 + 8 * k] = pk;
            ps += pk;
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        ps += __shfl_xor_sync(0xffffffffu, ps, 4);
        l = l * alpha + ps;
        for (int u = 0; u < OC; ++u) o[u] *= alpha;
        __syncthreads();
        sc_load_rows<T, C, ST>(sKV, gV + n0 * p.v_ss, p.v_ss, n1 - n0, p.dim_v, DB);
        __syncthreads();
        for (int c = 0; c < C; ++c) {
            const float pc = sP[r * C + c];
            for (int u = 0; u < OC; ++u) o[u] = fmaf(pc, sKV[c * ST + l8 + 8 * u], o[u]);
        }
    }
    const float lse_rel = l != 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
    if (i < lq && a.stats) {  // stats mode: lse' only
        if (l8 == 0) a.stats[stats_at(p, sr, h, i)] = lse_rel;
    } else if (i < lq) {
        T *gO = static_cast<T *>(p.o) + sr.batch_index * p.o_sb + (sr.q_begin + i) * p.o_ss + h * p.o_sh;
        for (int u = 0; u < OC; ++u) {
            const int c = l8 + 8 * u;
            if (c < p.dim_v) gO[c] = from_f<T>(l != 0.f ? o[u] / l : 0.f);
        }
        if (l8 == 0)
            p.lse[sr.batch_index * p.lse_sb + h * p.lse_sh + sr.q_begin + i] = l != 0.f ? ceil + lse_rel : -INFINITY;
    }
}

// dQ: one CTA per (16 query rows, q head, sequence), loops over the key tiles in order.
template <typename T, int DB>
__global__ void __launch_bounds__(128) sc_dq_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int R = sc_rows(), C = sc_cols(DB), ST = sc_stride(DB), KC = C / 8, OC = DB / 8;
    FATTN_DYN_SMEM_F32(sc_smem);
    float *sQ = sc_smem;        // [R, ST]
    float *sdO = sQ + R * ST;   // [R, ST]
    float *sKV = sdO + R * ST;  // [C, ST]
    float *sdS = sKV + C * ST;  // [R, C]

    const int tid = threadIdx.x, r = tid / 8, l8 = tid % 8;
    const CtaTile cta = CtaTile::queries(p, R);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int h = int(cta.head);
    const int64_t lq = cta.lq, lkv = cta.lkv, m0 = cta.r0, m1 = cta.r1(), hk = h / p.group();
    const T *gQ = seq_q<T>(p, sr, h);
    const T *gdO = seq_dout<T>(p, sr, h);
    const T *gK = seq_k<T>(p, sr, hk);
    const T *gV = seq_v<T>(p, sr, hk);
    const int64_t bb = seq_bias(p, sr, h);

    sc_load_rows<T, R, ST>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, DB);
    sc_load_rows<T, R, ST>(sdO, gdO + m0 * p.do_ss, p.do_ss, m1 - m0, p.dim_v, DB);

    const int64_t i = m0 + r;
    int64_t lo, hi;
    key_range(p, i, lq, lkv, &lo, &hi);
    // With a bias every key reads it, relative to the row's ceiling, against lse' (common.cuh).
    float lse2 = -INFINITY, dl = 0.f, ceil = 0.f;
    if (i < lq) {
        lse2 = row_lse_rel(p, a, sr, h, i) * kLog2e;
        dl = a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + i];
        ceil = row_ceil(p, a, sr, h, i);
    }
    const KeyTiles kt(p, a, sr, h, m0, m1, C);

    float dq[OC];
    for (int u = 0; u < OC; ++u) dq[u] = 0.f;
    for (int n = kt.next(kt.first); n <= kt.last; n = kt.next(n + 1)) {
        const int64_t n0 = int64_t(n) * C, n1 = n0 + C < lkv ? n0 + C : lkv;
        __syncthreads();
        sc_load_rows<T, C, ST>(sKV, gK + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, DB);
        __syncthreads();
        float pr[KC];
        for (int k = 0; k < KC; ++k) {
            const int c = l8 + 8 * k;
            const int64_t j = n0 + c;
            float acc = 0.f;
            for (int e = 0; e < p.d; ++e) acc = fmaf(sQ[r * ST + e], sKV[c * ST + e], acc);
            const bool ok = i < lq && j < lkv && j >= lo && j <= hi && lse2 != -INFINITY;
            float t = acc * p.scale;
            if (ok && p.bias) t += load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + i) * p.bias_si + sr.kv_begin + j) - ceil;
            pr[k] = ok ? exp2f(t * kLog2e - lse2) : 0.f;
        }
        __syncthreads();
        sc_load_rows<T, C, ST>(sKV, gV + n0 * p.v_ss, p.v_ss, n1 - n0, p.dim_v, DB);
        __syncthreads();
        for (int k = 0; k < KC; ++k) {
            const int c = l8 + 8 * k;
            float dp = 0.f;
            for (int e = 0; e < p.dim_v; ++e) dp = fmaf(sdO[r * ST + e], sKV[c * ST + e], dp);
            sdS[r * C + c] = pr[k] * (dp - dl);
        }
        __syncthreads();
        sc_load_rows<T, C, ST>(sKV, gK + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, DB);
        __syncthreads();
        for (int c = 0; c < C; ++c) {
            const float ds = sdS[r * C + c];
            for (int u = 0; u < OC; ++u) dq[u] = fmaf(ds, sKV[c * ST + l8 + 8 * u], dq[u]);
        }
    }
    if (i < lq) {
        T *gdQ = static_cast<T *>(p.dq) + sr.batch_index * p.dq_sb + (sr.q_begin + i) * p.dq_ss + h * p.dq_sh;
        for (int u = 0; u < OC; ++u) {
            const int c = l8 + 8 * u;
            if (c < p.d) gdQ[c] = from_f<T>(dq[u] * p.scale);
        }
    }
}

// dK/dV: one CTA per (16 key rows, kv head, sequence); loops over the query heads of the GQA
// group and, for each, over the query tiles, in that fixed order.
template <typename T, int DB>
__global__ void __launch_bounds__(128) sc_dkdv_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int R = sc_rows(), C = sc_cols(DB), ST = sc_stride(DB), KC = C / 8, OC = DB / 8;
    FATTN_DYN_SMEM_F32(sc_smem);
    float *sK = sc_smem;        // [R, ST]
    float *sV = sK + R * ST;    // [R, ST]
    float *sQ = sV + R * ST;    // [C, ST]
    float *sdO = sQ + C * ST;   // [C, ST]
    float *sP = sdO + C * ST;   // [R, C]
    float *sdS = sP + R * C;    // [R, C]
    float *sL = sdS + R * C;    // [C] lse'·log2e of the tile's queries (-inf: none)
    float *sD = sL + C;         // [C] delta
    float *sC = sD + C;         // [C] bias ceilings

    const int tid = threadIdx.x, r = tid / 8, l8 = tid % 8;
    const CtaTile cta = CtaTile::keys(p, R);
    if (cta.past_end()) return;
    const SeqRange sr = cta.sr;
    const int64_t hk = cta.head, lq = cta.lq, lkv = cta.lkv, n0 = cta.r0, n1 = cta.r1();
    const T *gK = seq_k<T>(p, sr, hk);
    const T *gV = seq_v<T>(p, sr, hk);
    sc_load_rows<T, R, ST>(sK, gK + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, DB);
    sc_load_rows<T, R, ST>(sV, gV + n0 * p.v_ss, p.v_ss, n1 - n0, p.dim_v, DB);

    const int64_t j = n0 + r;
    int64_t i_lo, i_hi;
    query_rows(p, n0, n1, lq, lkv, &i_lo, &i_hi);
    const int64_t t_first = i_lo / C, t_last = i_hi >= i_lo ? i_hi / C : -1;
    const int64_t mb = p.bias_sb ? sr.batch_index : 0;

    float dk[OC], dv[OC];
    for (int u = 0; u < OC; ++u) dk[u] = dv[u] = 0.f;
    for (int64_t hh = 0; hh < p.group(); ++hh) {
        const int64_t h = hk * p.group() + hh;
        const T *gQ = seq_q<T>(p, sr, h);
        const T *gdO = seq_dout<T>(p, sr, h);
        const int64_t bb = seq_bias(p, sr, h);
        const int64_t mh = p.bias_sh ? h : 0;
        auto dead = [&](int64_t t) {
            const int64_t m0 = t * C, m1 = m0 + C < lq ? m0 + C : lq;
            return bias_tile_dead(a, mb, mh, sr.q_begin + m0, sr.q_begin + m1, sr.kv_begin + n0, sr.kv_begin + n1);
        };
        int64_t tf = t_first, tl = t_last;
        if (p.bias) {  // trim to the first and last live tile (common.cuh: first_live)
            tf = first_live(int(tf), int(tl), dead);
            tl = last_live(int(tf), int(tl), dead);
        }
        for (int64_t t = tf; t <= tl; ++t) {
            const int64_t m0 = t * C, m1 = m0 + C < lq ? m0 + C : lq;
            if (p.bias && dead(t)) continue;
            __syncthreads();
            sc_load_rows<T, C, ST>(sQ, gQ + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, DB);
            sc_load_rows<T, C, ST>(sdO, gdO + m0 * p.do_ss, p.do_ss, m1 - m0, p.dim_v, DB);
            for (int c = tid; c < C; c += sc_threads()) {
                const int64_t i = m0 + c;
                sL[c] = i < lq ? row_lse_rel(p, a, sr, h, i) * kLog2e : -INFINITY;
                sD[c] = i < lq ? a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + i] : 0.f;
                sC[c] = i < lq ? row_ceil(p, a, sr, h, i) : 0.f;
            }
            __syncthreads();
            for (int k = 0; k < KC; ++k) {
                const int c = l8 + 8 * k;
                const int64_t i = m0 + c;
                int64_t lo, hi;
                key_range(p, i, lq, lkv, &lo, &hi);
                float s = 0.f, dp = 0.f;
                for (int e = 0; e < p.d; ++e) s = fmaf(sK[r * ST + e], sQ[c * ST + e], s);
                for (int e = 0; e < p.dim_v; ++e) dp = fmaf(sV[r * ST + e], sdO[c * ST + e], dp);
                const bool ok = i < lq && j < lkv && j >= lo && j <= hi && sL[c] != -INFINITY;
                float x = s * p.scale;
                if (ok && p.bias) x += load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + i) * p.bias_si + sr.kv_begin + j) - sC[c];
                const float pr = ok ? exp2f(x * kLog2e - sL[c]) : 0.f;
                sP[r * C + c] = pr;
                sdS[r * C + c] = pr * (dp - sD[c]);
            }
            __syncthreads();
            for (int c = 0; c < C; ++c) {
                const float pc = sP[r * C + c], ds = sdS[r * C + c];
                for (int u = 0; u < OC; ++u) {
                    dv[u] = fmaf(pc, sdO[c * ST + l8 + 8 * u], dv[u]);
                    dk[u] = fmaf(ds, sQ[c * ST + l8 + 8 * u], dk[u]);
                }
            }
        }
    }
    if (j < lkv) {
        T *gdK = static_cast<T *>(p.dk) + sr.batch_index * p.dk_sb + (sr.kv_begin + j) * p.dk_ss + hk * p.dk_sh;
        T *gdV = static_cast<T *>(p.dv) + sr.batch_index * p.dv_sb + (sr.kv_begin + j) * p.dv_ss + hk * p.dv_sh;
        for (int u = 0; u < OC; ++u) {
            const int c = l8 + 8 * u;
            if (c < p.d) gdK[c] = from_f<T>(dk[u] * p.scale);
            if (c < p.dim_v) gdV[c] = from_f<T>(dv[u]);
        }
    }
}

// The bias gradient of the strict-f32 family (prec F32): mma_dbias_kernel's scheme (DbiasTile,
// common.cuh: a CTA owns 16 rows × C keys of dbias, or C keys summed over queries, and adds every
// batch, head and query tile into it, in that order) with sc_dq_kernel's arithmetic for P and dS:
// plain fp32 FMA, no tensor cores. A thread owns row r and keys l8 + 8k of the tile; with
// dbias_si == 0 the 16 rows are summed in order through shared memory.
template <typename T, int DB>
__global__ void __launch_bounds__(128) sc_dbias_kernel(const AttnBwdParams p, const KArgs a) {
    constexpr int R = sc_rows(), C = sc_cols(DB), ST = sc_stride(DB), KC = C / 8;
    FATTN_DYN_SMEM_F32(sc_smem);
    float *sQ = sc_smem;        // [R, ST]
    float *sdO = sQ + R * ST;   // [R, ST]
    float *sK = sdO + R * ST;   // [C, ST]
    float *sV = sK + C * ST;    // [C, ST]

    const int tid = threadIdx.x, r = tid / 8, l8 = tid % 8;
    const DbiasTile dt(p, R, C);
    if (dt.past_end()) return;
    const int64_t n0 = dt.n0, n1 = dt.n1;
    float acc[KC];
    for (int k = 0; k < KC; ++k) acc[k] = 0.f;
    dt.for_each_contribution(p, a, [&](const SeqRange &sr, int64_t h, int64_t m0, int64_t m1, int, bool first) {
        const int64_t lq = sr.q_len, lkv = sr.kv_len, hk = h / p.group(), bb = seq_bias(p, sr, h);
        __syncthreads();  // the previous tile's reads are done
        if (first) {
            sc_load_rows<T, C, ST>(sK, seq_k<T>(p, sr, hk) + n0 * p.k_ss, p.k_ss, n1 - n0, p.d, DB);
            sc_load_rows<T, C, ST>(sV, seq_v<T>(p, sr, hk) + n0 * p.v_ss, p.v_ss, n1 - n0, p.dim_v, DB);
        }
        sc_load_rows<T, R, ST>(sQ, seq_q<T>(p, sr, h) + m0 * p.q_ss, p.q_ss, m1 - m0, p.d, DB);
        sc_load_rows<T, R, ST>(sdO, seq_dout<T>(p, sr, h) + m0 * p.do_ss, p.do_ss, m1 - m0, p.dim_v, DB);
        __syncthreads();
        const int64_t i = m0 + r;
        int64_t lo, hi;
        key_range(p, i, lq, lkv, &lo, &hi);
        float lse2 = -INFINITY, dl = 0.f, ceil = 0.f;  // as sc_dq_kernel
        if (i < lq) {
            lse2 = row_lse_rel(p, a, sr, h, i) * kLog2e;
            dl = a.delta[(sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + i];
            ceil = row_ceil(p, a, sr, h, i);
        }
        for (int k = 0; k < KC; ++k) {
            const int c = l8 + 8 * k;
            const int64_t j = n0 + c;
            float s = 0.f, dp = 0.f;
            for (int e = 0; e < p.d; ++e) s = fmaf(sQ[r * ST + e], sK[c * ST + e], s);
            for (int e = 0; e < p.dim_v; ++e) dp = fmaf(sdO[r * ST + e], sV[c * ST + e], dp);
            const bool ok = i < lq && j < lkv && j >= lo && j <= hi && lse2 != -INFINITY;
            float x = s * p.scale;
            if (ok && p.bias) x += load_bias(p.bias, p.bias_dtype, bb + (sr.q_begin + i) * p.bias_si + sr.kv_begin + j) - ceil;
            const float pr = ok ? exp2f(x * kLog2e - lse2) : 0.f;
            acc[k] += pr * (dp - dl);
        }
    });
    float *out = dt.out(p);
    if (!dt.sum_rows) {
        const int64_t i = dt.mt * R + r;
        if (i < dt.sr0.q_len)
            for (int k = 0; k < KC; ++k) {
                const int c = l8 + 8 * k;
                if (n0 + c < dt.sr0.kv_len) out[i * p.dbias_si + c] = acc[k];
            }
        return;
    }
    __syncthreads();  // the tiles' reads are done: sQ becomes the row sums' scratch [R, C]
    for (int k = 0; k < KC; ++k) sQ[r * C + l8 + 8 * k] = acc[k];
    __syncthreads();
    for (int c = tid; c < C; c += sc_threads()) {
        float v = 0.f;
        for (int rr = 0; rr < R; ++rr) v += sQ[rr * C + c];
        if (n0 + c < dt.sr0.kv_len) out[c] = v;
    }
}

}  // namespace fattn::cuda::attn
