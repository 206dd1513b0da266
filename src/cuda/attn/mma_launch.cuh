// mma_launch.cuh — launchers of the tensor-core kernels for one element type (included by the
// per-type instance files native.cu and tf32.cu, which the build compiles in parallel).
#pragma once

#include "cuda/attn/launch.h"
#include "cuda/attn/mma_bwd.cuh"
#include "cuda/attn/mma_fwd.cuh"

namespace fattn::cuda::attn {

template <typename T, int DB>
cudaError_t mma_fwd_launch(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_q, mma_fwd_bm(DB, sizeof(T))), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(mma_fwd_kernel<T, DB>, grid, 32 * mma_fwd_warps(sizeof(T)), mma_fwd_smem(DB, sizeof(T)), st, p, a);
}

template <typename T, int DB>
cudaError_t mma_bwd_launch(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 gkv(ceil_div_u(p.seqlen_kv, mma_bwd_bn()) * unsigned(mma_dkdv_splits(DB)), unsigned(p.hkv),
                   unsigned(p.batch));
    cudaError_t e = launch_kernel(mma_dkdv_kernel<T, DB>, gkv, mma_threads(), mma_dkdv_smem(DB, sizeof(T)), st, p, a);
    if (e != cudaSuccess) return e;
    const dim3 gq(ceil_div_u(p.seqlen_q, mma_dq_bm(DB, sizeof(T))), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(mma_dq_kernel<T, DB>, gq, 32 * mma_fwd_warps(sizeof(T)), mma_dq_smem(DB, sizeof(T)), st, p, a);
}

// The bias gradient (after the dK/dV and dQ kernels; it reads δ, lse and the bias map as they do).
template <typename T, int DB>
cudaError_t mma_dbias_launch(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    int64_t g[3];
    mma_dbias_grid(p, DB, sizeof(T), g);
    return launch_kernel(mma_dbias_kernel<T, DB>, dim3(unsigned(g[0]), unsigned(g[1]), unsigned(g[2])), mma_threads(), mma_dbias_smem(DB, sizeof(T)), st, p, a);
}

}  // namespace fattn::cuda::attn
