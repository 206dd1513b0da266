// launch.cu — forward/backward orchestration of the fused CUDA attention kernels: carve the
// workspace, run the pre-passes (bias tile map; δ = rowsum(dO∘O) for the backward), pick the
// family's launcher from the selection result, and turn launch errors into a status.
#include <cuda_runtime.h>

#include "cuda/attn/launch.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

// One CTA per map cell (64×64 block of the packed [total_q, total_kv] plane of one bias
// (batch, head)): kBiasDead if every element is -inf, kBiasZero if every element is exactly 0,
// else kBiasRead. A NaN counts as "read" so it is never hidden. vec: 16-byte loads are legal
// (bias_vec_ok); each thread then reads 16-byte chunks of a row (the element-wise loop read the
// bias at ~0.7 TB/s, 46 µs per map at S 4096).
__global__ void __launch_bounds__(256) bias_map_kernel(const AttnFwdParams p, Workspace w, uint8_t *map, bool vec) {
    const int64_t cell = blockIdx.x;
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

// Bias ceilings (common.cuh): one warp per (bias batch, bias head, packed row); lanes stride over
// the row's allowed keys, then a max tree (max is exact: any order gives the same bits). A dense
// bias shared by the batches has one geometry (every batch has the same lengths); a varlen row
// finds its sequence by bisection. No finite allowed bias, or no sequence: 0.
__global__ void __launch_bounds__(256) bias_ceiling_kernel(const AttnFwdParams p, Workspace w, float *ceil) {
    const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (wid >= w.map_nb * w.map_nh * p.total_q) return;
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

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }
bool aligned8(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 7) == 0; }

// The bias map's 16-byte loads: pointer aligned, every stride a whole number of 16-byte chunks
// (the map's column blocks start at multiples of 64 elements).
bool bias_vec_ok(const AttnFwdParams &p) {
    const int64_t epc = p.bias_dtype == FATTN_F32 ? 4 : 8;
    return aligned16(p.bias) && p.bias_si % epc == 0 && p.bias_sh % epc == 0 && p.bias_sb % epc == 0;
}

// The δ kernel's 8-byte loads of o and dout.
bool delta_vec_ok(const AttnBwdParams &p) {
    const int64_t e = p.dtype == FATTN_F32 ? 2 : 4;
    auto whole = [e](int64_t a, int64_t b, int64_t c) { return a % e == 0 && b % e == 0 && c % e == 0; };
    return aligned8(p.o) && aligned8(p.dout) && p.dim_v % e == 0 && whole(p.o_sb, p.o_ss, p.o_sh) &&
           whole(p.do_sb, p.do_ss, p.do_sh);
}

// 16-byte cp.async loads need every tile row start 16-byte aligned: pointers 16-byte aligned,
// strides multiples of 16 bytes' worth of elements, and head dims in whole 16-byte chunks.
bool vec_ok(const AttnFwdParams &p, const void *dout, int64_t do_sb, int64_t do_ss, int64_t do_sh) {
    const int64_t epc = p.dtype == FATTN_F32 ? 4 : 8;
    auto str8 = [epc](int64_t a, int64_t b, int64_t c) { return a % epc == 0 && b % epc == 0 && c % epc == 0; };
    return aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && (!dout || aligned16(dout)) &&
           str8(p.q_sb, p.q_ss, p.q_sh) && str8(p.k_sb, p.k_ss, p.k_sh) && str8(p.v_sb, p.v_ss, p.v_sh) &&
           (!dout || str8(do_sb, do_ss, do_sh)) && p.d % epc == 0 && p.dim_v % epc == 0;
}

fattn_status check(cudaError_t e, const char *what, std::string *err) {
    if (e == cudaSuccess) return FATTN_OK;
    if (err) *err = std::string("cuda fused attn: ") + what + ": " + cudaGetErrorString(e);
    return FATTN_ERR_DEVICE;
}

KArgs prepare(const AttnFwdParams &p, const Choice &c, fattn_dir dir, void *workspace, cudaStream_t st,
              cudaError_t *e) {
    const Workspace w = Workspace::layout(p, c, dir);
    KArgs a{};
    *e = cudaSuccess;
    if (p.bias && w.map_bytes > 0) {
        uint8_t *map = static_cast<uint8_t *>(workspace) + w.map_off;
        bias_map_kernel<<<unsigned(w.map_bytes), 256, 0, st>>>(p, w, map, bias_vec_ok(p));
        *e = cudaGetLastError();
        a.map = map;
        a.bias_pair = (reinterpret_cast<uintptr_t>(p.bias) % (p.bias_dtype == FATTN_F32 ? 8 : 4)) == 0;
        a.map_nh = w.map_nh;
        a.map_nm = w.map_nm;
        a.map_nn = w.map_nn;
        float *ceil = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.ceil_off);
        const int64_t warps = w.map_nb * w.map_nh * p.total_q;
        if (*e == cudaSuccess && warps > 0) {
            bias_ceiling_kernel<<<unsigned((warps + 7) / 8), 256, 0, st>>>(p, w, ceil);
            *e = cudaGetLastError();
        }
        a.ceil = ceil;
    }
    if (dir == FATTN_DIR_BWD) {
        a.delta = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.delta_off);
        if (p.bias) a.lse_rel = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.lse_rel_off);
    }
    return a;
}

}  // namespace

