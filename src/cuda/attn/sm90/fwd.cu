// fwd.cu — launcher of the sm_90a forward (fwd_kernel.cuh): the TMA tensor maps of q, k, v
// (tmap.cu), the grid, and the dtype × head-dim dispatch. Compiled for 90a only (CMake: the fattn_sm90 object
// library); select.cpp decides with sm90_fwd_legal() whether a request may run here.
#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/fwd_kernel.cuh"
#include "cuda/attn/sm90/tmap.h"

namespace fattn::cuda::attn {
namespace {

template <typename T, int D>
cudaError_t launch(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps maps;
    cudaError_t e;
    if ((e = sm90_map(&maps.q, p.q, p.dtype, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90cfg::kBM)) != cudaSuccess ||
        (e = sm90_map(&maps.k, p.k, p.dtype, p.d, p.total_kv, p.hkv, bview, p.k_ss, p.k_sh, p.k_sb, sm90cfg::kBN)) != cudaSuccess ||
        (e = sm90_map(&maps.v, p.v, p.dtype, p.dim_v, p.total_kv, p.hkv, bview, p.v_ss, p.v_sh, p.v_sb, sm90cfg::kBN)) != cudaSuccess)
        return e;
    const dim3 grid(ceil_div_u(p.seqlen_q, sm90cfg::kBM), unsigned(p.hq), unsigned(p.batch));
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    const size_t smem = sm90cfg::smem_bytes(D);
    auto k = sm90_fwd_kernel<T, D>;
    if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))) != cudaSuccess) return e;
    k<<<grid, sm90cfg::kThreads, smem, st>>>(p, a, maps);
    return cudaGetLastError();
}

}  // namespace

cudaError_t sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, st) : launch<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? launch<__half, 64>(p, a, st) : launch<__half, 128>(p, a, st);
}

}  // namespace fattn::cuda::attn
