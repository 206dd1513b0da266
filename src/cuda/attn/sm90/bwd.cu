// bwd.cu — launcher of the sm_90a backward: the dK/dV kernel (bwd_dkdv_kernel.cuh) then the dQ
// kernel (bwd_dq_kernel.cuh), each with its own TMA tensor maps (tmap.cu; box heights follow the
// kernels' tiles), the grids, and the dtype × head-dim dispatch. δ, the bias map and ceilings
// come from launch.cu's pre-passes, as for the portable kernels.
#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/bwd_dkdv_kernel.cuh"
#include "cuda/attn/sm90/bwd_dq_kernel.cuh"
#include "cuda/attn/sm90/tmap.h"

namespace fattn::cuda::attn {
namespace {

static_assert(sm90bwd::dkdv_smem(128) <= 227 * 1024 && sm90dq::dq_smem(128) <= 227 * 1024, "sm90 bwd smem");

// q and dout with query tiles of qrows rows, k and v with key tiles of kvrows rows.
cudaError_t maps_of(const AttnBwdParams &p, int qrows, int kvrows, Sm90Maps *m, CUtensorMap *tm_do) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    cudaError_t e;
    if ((e = sm90_map(&m->q, p.q, p.dtype, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, qrows)) != cudaSuccess ||
        (e = sm90_map(tm_do, p.dout, p.dtype, p.dim_v, p.total_q, p.hq, bview, p.do_ss, p.do_sh, p.do_sb, qrows)) != cudaSuccess ||
        (e = sm90_map(&m->k, p.k, p.dtype, p.d, p.total_kv, p.hkv, bview, p.k_ss, p.k_sh, p.k_sb, kvrows)) != cudaSuccess ||
        (e = sm90_map(&m->v, p.v, p.dtype, p.dim_v, p.total_kv, p.hkv, bview, p.v_ss, p.v_sh, p.v_sb, kvrows)) != cudaSuccess)
        return e;
    return cudaSuccess;
}

template <typename T, int D>
cudaError_t launch(const AttnBwdParams &p, const KArgs &a, cudaStream_t st) {
    Sm90Maps m;
    CUtensorMap tm_do;
    cudaError_t e;
    {  // dK/dV: 128-key CTAs, 64-row (D128) or 128-row (D64) query items
        if ((e = maps_of(p, sm90bwd::bm(D), sm90bwd::kBN, &m, &tm_do)) != cudaSuccess) return e;
        const dim3 grid(ceil_div_u(p.seqlen_kv, sm90bwd::kBN), unsigned(p.hkv), unsigned(p.batch));
        const size_t smem = sm90bwd::dkdv_smem(D);
        auto k = sm90_dkdv_kernel<T, D>;
        if (grid.x && grid.y && grid.z) {
            if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))) != cudaSuccess) return e;
            k<<<grid, sm90bwd::kThreads, smem, st>>>(p, a, m, tm_do);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    {  // dQ: 128-row CTAs, 64-key (D128) or 128-key (D64) steps
        if ((e = maps_of(p, sm90dq::kBM, sm90dq::bn(D), &m, &tm_do)) != cudaSuccess) return e;
        const dim3 grid(ceil_div_u(p.seqlen_q, sm90dq::kBM), unsigned(p.hq), unsigned(p.batch));
        const size_t smem = sm90dq::dq_smem(D);
        auto k = sm90_dq_kernel<T, D>;
        if (grid.x && grid.y && grid.z) {
            if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))) != cudaSuccess) return e;
            k<<<grid, sm90dq::kThreads, smem, st>>>(p, a, m, tm_do);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

}  // namespace

cudaError_t sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, st) : launch<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? launch<__half, 64>(p, a, st) : launch<__half, 128>(p, a, st);
}

}  // namespace fattn::cuda::attn
