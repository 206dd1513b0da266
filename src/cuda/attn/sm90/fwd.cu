// fwd.cu — launchers of the sm_90a forward (fwd_kernel.cuh): the TMA tensor maps (tmap.cu), the
// grid, the dtype × head-dim dispatch, and for f32 inputs (tf32) the pre-pass staging K and Vᵀ
// rounded to tf32 in the workspace (stage_tf32.cu). Compiled for 90a only (CMake: the fattn_sm90 object library);
// select.cpp decides with sm90_fwd_legal() whether a request may run here.
#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/fwd_kernel.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/sm90/tmap.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

static_assert(sm90_fwd_smem(128, 4) <= 227 * 1024 && sm90_fwd_smem(64, 4) <= 227 * 1024, "sm90 tf32 fwd smem");

template <typename T, int D>
cudaError_t run(const AttnFwdParams &p, const KArgs &a, const Sm90Maps &maps, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_q, sm90cfg::kBM), unsigned(p.hq), unsigned(p.batch));
    return launch_kernel(sm90_fwd_kernel<T, D>, grid, sm90cfg::kThreads, sm90cfg::smem_bytes(D, sizeof(T)), st, p, a, maps);
}

template <typename T, int D>
cudaError_t launch(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    constexpr int bn = sm90_fwd_bn(D, sizeof(T));
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps maps;
    cudaError_t e;
    if ((e = sm90_map(&maps.q, p.q, p.dtype, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90cfg::kBM)) != cudaSuccess ||
        (e = sm90_map(&maps.k, p.k, p.dtype, p.d, p.total_kv, p.hkv, bview, p.k_ss, p.k_sh, p.k_sb, bn)) != cudaSuccess ||
        (e = sm90_map(&maps.v, p.v, p.dtype, p.dim_v, p.total_kv, p.hkv, bview, p.v_ss, p.v_sh, p.v_sb, bn)) != cudaSuccess)
        return e;
    return run<T, D>(p, a, maps, st);
}

template <int D>
cudaError_t launch_tf32(const AttnFwdParams &p, const KArgs &a, const Workspace &w, void *workspace, cudaStream_t st) {
    constexpr int bn = sm90_fwd_bn(D, 4);
    float *kr = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.kr_off);
    float *vt = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.tr_off);
    Sm90Stage sg{};
    sg.heads = p.hkv;
    sg.row_src[0] = {static_cast<const float *>(p.k), p.k_sb, p.k_ss, p.k_sh};
    sg.rows[0] = kr;
    sg.nrows = 1;
    sg.t_src[0] = {static_cast<const float *>(p.v), p.v_sb, p.v_ss, p.v_sh};
    sg.tr[0] = vt;
    sg.ntr = 1;
    cudaError_t e;
    if ((e = sm90_tf32_stage(p, D, sg, w.kr_rows, w.vt_cols, st)) != cudaSuccess) return e;
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps maps;
    if ((e = sm90_map(&maps.q, p.q, FATTN_F32, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90cfg::kBM)) != cudaSuccess ||
        (e = sm90_map(&maps.k, kr, FATTN_F32, D, w.kr_rows, p.hkv, 1, D, w.kr_rows * D, 0, bn)) != cudaSuccess ||
        (e = sm90_map(&maps.v, vt, FATTN_F32, w.vt_cols, D, p.hkv, 1, w.vt_cols, D * w.vt_cols, 0, D)) != cudaSuccess)
        return e;
    return run<float, D>(p, a, maps, st);
}

}  // namespace

cudaError_t sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
#if FATTN_SM90_D256
    if (db == 256) return p.dtype == FATTN_BF16 ? launch<__nv_bfloat16, 256>(p, a, st) : launch<__half, 256>(p, a, st);
#else
    if (db == 256) return cudaErrorInvalidValue;  // not built here (selection never asks for it then)
#endif
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, st) : launch<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? launch<__half, 64>(p, a, st) : launch<__half, 128>(p, a, st);
}

cudaError_t sm90_fwd_tf32(const AttnFwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                          cudaStream_t st) {
    return db == 64 ? launch_tf32<64>(p, a, w, workspace, st) : launch_tf32<128>(p, a, w, workspace, st);
}

}  // namespace fattn::cuda::attn
