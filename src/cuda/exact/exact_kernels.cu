// exact_kernels.cu — row and element-wise kernels of the CUDA exact arm (see exact_kernels.h):
// masked softmax over the materialized scores, δ = rowsum(dO∘O), dS = P∘(dP − δ), conversions.
// Each kernel is a `static __global__` body plus its launcher; exact.cpp orders them between the
// cuBLAS GEMMs. All offsets are 64-bit; block reductions use a fixed tree (bitwise reproducible).
#include "cuda/exact/exact_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace fattn::cuda::exact {
namespace {

constexpr int kRowThreads = 256;  // one block per row: long rows (S up to 64k) need many threads

struct NoBias {};

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ float ld(const NoBias *, int64_t) { return 0.f; }

__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

// Merge two online-softmax states (max m, sum s of exp(x - m)); -inf max means "empty".
__device__ __forceinline__ void merge(float &m, float &s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    float mn = fmaxf(m, m2);
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

template <typename BiasT, typename LowT>
__global__ void __launch_bounds__(kRowThreads) softmax_rows_kernel(SoftmaxArgs a) {
    __shared__ float sM[kRowThreads], sS[kRowThreads];
    const int64_t row = blockIdx.x;  // h * lq + i
    const int64_t h = row / a.lq, i = row - h * a.lq;
    float *gS = a.p + row * a.lk;  // [lk]
    const BiasT *gB = nullptr;     // [lk] of this (h, i)
    if constexpr (!std::is_same<BiasT, NoBias>::value)
        gB = static_cast<const BiasT *>(a.bias) + h * a.bias_sh + i * a.bias_si;
    int64_t lo, hi;
    key_range(a.mask, i, a.lq, a.lk, &lo, &hi);

    // Pass 0 (with a bias): the row's bias ceiling c, its largest allowed bias (0 when none).
    // The bias enters as (bias − c) and lse = c + log Σ: softmax is unchanged by the constant,
    // and a padding row at finfo.min or -1e9 keeps its scores (the fused kernels do the same).
    float c = 0.f;
    if constexpr (!std::is_same<BiasT, NoBias>::value) {
        float bm = -INFINITY;
        for (int64_t j = lo + threadIdx.x; j <= hi; j += kRowThreads) bm = fmaxf(bm, ld(gB, j));
        sM[threadIdx.x] = bm;
        __syncthreads();
        for (int w = kRowThreads / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) sM[threadIdx.x] = fmaxf(sM[threadIdx.x], sM[threadIdx.x + w]);
            __syncthreads();
        }
        c = sM[0] == -INFINITY ? 0.f : sM[0];
        __syncthreads();
    }

    // Pass 1: per-thread online (max, sum) over the allowed keys, then a fixed-order tree merge.
    float m = -INFINITY, s = 0.f;
    for (int64_t j = lo + threadIdx.x; j <= hi; j += kRowThreads) {
        float x = gS[j] + (ld(gB, j) - c);
        if (x == -INFINITY) continue;  // a -inf bias entry masks this key
        if (x != x) {                  // a NaN score poisons the row: m = +inf survives the
            m = INFINITY, s = NAN;     // merges (a -inf max is "empty" there), so lse and P are
            continue;                  // NaN, never a fully masked row's 0 (CONTRACT.md §3)
        }
        if (x > m) {
            s = (m == -INFINITY ? 0.f : s * expf(m - x)) + 1.f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    sM[threadIdx.x] = m;
    sS[threadIdx.x] = s;
    __syncthreads();
    for (int w = kRowThreads / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            float mm = sM[threadIdx.x], ss = sS[threadIdx.x];
            merge(mm, ss, sM[threadIdx.x + w], sS[threadIdx.x + w]);
            sM[threadIdx.x] = mm;
            sS[threadIdx.x] = ss;
        }
        __syncthreads();
    }
    const float m_row = sM[0], s_row = sS[0];
    const bool empty = m_row == -INFINITY;  // fully masked: P = 0, lse = -inf
    const float inv = empty ? 0.f : 1.f / s_row;
    if (threadIdx.x == 0) a.lse[h * a.lse_sh + i] = empty ? -INFINITY : c + (m_row + logf(s_row));

    // Pass 2: overwrite the whole row (masked keys too: the GEMM left scores there).
    LowT *gL = static_cast<LowT *>(a.p_low);
    for (int64_t j = threadIdx.x; j < a.lk; j += kRowThreads) {
        float pj = 0.f;
        if (!empty && j >= lo && j <= hi) pj = expf(gS[j] + (ld(gB, j) - c) - m_row) * inv;
        gS[j] = pj;
        if constexpr (!std::is_same<LowT, float>::value) st(gL, row * a.lk + j, pj);
    }
}

template <typename BiasT>
cudaError_t softmax_low(const SoftmaxArgs &a, cudaStream_t st) {
    dim3 grid(unsigned(a.hq * a.lq));
    switch (a.low_dtype) {
        case FATTN_F16: softmax_rows_kernel<BiasT, __half><<<grid, kRowThreads, 0, st>>>(a); break;
        case FATTN_BF16:
            softmax_rows_kernel<BiasT, __nv_bfloat16><<<grid, kRowThreads, 0, st>>>(a);
            break;
        default: softmax_rows_kernel<BiasT, float><<<grid, kRowThreads, 0, st>>>(a); break;
    }
    return cudaGetLastError();
}

template <typename T>
__global__ void delta_kernel(DeltaArgs a) {
    // One warp per (h, i) row; lanes stride over dv, then an xor-butterfly (same order every run).
    const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= a.hq * a.lq) return;
    const int64_t h = row / a.lq, i = row - h * a.lq;
    const T *gO = static_cast<const T *>(a.o) + i * a.o_ss + h * a.o_sh;
    const T *gD = static_cast<const T *>(a.dout) + i * a.do_ss + h * a.do_sh;
    float acc = 0.f;
    for (int64_t d = lane; d < a.dv; d += 32) acc = fmaf(ld(gO, d), ld(gD, d), acc);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) a.delta[row] = acc;
}

