// tf32.cu — instances of the tensor-core kernels for prec TF32 (f32 inputs, mma m16n8k8): head-dim
// buckets 64, 128 and 256, forward, dQ, dK/dV and the bias gradient (12 kernels).
#include "cuda/attn/mma_launch.cuh"

namespace fattn::cuda::attn {

cudaError_t tf32_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) { return mma_fwd_launch<float, b.value>(p, a, st); });
}

cudaError_t tf32_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) { return mma_bwd_launch<float, b.value>(p, a, st); });
}

cudaError_t tf32_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) { return mma_dbias_launch<float, b.value>(p, a, st); });
}

}  // namespace fattn::cuda::attn