fattn_status fwd(const AttnFwdParams &p, const DeviceInfo &, const Choice &c, void *workspace, std::string *err) {
    if (p.batch == 0 || p.total_q == 0 || p.hq == 0) return FATTN_OK;
    cudaStream_t st = static_cast<cudaStream_t>(p.stream);
    cudaError_t e;
    KArgs a = prepare(p, c, FATTN_DIR_FWD, workspace, st, &e);
    if (e != cudaSuccess) return check(e, "bias tile map", err);
    a.vec = vec_ok(p, nullptr, 0, 0, 0);
    switch (c.fwd_family) {
#ifdef FATTN_HAVE_SM90
    case Family::SM90_NATIVE: return check(sm90_fwd(p, a, c.d_bucket, st), "forward (sm90)", err);
    case Family::SM90_TF32:
        return check(sm90_fwd_tf32(p, a, c.d_bucket, Workspace::layout(p, c, FATTN_DIR_FWD), workspace, st),
                     "forward (sm90 tf32)", err);
#endif
    case Family::MMA_NATIVE: return check(native_fwd(p, a, c.d_bucket, st), "forward (mma)", err);
    case Family::MMA_TF32: return check(tf32_fwd(p, a, c.d_bucket, st), "forward (tf32)", err);
    case Family::SCALAR_F32: return check(scalar_fwd(p, a, c.d_bucket, st), "forward (f32)", err);
    default: break;
    }
    if (err) *err = "cuda fused attn: no forward kernel for this family";
    return FATTN_ERR_UNSUPPORTED;
}

// The sm90 backward reads dout through TMA like q, k, v (select.cpp checks those): 16-byte
// aligned, strides of dims with more than one index whole 16-byte chunks.
bool sm90_dout_ok(const AttnBwdParams &p) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    const int64_t chunk = p.dtype == FATTN_F32 ? 4 : 8, smax = (int64_t(1) << 39) / (p.dtype == FATTN_F32 ? 4 : 2);
    auto st_ok = [&](int64_t s, int64_t extent) { return extent <= 1 || (s > 0 && s % chunk == 0 && s < smax); };
    return aligned16(p.dout) && st_ok(p.do_ss, p.total_q) && st_ok(p.do_sh, p.hq) && st_ok(p.do_sb, bview);
}

fattn_status bwd(const AttnBwdParams &p, const DeviceInfo &dev, const Choice &chosen, void *workspace, std::string *err) {
    if (p.batch == 0 || p.hq == 0) return FATTN_OK;
    Choice c = chosen;
    if ((c.family == Family::SM90_NATIVE || c.family == Family::SM90_TF32) && !sm90_dout_ok(p)) {
        // AUTO serves such a dout with the portable backward (same results, same contract); a
        // context pinned to SM90 gets the reason instead.
        if (dev.family == FATTN_CUDA_FAMILY_SM90) {
            if (err) *err = "cuda fused attn: sm90 backward: dout must be 16-byte aligned with strides in whole 16-byte chunks (TMA)";
            return FATTN_ERR_UNSUPPORTED;
        }
        c.family = c.family == Family::SM90_TF32 ? Family::MMA_TF32 : Family::MMA_NATIVE;
    }
    cudaStream_t st = static_cast<cudaStream_t>(p.stream);
    cudaError_t e;
    KArgs a = prepare(p, c, FATTN_DIR_BWD, workspace, st, &e);
    if (e != cudaSuccess) return check(e, "bias tile map", err);
    a.vec = vec_ok(p, p.dout, p.do_sb, p.do_ss, p.do_sh);
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    const int64_t rows = bview * p.total_q * p.hq;
    if (rows > 0) {
        const unsigned blocks = unsigned((rows + 7) / 8);
        const bool v8 = delta_vec_ok(p);
        switch (p.dtype) {
        case FATTN_F16: delta_kernel<__half><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        case FATTN_BF16: delta_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        default: delta_kernel<float><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        }
        if (fattn_status s = check(cudaGetLastError(), "delta preprocess", err); s != FATTN_OK) return s;
    }
    if (p.bias) {
        // Rows whose ceiling is large: lse − ceiling may have lost log Σ (at finfo.min the saved
        // LSE is the ceiling exactly), so the forward recomputes their lse' (stats mode; q tiles
        // without such a row return at once). Whether any exists is only known on the device.
        KArgs sa = a;
        sa.stats = const_cast<float *>(a.lse_rel);
        cudaError_t se = cudaSuccess;
        switch (c.family) {
        case Family::SM90_NATIVE:  // the sm90 forward has no stats mode; the portable one serves it
        case Family::MMA_NATIVE: se = native_fwd(p, sa, c.d_bucket, st); break;
        case Family::SM90_TF32:
        case Family::MMA_TF32: se = tf32_fwd(p, sa, c.d_bucket, st); break;
        case Family::SCALAR_F32: se = scalar_fwd(p, sa, c.d_bucket, st); break;
        default: break;
        }
        if (fattn_status s = check(se, "row statistics (stats-mode forward)", err); s != FATTN_OK) return s;
    }
    switch (c.family) {
#ifdef FATTN_HAVE_SM90
    case Family::SM90_NATIVE: return check(sm90_bwd(p, a, c.d_bucket, st), "backward (sm90)", err);
    case Family::SM90_TF32:
        return check(sm90_bwd_tf32(p, a, c.d_bucket, Workspace::layout(p, c, FATTN_DIR_BWD), workspace, st),
                     "backward (sm90 tf32)", err);
#endif
    case Family::MMA_NATIVE: return check(native_bwd(p, a, c.d_bucket, st), "backward (mma)", err);
    case Family::MMA_TF32: return check(tf32_bwd(p, a, c.d_bucket, st), "backward (tf32)", err);
    case Family::SCALAR_F32: return check(scalar_bwd(p, a, c.d_bucket, st), "backward (f32)", err);
    default: break;
    }
    if (err) *err = "cuda fused attn: no backward kernel for this family";
    return FATTN_ERR_UNSUPPORTED;
}

}  // namespace fattn::cuda::attn
