// scalar.cu — instances and launchers of the strict-f32 kernels (prec F32): f32/f16/bf16 inputs,
// head-dim buckets 64, 128 and 256, forward, dQ, dK/dV and the bias gradient.
#include "cuda/attn/launch.h"
#include "cuda/attn/scalar.cuh"

namespace fattn::cuda::attn {
namespace {

template <typename T, int DB>
cudaError_t fwd_t(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_q, sc_rows()), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(sc_fwd_kernel<T, DB>, grid, sc_threads(), sc_fwd_smem(DB), st, p, a);
}

template <typename T, int DB>
cudaError_t bwd_t(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    const dim3 gkv(ceil_div_u(p.seqlen_kv, sc_rows()), unsigned(p.hkv), unsigned(p.batch));
    cudaError_t e = launch_kernel(sc_dkdv_kernel<T, DB>, gkv, sc_threads(), sc_dkdv_smem(DB), st, p, a);
    if (e != cudaSuccess) return e;
    const dim3 gq(ceil_div_u(p.seqlen_q, sc_rows()), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(sc_dq_kernel<T, DB>, gq, sc_threads(), sc_dq_smem(DB), st, p, a);
}

template <typename T, int DB>
cudaError_t dbias_t(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    int64_t g[3];
    dbias_grid(p, sc_rows(), sc_cols(DB), g);
    return launch_kernel(sc_dbias_kernel<T, DB>, dim3(unsigned(g[0]), unsigned(g[1]), unsigned(g[2])), sc_threads(),
                         sc_dbias_smem(DB), st, p, a);
}

template <typename T>
cudaError_t fwd_d(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return db == 64 ? fwd_t<T, 64>(p, a, st) : db == 128 ? fwd_t<T, 128>(p, a, st) : fwd_t<T, 256>(p, a, st);
}
template <typename T>
cudaError_t bwd_d(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return db == 64 ? bwd_t<T, 64>(p, a, st) : db == 128 ? bwd_t<T, 128>(p, a, st) : bwd_t<T, 256>(p, a, st);
}

}  // namespace

cudaError_t scalar_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    switch (p.dtype) {
    case FATTN_F16: return fwd_d<__half>(p, a, db, st);
    case FATTN_BF16: return fwd_d<__nv_bfloat16>(p, a, db, st);
    default: return fwd_d<float>(p, a, db, st);
    }
}

cudaError_t scalar_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    switch (p.dtype) {
    case FATTN_F16: return bwd_d<__half>(p, a, db, st);
    case FATTN_BF16: return bwd_d<__nv_bfloat16>(p, a, db, st);
    default: return bwd_d<float>(p, a, db, st);
    }
}

cudaError_t scalar_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    return mma_bucket(db, [&](auto b) {
        return p.dtype == FATTN_F16    ? dbias_t<__half, b.value>(p, a, st)
               : p.dtype == FATTN_BF16 ? dbias_t<__nv_bfloat16, b.value>(p, a, st)
                                       : dbias_t<float, b.value>(p, a, st);
    });
}

}  // namespace fattn::cuda::attn
