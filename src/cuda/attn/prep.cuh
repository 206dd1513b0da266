// prep.cuh — the pre-passes of the fused attention kernels: the bias tile map and the bias
// ceilings in one launch (forward and backward with a bias), δ = rowsum(dO∘O) and lse' (backward); and the
// host-side tests of which vector loads a call's pointers and strides allow. The launch sequence
// (sequence.h) runs them; nvcc compiles them for the GPU (launch.cu), a host compiler for the CPU
// emulation (src/emu/attn_emu.cpp).
#pragma once

#include <cstdint>

#include "cuda/attn/common.cuh"

namespace fattn::cuda::attn {

// Map cell `cell` (a 64×64 block of the packed [total_q, total_kv] plane of one bias (batch,
// head)), one CTA of 256 threads: kBiasDead if every element is -inf, kBiasZero if every element
// is exactly 0, else kBiasRead. A NaN counts as "read" so it is never hidden. vec: 16-byte loads
// are legal (bias_vec_ok); each thread then reads 16-byte chunks of a row (the element-wise loop
// read the bias at ~0.7 TB/s, 46 µs per map at S 4096).
__device__ __forceinline__ void bias_map_cell(const AttnFwdParams &p, const Workspace &w, uint8_t *map, bool vec, int64_t cell) {
    const int64_t bn = cell % w.map_nn, bm = (cell / w.map_nn) % w.map_nm;
    const int64_t bh = (cell / (w.map_nn * w.map_nm)) % w.map_nh, bb = cell / (w.map_nn * w.map_nm * w.map_nh);
    const int64_t base = bb * p.bias_sb + bh * p.bias_sh;
    const int es = p.bias_dtype == FATTN_F32 ? 4 : 2, epc = 16 / es;  // elements per 16-byte chunk
    int alive = 0, nonzero = 0;
    auto see = [&](float x) {
        alive |= !(x == -INFINITY);
        nonzero |= !(x == 0.f);
    };
    const int chunks = kMapBlock / epc;  // per row
    for (int e = threadIdx.x; e < kMapBlock * chunks && !(alive && nonzero); e += blockDim.x) {
        const int64_t i = bm * kMapBlock + e / chunks, j = bn * kMapBlock + (e % chunks) * epc;
        if (i >= p.total_q || j >= p.total_kv) continue;
        const int64_t off = base + i * p.bias_si + j;
        if (vec && j + epc <= p.total_kv) {
            const uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const char *>(p.bias) + off * es);
            const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (es == 4) {
                    see(__uint_as_float(wd[k]));
                } else {
                    const bool f16 = p.bias_dtype == FATTN_F16;  // else bf16: the high half of an f32
                    const uint32_t lo = wd[k] & 0xffffu, hi = wd[k] >> 16;
                    see(f16 ? __half2float(__ushort_as_half(uint16_t(lo))) : __uint_as_float(lo << 16));
                    see(f16 ? __half2float(__ushort_as_half(uint16_t(hi))) : __uint_as_float(hi << 16));
                }
            }
        } else {
            for (int k = 0; k < epc && j + k < p.total_kv; ++k) see(load_bias(p.bias, p.bias_dtype, off + k));
        }
    }
    alive = __syncthreads_or(alive);
    nonzero = __syncthreads_or(nonzero);
    if (threadIdx.x == 0) map[cell] = uint8_t(!alive ? kBiasDead : nonzero ? kBiasRead : kBiasZero);
}

// Bias ceilings (common.cuh): warp `wid` per (bias batch, bias head, packed row); lanes stride
// over the row's allowed keys, then a max tree (max is exact: any order gives the same bits). A
// dense bias shared by the batches has one geometry (every batch has the same lengths); a varlen
// row finds its sequence by bisection. No finite allowed bias, or no sequence: 0.
// The ceilings' warps: one per (bias batch, bias head, packed row).
FATTN_HD int64_t bias_ceiling_warps(const AttnFwdParams &p, const Workspace &w) { return w.map_nb * w.map_nh * p.total_q; }
__device__ __forceinline__ void bias_ceiling_warp(const AttnFwdParams &p, const Workspace &w, float *ceil, int64_t wid) {
    const int lane = threadIdx.x % 32;
    if (wid >= bias_ceiling_warps(p, w)) return;
    const int64_t row = wid % p.total_q, bh = (wid / p.total_q) % w.map_nh, bb = wid / (p.total_q * w.map_nh);
    int64_t s = bb;
    if (p.cu_seqlens_q) {  // the sequence s with cu[s] <= row < cu[s + 1], if any
        int64_t lo = 0, hi = p.batch;
        while (hi - lo > 1) {
            const int64_t mid = (lo + hi) / 2;
            if (p.cu_seqlens_q[mid] <= row) lo = mid; else hi = mid;
        }
        s = lo;
    }
    const SeqRange sr = seq_range(p, s);
    const int64_t i = row - sr.q_begin;
    float m = -INFINITY;
    if (i >= 0 && i < sr.q_len) {
        int64_t lo, hi;
        key_range(p, i, sr.q_len, sr.kv_len, &lo, &hi);
        const int64_t base = bb * p.bias_sb + bh * p.bias_sh + row * p.bias_si + sr.kv_begin;
        for (int64_t j = lo + lane; j <= hi; j += 32) m = fmaxf(m, load_bias(p.bias, p.bias_dtype, base + j));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) ceil[wid] = m == -INFINITY ? 0.f : m;
}

