// dq_fused.cuh — the two small kernels around the fused dQ of the sm_90a backward
// (FATTN_SM90_DQ_FUSED; bwd_dkdv_kernel.cuh): the query tiles' counters zeroed before the dK/dV
// kernel (and the accumulator too in an FATTN_SM90_DQ_FUSED=2 build), and dq = scale · acc in the
// input dtype after it (a tile no key tile added to — its rows see no key — is written as zeros;
// its accumulator rows were never written).
#pragma once

#include "cuda/attn/sm90/bwd_dkdv_kernel.cuh"

namespace fattn::cuda::attn {

constexpr int kDqfThreads = 256;

// x[0, n) = 0 (32-bit words); one word per thread.
__global__ void __launch_bounds__(kDqfThreads) sm90_zero_words_kernel(uint32_t *x, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * kDqfThreads + threadIdx.x;
    if (i < n) x[i] = 0;
}

// Grid (fd.mtiles, Hq, sequences): one 64-row query tile of one head per CTA.
template <typename T, int D>
__global__ void __launch_bounds__(kDqfThreads) sm90_dq_convert_kernel(const AttnBwdParams p, const Sm90DqAcc fd) {
    constexpr int kBM = sm90_dkdv_bm(), C4 = D / 4;
    const SeqRange sr = seq_range(p, blockIdx.z);
    const int64_t h = blockIdx.y, m0 = int64_t(blockIdx.x) * kBM;
    if (m0 >= sr.q_len) return;
    const bool added = fd.cnt[(int64_t(blockIdx.z) * p.hq + h) * fd.mtiles + blockIdx.x] > 0;
    const int rows = int(sr.q_len - m0 < kBM ? sr.q_len - m0 : kBM);
    const float *acc = fd.acc + ((sr.batch_index * p.hq + h) * p.total_q + sr.q_begin + m0) * D;
    T *dq = static_cast<T *>(p.dq) + sr.batch_index * p.dq_sb + (sr.q_begin + m0) * p.dq_ss + h * p.dq_sh;
    for (int e = threadIdx.x; e < rows * C4; e += kDqfThreads) {
        const int r = e / C4, c = (e % C4) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (added) v = *reinterpret_cast<const float4 *>(acc + int64_t(r) * D + c);
        const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (c + k < p.d) dq[int64_t(r) * p.dq_ss + c + k] = from_f<T>(x[k] * p.scale);  // head dims below the bucket
    }
}

}  // namespace fattn::cuda::attn