template <typename LowT>
__global__ void __launch_bounds__(kRowThreads) ds_kernel(DsArgs a) {
    const int64_t row = blockIdx.x;
    const float dl = a.delta[row];
    const float *gP = a.p + row * a.lk;
    float *gdP = a.dp + row * a.lk;
    for (int64_t j = threadIdx.x; j < a.lk; j += kRowThreads) {
        float v = gP[j] * (gdP[j] - dl);
        if constexpr (std::is_same<LowT, float>::value) {
            gdP[j] = v;
        } else {
            st(static_cast<LowT *>(a.ds_low), row * a.lk + j, v);
            if (a.keep_f32) gdP[j] = v;
        }
    }
}

__global__ void dbias_acc_kernel(DbiasArgs a) {
    const int64_t nh = a.sh ? a.hq : 1, ni = a.si ? a.lq : 1, n = nh * ni * a.lk;
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = k % a.lk, i0 = (k / a.lk) % ni, h0 = k / (a.lk * ni);
        float *dst = a.dbias + h0 * a.sh + i0 * a.si + j;
        float acc = *dst;
        const int64_t h_end = a.sh ? h0 + 1 : a.hq, i_end = a.si ? i0 + 1 : a.lq;
        for (int64_t h = a.sh ? h0 : 0; h < h_end; ++h)
            for (int64_t i = a.si ? i0 : 0; i < i_end; ++i) acc += a.ds[(h * a.lq + i) * a.lk + j];
        *dst = acc;
    }
}

__global__ void zero_4d_kernel(float *d, int64_t nb, int64_t nh, int64_t ni, int64_t nk, int64_t sb, int64_t sh,
                               int64_t si) {
    const int64_t n = nb * nh * ni * nk;
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = k % nk, i = (k / nk) % ni, h = (k / (nk * ni)) % nh, b = k / (nk * ni * nh);
        d[b * sb + h * sh + i * si + j] = 0.f;
    }
}

template <typename LowT>
__global__ void to_low_kernel(const float *src, LowT *dst, int64_t n) {
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x)
        st(dst, k, src[k]);
}

template <typename T>
__global__ void store_acc_kernel(const float *acc, T *out, int64_t heads, int64_t rows, int64_t dim,
                                 int64_t out_ss, int64_t out_sh) {
    const int64_t hr = blockIdx.x;  // h * rows + j
    const int64_t h = hr / rows, j = hr - h * rows;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
        st(out, j * out_ss + h * out_sh + d, acc[hr * dim + d]);
}

template <typename T>
__global__ void zero_rows_kernel(T *out, int64_t heads, int64_t rows, int64_t dim, int64_t out_ss,
                                 int64_t out_sh, float *lse, int64_t lse_sh) {
    const int64_t hr = blockIdx.x;
    const int64_t h = hr / rows, j = hr - h * rows;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) st(out, j * out_ss + h * out_sh + d, 0.f);
    if (lse && threadIdx.x == 0) lse[h * lse_sh + j] = -INFINITY;
}

unsigned grid_1d(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return unsigned(b < 65536 ? (b < 1 ? 1 : b) : 65536);  // grid-stride loops cover the rest
}

}  // namespace

cudaError_t launch_softmax(const SoftmaxArgs &a, cudaStream_t st) {
    if (a.hq * a.lq == 0) return cudaSuccess;
    if (!a.bias) return softmax_low<NoBias>(a, st);
    switch (a.bias_dtype) {
        case FATTN_F16: return softmax_low<__half>(a, st);
        case FATTN_BF16: return softmax_low<__nv_bfloat16>(a, st);
        default: return softmax_low<float>(a, st);
    }
}

