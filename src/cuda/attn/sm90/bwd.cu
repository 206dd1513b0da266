// bwd.cu — launcher of the sm_90a backward: the dK/dV kernel (bwd_dkdv_kernel.cuh) then the dQ
// kernel (bwd_dq_kernel.cuh), each with its own TMA tensor maps (tmap.cu; box heights follow the
// kernels' tiles), the grids, and the dtype × head-dim dispatch. δ, the bias map and ceilings
// come from launch.cu's pre-passes, as for the portable kernels.
#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/bwd_dkdv_kernel.cuh"
#include "cuda/attn/sm90/bwd_dq_kernel.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/sm90/tmap.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

static_assert(sm90bwd::dkdv_smem(128) <= 227 * 1024 && sm90dq::dq_smem(128) <= 227 * 1024 &&
                  sm90dq::dq_smem(128, 4) <= 227 * 1024,
              "sm90 bwd smem");

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
            k<<<grid, sm90dq::kThreads, smem, st>>>(p, a, m, tm_do, tm_do);  // no Kᵀ map: 16-bit
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

// f32 inputs: the dQ kernel on tf32 wgmma over the pre-pass's rounded K, V rows and Kᵀ
// (stage_tf32.cu); dK/dV come from the mma.sync tf32 kernel (launch.cu).
template <int D>
cudaError_t launch_dq_tf32(const AttnBwdParams &p, const KArgs &a, const Workspace &w, void *workspace, cudaStream_t st) {
    constexpr int bn = sm90dq::bn(D, 4);
    char *ws = static_cast<char *>(workspace);
    float *kr = reinterpret_cast<float *>(ws + w.kr_off), *vr = reinterpret_cast<float *>(ws + w.vr_off);
    float *kt = reinterpret_cast<float *>(ws + w.tr_off);
    Sm90Stage sg{};
    sg.row_src[0] = {static_cast<const float *>(p.k), p.k_sb, p.k_ss, p.k_sh};
    sg.row_src[1] = {static_cast<const float *>(p.v), p.v_sb, p.v_ss, p.v_sh};
    sg.rows[0] = kr;
    sg.rows[1] = vr;
    sg.nrows = 2;
    sg.t_src = sg.row_src[0];
    sg.tr = kt;
    cudaError_t e;
    if ((e = sm90_tf32_stage(p, D, sg, w, st)) != cudaSuccess) return e;
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps m;
    CUtensorMap tm_do, tm_kt;
    if ((e = sm90_map(&m.q, p.q, FATTN_F32, D, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90dq::kBM)) != cudaSuccess ||
        (e = sm90_map(&tm_do, p.dout, FATTN_F32, D, p.total_q, p.hq, bview, p.do_ss, p.do_sh, p.do_sb, sm90dq::kBM)) != cudaSuccess ||
        (e = sm90_map(&m.k, kr, FATTN_F32, D, w.kr_rows, p.hkv, 1, D, w.kr_rows * D, 0, bn)) != cudaSuccess ||
        (e = sm90_map(&m.v, vr, FATTN_F32, D, w.kr_rows, p.hkv, 1, D, w.kr_rows * D, 0, bn)) != cudaSuccess ||
        (e = sm90_map(&tm_kt, kt, FATTN_F32, w.vt_cols, D, p.hkv, 1, w.vt_cols, D * w.vt_cols, 0, D)) != cudaSuccess)
        return e;
    const dim3 grid(ceil_div_u(p.seqlen_q, sm90dq::kBM), unsigned(p.hq), unsigned(p.batch));
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    const size_t smem = sm90dq::dq_smem(D, 4);
    auto k = sm90_dq_kernel<float, D>;
    if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))) != cudaSuccess) return e;
    k<<<grid, sm90dq::kThreads, smem, st>>>(p, a, m, tm_do, tm_kt);
    return cudaGetLastError();
}

}  // namespace

cudaError_t sm90_dq_tf32(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                         cudaStream_t st) {
    return db == 64 ? launch_dq_tf32<64>(p, a, w, workspace, st) : launch_dq_tf32<128>(p, a, w, workspace, st);
}

cudaError_t sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, st) : launch<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? launch<__half, 64>(p, a, st) : launch<__half, 128>(p, a, st);
}

}  // namespace fattn::cuda::attn
