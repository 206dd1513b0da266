// tf32.cu — instances of the tensor-core kernels for prec TF32 (f32 inputs, mma m16n8k8): head-dim
// buckets 64 and 128, forward, dQ, dK/dV and the bias gradient (8 kernels).
#include "cuda/attn/mma_launch.cuh"

namespace fattn::cuda::attn {

cudaError_t tf32_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return db == 64 ? mma_fwd_launch<float, 64>(p, a, st) : mma_fwd_launch<float, 128>(p, a, st);
}

cudaError_t tf32_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return db == 64 ? mma_bwd_launch<float, 64>(p, a, st) : mma_bwd_launch<float, 128>(p, a, st);
}

cudaError_t tf32_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return db == 64 ? mma_dbias_launch<float, 64>(p, a, st) : mma_dbias_launch<float, 128>(p, a, st);
}

}  // namespace fattn::cuda::attn