cudaError_t launch_delta(const DeltaArgs &a, cudaStream_t st) {
    const int64_t rows = a.hq * a.lq;
    if (rows == 0) return cudaSuccess;
    constexpr int kWarps = 8;
    dim3 grid(unsigned((rows + kWarps - 1) / kWarps));
    switch (a.dtype) {
        case FATTN_F16: delta_kernel<__half><<<grid, kWarps * 32, 0, st>>>(a); break;
        case FATTN_BF16: delta_kernel<__nv_bfloat16><<<grid, kWarps * 32, 0, st>>>(a); break;
        default: delta_kernel<float><<<grid, kWarps * 32, 0, st>>>(a); break;
    }
    return cudaGetLastError();
}

cudaError_t launch_ds(const DsArgs &a, cudaStream_t st) {
    if (a.rows == 0) return cudaSuccess;
    dim3 grid(unsigned(a.rows));
    switch (a.low_dtype) {
        case FATTN_F16: ds_kernel<__half><<<grid, kRowThreads, 0, st>>>(a); break;
        case FATTN_BF16: ds_kernel<__nv_bfloat16><<<grid, kRowThreads, 0, st>>>(a); break;
        default: ds_kernel<float><<<grid, kRowThreads, 0, st>>>(a); break;
    }
    return cudaGetLastError();
}

cudaError_t launch_dbias_acc(const DbiasArgs &a, cudaStream_t st) {
    const int64_t n = (a.sh ? a.hq : 1) * (a.si ? a.lq : 1) * a.lk;
    if (n == 0 || a.hq * a.lq == 0) return cudaSuccess;
    dbias_acc_kernel<<<grid_1d(n, 256), 256, 0, st>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_zero_4d(float *d, int64_t nb, int64_t nh, int64_t ni, int64_t nk, int64_t sb,
                           int64_t sh, int64_t si, cudaStream_t st) {
    const int64_t n = nb * nh * ni * nk;
    if (n == 0) return cudaSuccess;
    zero_4d_kernel<<<grid_1d(n, 256), 256, 0, st>>>(d, nb, nh, ni, nk, sb, sh, si);
    return cudaGetLastError();
}

cudaError_t launch_to_low(const float *src, void *dst, fattn_dtype low_dtype, int64_t n,
                          cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = grid_1d(n, 256);
    if (low_dtype == FATTN_F16)
        to_low_kernel<<<g, 256, 0, st>>>(src, static_cast<__half *>(dst), n);
    else
        to_low_kernel<<<g, 256, 0, st>>>(src, static_cast<__nv_bfloat16 *>(dst), n);
    return cudaGetLastError();
}

cudaError_t launch_store_acc(const float *acc, void *out, fattn_dtype dtype, int64_t heads,
                             int64_t rows, int64_t dim, int64_t out_ss, int64_t out_sh,
                             cudaStream_t st) {
    if (heads * rows == 0) return cudaSuccess;
    dim3 grid(unsigned(heads * rows));
    int threads = dim >= 128 ? 128 : 64;
    switch (dtype) {
        case FATTN_F16:
            store_acc_kernel<<<grid, threads, 0, st>>>(acc, static_cast<__half *>(out), heads, rows,
                                                       dim, out_ss, out_sh);
            break;
        case FATTN_BF16:
            store_acc_kernel<<<grid, threads, 0, st>>>(acc, static_cast<__nv_bfloat16 *>(out), heads,
                                                       rows, dim, out_ss, out_sh);
            break;
        default:
            store_acc_kernel<<<grid, threads, 0, st>>>(acc, static_cast<float *>(out), heads, rows,
                                                       dim, out_ss, out_sh);
            break;
    }
    return cudaGetLastError();
}

cudaError_t launch_zero_rows(void *out, fattn_dtype dtype, int64_t heads, int64_t rows,
                             int64_t dim, int64_t out_ss, int64_t out_sh, float *lse,
                             int64_t lse_sh, cudaStream_t st) {
    if (heads * rows == 0) return cudaSuccess;
    dim3 grid(unsigned(heads * rows));
    switch (dtype) {
        case FATTN_F16:
            zero_rows_kernel<<<grid, 64, 0, st>>>(static_cast<__half *>(out), heads, rows, dim,
                                                  out_ss, out_sh, lse, lse_sh);
            break;
        case FATTN_BF16:
            zero_rows_kernel<<<grid, 64, 0, st>>>(static_cast<__nv_bfloat16 *>(out), heads, rows,
                                                  dim, out_ss, out_sh, lse, lse_sh);
            break;
        default:
            zero_rows_kernel<<<grid, 64, 0, st>>>(static_cast<float *>(out), heads, rows, dim,
                                                  out_ss, out_sh, lse, lse_sh);
            break;
    }
    return cudaGetLastError();
}

}  // namespace fattn::cuda::exact