// The bias pre-pass, one launch (the two parts are independent: both only read the bias): blocks
// [0, w.map_bytes) build the tile map, one cell each; the blocks after them the ceilings, eight
// warps each (bias_prep_blocks). At S 625 the map and the ceilings took 9.0 + 6.0 µs as two
// launches (H100, 2026-12-05, docs/PERF.md).
inline int64_t bias_prep_blocks(const AttnFwdParams &p, const Workspace &w) {
    return int64_t(w.map_bytes) + (bias_ceiling_warps(p, w) + 7) / 8;
}
__global__ void __launch_bounds__(256) bias_prep_kernel(const AttnFwdParams p, Workspace w, uint8_t *map, bool vec, float *ceil) {
    const int64_t b = blockIdx.x, nmap = int64_t(w.map_bytes);
    if (b < nmap) bias_map_cell(p, w, map, vec, b);
    else bias_ceiling_warp(p, w, ceil, ((b - nmap) * blockDim.x + threadIdx.x) / 32);
}

// δ[b, h, i] = Σ_d dO·O in f32, one warp per (b, i, h); lanes stride over d (8-byte chunks when
// vec8: pointers 8-byte aligned, strides and dim_v whole chunks), then a fixed xor tree. With a
// bias it also writes lse' = lse − ceiling (rows with a large ceiling are redone in stats mode).
template <typename T>
__global__ void __launch_bounds__(256) delta_kernel(const AttnBwdParams p, KArgs a, int64_t rows, bool vec8) {
    float *delta = a.delta;
    const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= rows) return;
    const int64_t h = w % p.hq, i = (w / p.hq) % p.total_q, b = w / (p.hq * p.total_q);
    const T *o = static_cast<const T *>(p.o) + b * p.o_sb + i * p.o_ss + h * p.o_sh;
    const T *d = static_cast<const T *>(p.dout) + b * p.do_sb + i * p.do_ss + h * p.do_sh;
    float acc = 0.f;
    constexpr int E = 8 / int(sizeof(T));
    if (vec8) {
        for (int64_t c = int64_t(lane) * E; c < p.dim_v; c += 32 * E) {
            const uint2 uo = *reinterpret_cast<const uint2 *>(o + c), ud = *reinterpret_cast<const uint2 *>(d + c);
            const T *to = reinterpret_cast<const T *>(&uo), *td = reinterpret_cast<const T *>(&ud);
#pragma unroll
            for (int k = 0; k < E; ++k) acc = fmaf(to_f(td[k]), to_f(to[k]), acc);
        }
    } else {
        for (int64_t c = lane; c < p.dim_v; c += 32) acc = fmaf(to_f(d[c]), to_f(o[c]), acc);
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) delta[(b * p.hq + h) * p.total_q + i] = acc;
    if (lane == 0 && a.lse_rel) {
        const int64_t mb = p.bias_sb ? b : 0, mh = p.bias_sh ? h : 0;
        const_cast<float *>(a.lse_rel)[(b * p.hq + h) * p.total_q + i] =
            p.lse[b * p.lse_sb + h * p.lse_sh + i] - a.ceil[(mb * a.map_nh + mh) * p.total_q + i];
    }
}

// dbias = 0 over its whole extent ([1, Hq|1, total_q|1, total_kv], varlen): the entries between
// two sequences, which no CTA of the bias-gradient kernel owns. One warp per row.
__global__ void __launch_bounds__(256) dbias_zero_kernel(const AttnBwdParams p, int64_t rows) {
    const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (w >= rows) return;
    const int64_t ni = p.dbias_si ? p.total_q : 1, h = w / ni, i = w % ni;
    float *row = p.dbias + h * p.dbias_sh + i * p.dbias_si;
    for (int64_t j = threadIdx.x % 32; j < p.total_kv; j += 32) row[j] = 0.f;
}

inline bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }
inline bool aligned8(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 7) == 0; }

// The bias map's 16-byte loads: pointer aligned, every stride a whole number of 16-byte chunks
// (the map's column blocks start at multiples of 64 elements).
inline bool bias_vec_ok(const AttnFwdParams &p) {
    const int64_t epc = p.bias_dtype == FATTN_F32 ? 4 : 8;
    return aligned16(p.bias) && p.bias_si % epc == 0 && p.bias_sh % epc == 0 && p.bias_sb % epc == 0;
}

// The δ kernel's 8-byte loads of o and dout.
inline bool delta_vec_ok(const AttnBwdParams &p) {
    const int64_t e = p.dtype == FATTN_F32 ? 2 : 4;
    auto whole = [e](int64_t a, int64_t b, int64_t c) { return a % e == 0 && b % e == 0 && c % e == 0; };
    return aligned8(p.o) && aligned8(p.dout) && p.dim_v % e == 0 && whole(p.o_sb, p.o_ss, p.o_sh) &&
           whole(p.do_sb, p.do_ss, p.do_sh);
}

// 16-byte cp.async loads need every tile row start 16-byte aligned: pointers 16-byte aligned,
// strides multiples of 16 bytes' worth of elements, and head dims in whole 16-byte chunks.
inline bool vec_ok(const AttnFwdParams &p, const void *dout, int64_t do_sb, int64_t do_ss, int64_t do_sh) {
    const int64_t epc = p.dtype == FATTN_F32 ? 4 : 8;
    auto str8 = [epc](int64_t a, int64_t b, int64_t c) { return a % epc == 0 && b % epc == 0 && c % epc == 0; };
    return aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && (!dout || aligned16(dout)) &&
           str8(p.q_sb, p.q_ss, p.q_sh) && str8(p.k_sb, p.k_ss, p.k_sh) && str8(p.v_sb, p.v_ss, p.v_sh) &&
           (!dout || str8(do_sb, do_ss, do_sh)) && p.d % epc == 0 && p.dim_v % epc == 0;
}

}  // namespace fattn::cuda::attn
