// exact_kernels.h — the element-wise / row kernels of the CUDA exact arm (exact_kernels.cu), as
// plain launch functions that exact.cpp calls between its cuBLAS GEMMs. One sequence at a time:
// every pointer here is already offset to the sequence (batch index, first row), so the kernels
// see a dense problem of hq heads, lq query rows and lk keys.
//
// Buffers named "rows" are [hq, lq, lk] row-major with leading dimension lk (the layout of the
// probabilities the forward keeps in `saved`). No kernel here uses atomics; every reduction runs
// in a fixed tree order, so results are bitwise reproducible.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/attn_params.h"

namespace fattn::cuda::exact {

// In place: S (= scale·QKᵀ, written by the GEMM) -> P = softmax(S + bias, masked), per row.
// Masked keys (outside key_range) and fully masked rows get P = 0; lse = -inf for the latter.
struct SoftmaxArgs {
    float *p;              // [hq, lq, lk]
    void *p_low;           // optional copy of P in low_dtype (f16/bf16 GEMM operand), same layout
    fattn_dtype low_dtype; // FATTN_F32 = no copy
    float *lse;            // lse of (head 0, row 0) of this sequence; head stride lse_sh
    int64_t lse_sh;
    const void *bias;      // bias of (head 0, row 0, key 0) of this sequence, or nullptr
    fattn_dtype bias_dtype;
    int64_t bias_sh, bias_si;
    int64_t hq, lq, lk;
    AttnFwdParams mask;    // only the mask fields are read (key_range)
};
cudaError_t launch_softmax(const SoftmaxArgs &a, cudaStream_t st);

// delta[h*lq + i] = Σ_d dO[i,h,d]·O[i,h,d] (f32 accumulation, fixed order).
struct DeltaArgs {
    const void *o, *dout;  // (row 0, head 0) of this sequence
    fattn_dtype dtype;
    int64_t o_ss, o_sh, do_ss, do_sh;
    int64_t hq, lq, dv;
    float *delta;          // [hq, lq]
};
cudaError_t launch_delta(const DeltaArgs &a, cudaStream_t st);

// dS = P ∘ (dP − δ_row), written over dP (f32) or into ds_low (f16/bf16) when low_dtype != F32;
// with keep_f32 (dbias wanted) a low run writes the f32 dS over dP too.
struct DsArgs {
    const float *p;        // [hq, lq, lk]
    float *dp;             // [hq, lq, lk]
    void *ds_low;          // [hq, lq, lk] in low_dtype, or unused
    fattn_dtype low_dtype;
    const float *delta;    // [hq, lq]
    int64_t rows, lk;      // rows = hq*lq
    bool keep_f32 = false;
};
cudaError_t launch_ds(const DsArgs &a, cudaStream_t st);

// The bias gradient (core/attn_params.h: dbias, the bias's shape reduced over its broadcast
// dims): element (h, i, j) of one sequence at dbias + h·sh + i·si + j, sh / si = 0 where the sum
// runs over the heads / the query rows. launch_dbias_acc adds the sequence's f32 dS [hq, lq, lk]
// to it, one thread per element summing heads, then rows, in ascending order onto the element's
// value (exact.cpp calls it sequence after sequence: a fixed order, no atomics).
struct DbiasArgs {
    const float *ds;  // [hq, lq, lk]
    float *dbias;     // element (0, 0, 0) of the sequence
    int64_t sh, si;
    int64_t hq, lq, lk;
};
cudaError_t launch_dbias_acc(const DbiasArgs &a, cudaStream_t st);
// Zero a [nb, nh, ni, nk] f32 view (strides sb, sh, si; keys contiguous).
cudaError_t launch_zero_4d(float *d, int64_t nb, int64_t nh, int64_t ni, int64_t nk, int64_t sb,
                           int64_t sh, int64_t si, cudaStream_t st);

// dst[n] = (low_dtype) src[n]
cudaError_t launch_to_low(const float *src, void *dst, fattn_dtype low_dtype, int64_t n,
                          cudaStream_t st);

// Strided output rows from a dense f32 accumulator: out[j, h, d] = acc[h, j, d]
// (out already offset to the sequence's first row; out_ss/out_sh element strides).
cudaError_t launch_store_acc(const float *acc, void *out, fattn_dtype dtype, int64_t heads,
                             int64_t rows, int64_t dim, int64_t out_ss, int64_t out_sh,
                             cudaStream_t st);

// Zero strided rows out[j, h, d] for j < rows, h < heads, d < dim; and, when lse is given,
// lse[h*lse_sh + j] = -inf (the fully-masked-row convention for a sequence with no keys).
cudaError_t launch_zero_rows(void *out, fattn_dtype dtype, int64_t heads, int64_t rows,
                             int64_t dim, int64_t out_ss, int64_t out_sh, float *lse,
                             int64_t lse_sh, cudaStream_t st);

}  // namespace fattn::cuda::exact
