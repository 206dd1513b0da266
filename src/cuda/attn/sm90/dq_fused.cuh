// dq_fused.cuh — the two small kernels around the fused dQ of the sm_90a backward
// (FATTN_SM90_DQ_FUSED; bwd_dkdv_kernel.cuh): the query tiles' counters zeroed before the dK/dV
// kernel (and the accumulator too in an FATTN_SM90_DQ_FUSED=2 build), and dq = scale · acc in the
// input dtype after it (a tile no key tile added to — its rows see no key — is written as zeros;
// its accumulator tile was never written).
#pragma once

#include "cuda/attn/sm90/bwd_dkdv_kernel.cuh"

namespace fattn::cuda::attn {

constexpr int kDqfThreads = 256;

// x[0, n) = 0 (32-bit words); one word per thread.
__global__ void __launch_bounds__(kDqfThreads) sm90_zero_words_kernel(uint32_t *x, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * kDqfThreads + threadIdx.x;
    if (i < n) x[i] = 0;
}

// Grid (fd.mtiles, Hq, sequences): one 64-row query tile of one head per CTA, read in
// sm90_dqf_index's order, written row by row (two columns a thread).
template <typename T, int D>
__global__ void __launch_bounds__(kDqfThreads) sm90_dq_convert_kernel(const AttnBwdParams p, const Sm90DqAcc fd) {
    constexpr int kBM = sm90_dkdv_bm(), C2 = D / 2;
    const SeqRange sr = seq_range(p, blockIdx.z);
    const int64_t h = blockIdx.y, m0 = int64_t(blockIdx.x) * kBM;
    if (m0 >= sr.q_len) return;
    const bool added = fd.cnt[(int64_t(blockIdx.z) * p.hq + h) * fd.mtiles + blockIdx.x] > 0;
    const int rows = int(sr.q_len - m0 < kBM ? sr.q_len - m0 : kBM);
    const float *acc = fd.tile(p, sr, blockIdx.z, h, m0, D);
    T *dq = static_cast<T *>(p.dq) + sr.batch_index * p.dq_sb + (sr.q_begin + m0) * p.dq_ss + h * p.dq_sh;
    for (int e = threadIdx.x; e < rows * C2; e += kDqfThreads) {
        const int r = e / C2, c = (e % C2) * 2;
        float2 v = make_float2(0.f, 0.f);  // columns c and c + 1: adjacent in the tile's order
        if (added) v = *reinterpret_cast<const float2 *>(acc + sm90_dqf_index(r, c));
        if (c < p.d) dq[int64_t(r) * p.dq_ss + c] = from_f<T>(v.x * p.scale);  // head dims below the bucket
        if (c + 1 < p.d) dq[int64_t(r) * p.dq_ss + c + 1] = from_f<T>(v.y * p.scale);
    }
}

}  // namespace fattn::cuda::attn
