// merge.cu — CUDA kernel of fattn_attn_merge: the exact log-sum-exp merge of partial (o, lse)
// pairs, folded left to right in part order, in f32 (the same fold as src/cpu/attn_merge.cpp).
// One warp per row (b, s, h): every lane folds the row's lse values itself (same inputs, same
// order, same bits) and owns the columns lane, lane + 32, ... of the row, kPerLane of them per
// pass. No atomics, no reduction across threads: the bits depend on nothing but the inputs and
// the part order. The products and the sum are rounded separately (__fmul_rn, __fadd_rn: no
// contraction into an FMA). CPU and CUDA results may differ in the last bits (expf / logf).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_guard.h"
#include "cuda/merge_cuda.h"

namespace fattn::cuda {
namespace {

constexpr int kWarps = 4;     // rows per block
constexpr int kPerLane = 8;   // columns per lane per pass: 256 columns of a row per pass

__device__ __forceinline__ float load_elem(const void *base, int32_t dtype, int64_t i) {
    if (dtype == FATTN_F32) return static_cast<const float *>(base)[i];
    const uint16_t h = static_cast<const uint16_t *>(base)[i];
    if (dtype == FATTN_BF16) return __uint_as_float(uint32_t(h) << 16);
    // f16 -> f32 without cuda_fp16.h: exact conversion through the PTX instruction.
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ void store_elem(void *base, fattn_dtype dtype, int64_t i, float x) {
    if (dtype == FATTN_F32) {
        static_cast<float *>(base)[i] = x;
        return;
    }
    uint16_t h;
    if (dtype == FATTN_BF16)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));  // round to nearest even, NaN stays NaN
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    static_cast<uint16_t *>(base)[i] = h;
}

__global__ void __launch_bounds__(kWarps * 32) merge_kernel(const MergeParams p, const MergePart *parts,
                                                            int64_t rows) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int64_t h = row % p.heads, s = (row / p.heads) % p.seq, b = row / (p.heads * p.seq);
    const int64_t dv = p.dim_v;
    const int64_t cols = dv > 0 ? dv : 1;  // Dv == 0: one pass all the same, for lse
    for (int64_t d0 = 0; d0 < cols; d0 += 32 * kPerLane) {
        float acc[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) acc[j] = 0.f;
        bool started = false;
        float L = -INFINITY;
        for (int64_t i = 0; i < p.n_parts; ++i) {
            const MergePart q = parts[i];
            const float l = q.lse[b * q.lse_sb + h * q.lse_sh + s];
            if (l == -INFINITY) continue;
            const int64_t off = b * q.o_sb + s * q.o_ss + h * q.o_sh;
            if (!started) {
#pragma unroll
                for (int j = 0; j < kPerLane; ++j) {
                    const int64_t d = d0 + lane + 32 * j;
                    if (d < dv) acc[j] = load_elem(q.o, q.dtype, off + d);
                }
                L = l;
                started = true;
                continue;
            }
            const float m = L >= l ? L : l;
            const float wa = expf(__fsub_rn(L, m)), wb = expf(__fsub_rn(l, m));
            const float t = __fadd_rn(wa, wb);
            const float a = __fdiv_rn(wa, t), c = __fdiv_rn(wb, t);
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const int64_t d = d0 + lane + 32 * j;
                if (d < dv) acc[j] = __fadd_rn(__fmul_rn(acc[j], a), __fmul_rn(load_elem(q.o, q.dtype, off + d), c));
            }
            L = __fadd_rn(m, logf(t));
        }
        const int64_t out = b * p.o_sb + s * p.o_ss + h * p.o_sh;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int64_t d = d0 + lane + 32 * j;
            if (d < dv) store_elem(p.o, p.o_dtype, out + d, started ? acc[j] : 0.f);
        }
        if (d0 == 0 && lane == 0) p.lse[b * p.lse_sb + h * p.lse_sh + s] = L;
    }
}

fattn_status check(cudaError_t e, const char *what, std::string *err) {
    if (e == cudaSuccess) return FATTN_OK;
    if (err) *err = std::string("cuda attn merge: ") + what + ": " + cudaGetErrorString(e);
    return FATTN_ERR_DEVICE;
}

}  // namespace

fattn_status attn_merge(const MergeParams &p, const DeviceInfo &dev, MergePart *parts_dev,
                        std::string *err) {
    const int64_t rows = p.batch * p.seq * p.heads;
    if (rows <= 0) return FATTN_OK;
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > int64_t(INT32_MAX)) {
        if (err) *err = "o_out: " + std::to_string(rows) + " rows (B * S * H) are more than one CUDA grid holds";
        return FATTN_ERR_UNSUPPORTED;
    }
    DeviceGuard guard(dev.device);
    cudaStream_t st = static_cast<cudaStream_t>(p.stream);
    // From pageable host memory: the copy has read p.parts when cudaMemcpyAsync returns.
    fattn_status s = check(cudaMemcpyAsync(parts_dev, p.parts, size_t(p.n_parts) * sizeof(MergePart),
                                           cudaMemcpyHostToDevice, st),
                           "copy of the part table", err);
    if (s != FATTN_OK) return s;
    merge_kernel<<<unsigned(blocks), kWarps * 32, 0, st>>>(p, parts_dev, rows);
    return check(cudaGetLastError(), "merge kernel", err);
}

}  // namespace fattn::cuda
