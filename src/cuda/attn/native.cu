// native.cu — instances and launchers of the tensor-core kernels (prec NATIVE): bf16 and f16,
// head-dim buckets 64 and 128, forward, dQ and dK/dV (12 kernels).
#include "cuda/attn/launch.h"
#include "cuda/attn/mma_bwd.cuh"
#include "cuda/attn/mma_fwd.cuh"

namespace fattn::cuda::attn {
namespace {

template <typename T, int DB>
cudaError_t fwd_t(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_q, mma_fwd_bm()), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(mma_fwd_kernel<T, DB>, grid, mma_fwd_smem(DB), st, p, a);
}

template <typename T, int DB>
cudaError_t bwd_t(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 gkv(ceil_div_u(p.seqlen_kv, mma_bwd_bn()), unsigned(p.hkv), unsigned(p.batch));
    cudaError_t e = launch_kernel(mma_dkdv_kernel<T, DB>, gkv, mma_dkdv_smem(DB), st, p, a);
    if (e != cudaSuccess) return e;
    const dim3 gq(ceil_div_u(p.seqlen_q, mma_fwd_bm()), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(mma_dq_kernel<T, DB>, gq, mma_dq_smem(DB), st, p, a);
}

}  // namespace

cudaError_t native_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16) return db == 64 ? fwd_t<__nv_bfloat16, 64>(p, a, st) : fwd_t<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? fwd_t<__half, 64>(p, a, st) : fwd_t<__half, 128>(p, a, st);
}

cudaError_t native_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16) return db == 64 ? bwd_t<__nv_bfloat16, 64>(p, a, st) : bwd_t<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? bwd_t<__half, 64>(p, a, st) : bwd_t<__half, 128>(p, a, st);
}

}  // namespace fattn::cuda::attn
