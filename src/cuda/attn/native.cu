// native.cu — instances of the tensor-core kernels for prec NATIVE: bf16 and f16, head-dim
// buckets 64, 128 and 256, forward, dQ, dK/dV and the bias gradient (24 kernels).
#include "cuda/attn/mma_launch.cuh"

namespace fattn::cuda::attn {

cudaError_t native_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) {
        return p.dtype == FATTN_BF16 ? mma_fwd_launch<__nv_bfloat16, b.value>(p, a, st)
                                     : mma_fwd_launch<__half, b.value>(p, a, st);
    });
}

cudaError_t native_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) {
        return p.dtype == FATTN_BF16 ? mma_bwd_launch<__nv_bfloat16, b.value>(p, a, st)
                                     : mma_bwd_launch<__half, b.value>(p, a, st);
    });
}

cudaError_t native_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) {
        return p.dtype == FATTN_BF16 ? mma_dbias_launch<__nv_bfloat16, b.value>(p, a, st)
                                     : mma_dbias_launch<__half, b.value>(p, a, st);
    });
}

}  // namespace fattn::cuda::attn
