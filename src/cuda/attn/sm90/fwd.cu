// fwd.cu — launchers of the sm_90a forward (fwd_kernel.cuh): the TMA tensor maps (tmap.cu), the
// grid, the dtype × head-dim dispatch, and for f32 inputs (tf32) the pre-pass staging K and Vᵀ
// rounded to tf32 in the workspace. Compiled for 90a only (CMake: the fattn_sm90 object library);
// select.cpp decides with sm90_fwd_legal() whether a request may run here.
#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/fwd_kernel.cuh"
#include "cuda/attn/sm90/tmap.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

static_assert(sm90_fwd_smem(128, 4) <= 227 * 1024 && sm90_fwd_smem(64, 4) <= 227 * 1024, "sm90 tf32 fwd smem");

template <typename T, int D>
cudaError_t run(const AttnFwdParams &p, const KArgs &a, const Sm90Maps &maps, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_q, sm90cfg::kBM), unsigned(p.hq), unsigned(p.batch));
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    const size_t smem = sm90cfg::smem_bytes(D, sizeof(T));
    auto k = sm90_fwd_kernel<T, D>;
    cudaError_t e;
    if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem))) != cudaSuccess) return e;
    k<<<grid, sm90cfg::kThreads, smem, st>>>(p, a, maps);
    return cudaGetLastError();
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

// The tf32 pre-pass, one CTA per (32-key chunk, kv head, sequence): K rounded to tf32 into kr,
// V rounded and transposed into vt (workspace.h: layouts, key order). Every column of vt a tile
// can read holds a finite value: the keys of the sequence's last 8-key group past its end and the
// gap up to the next sequence's first column (up to vt_cols after the last sequence) are written
// as 0 by chunk 0, so P·V multiplies zeros there (P is 0), never stale workspace. Rows of kr past
// a sequence are only read as logits the softmax masks to -inf (never multiplied): no fill.
template <int D>
__global__ void __launch_bounds__(256)
    sm90_tf32_stage_kernel(const AttnFwdParams p, float *kr, float *vt, int64_t kr_rows, int64_t vt_cols) {
    __shared__ float tile[32][D + 1];  // +1: the transposed reads of 32 keys hit 32 banks
    const int64_t s = blockIdx.z, hk = blockIdx.y;
    const SeqRange sr = seq_range(p, s);
    const int64_t j0 = int64_t(blockIdx.x) * 32;
    const int64_t flat0 = sr.batch_index * p.total_kv + sr.kv_begin;
    float *vt_h = vt + hk * int64_t(D) * vt_cols;
    if (j0 == 0) {  // the gap after this sequence's last group: [end, next sequence's first column)
        const int64_t end = sm90_vt_col0(flat0, s) + (sr.kv_len + 7) / 8 * 8;
        const int64_t stop = s + 1 < p.batch ? sm90_vt_col0(flat0 + sr.kv_len, s + 1) : vt_cols;
        for (int64_t e = threadIdx.x; e < (stop - end) * D; e += 256)
            vt_h[(e / (stop - end)) * vt_cols + end + e % (stop - end)] = 0.f;
    }
    if (j0 >= sr.kv_len) return;
    const float *k = static_cast<const float *>(p.k) + sr.batch_index * p.k_sb + hk * p.k_sh;
    const float *v = static_cast<const float *>(p.v) + sr.batch_index * p.v_sb + hk * p.v_sh;
    float *krows = kr + (hk * kr_rows + flat0) * D;
    for (int e = threadIdx.x; e < 32 * D; e += 256) {
        const int r = e / D, c = e % D;
        const int64_t j = j0 + r;
        float x = 0.f;
        if (j < sr.kv_len) {
            krows[j * D + c] = __uint_as_float(to_tf32(k[(sr.kv_begin + j) * p.k_ss + c]));
            x = __uint_as_float(to_tf32(v[(sr.kv_begin + j) * p.v_ss + c]));
        }
        tile[r][c] = x;
    }
    __syncthreads();
    const int64_t cols = (sr.kv_len + 7) / 8 * 8 - j0;  // this chunk's columns: whole 8-key groups
    float *vrows = vt_h + sm90_vt_col0(flat0, s) + j0;
    for (int e = threadIdx.x; e < 32 * D; e += 256) {
        const int d = e / 32, c = e % 32;
        if (c < cols) vrows[int64_t(d) * vt_cols + c] = tile[(c & ~7) + tf32_key_order(c & 7)][d];
    }
}

template <int D>
cudaError_t launch_tf32(const AttnFwdParams &p, const KArgs &a, const Workspace &w, void *workspace, cudaStream_t st) {
    constexpr int bn = sm90_fwd_bn(D, 4);
    float *kr = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.kr_off);
    float *vt = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.vt_off);
    const dim3 sg(ceil_div_u(p.seqlen_kv, 32), unsigned(p.hkv), unsigned(p.batch));
    if (sg.x && sg.y && sg.z) {
        sm90_tf32_stage_kernel<D><<<sg, 256, 0, st>>>(p, kr, vt, w.kr_rows, w.vt_cols);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps maps;
    cudaError_t e;
    if ((e = sm90_map(&maps.q, p.q, FATTN_F32, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90cfg::kBM)) != cudaSuccess ||
        (e = sm90_map(&maps.k, kr, FATTN_F32, D, w.kr_rows, p.hkv, 1, D, w.kr_rows * D, 0, bn)) != cudaSuccess ||
        (e = sm90_map(&maps.v, vt, FATTN_F32, w.vt_cols, D, p.hkv, 1, w.vt_cols, D * w.vt_cols, 0, D)) != cudaSuccess)
        return e;
    return run<float, D>(p, a, maps, st);
}

}  // namespace

cudaError_t sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st) {
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, st) : launch<__nv_bfloat16, 128>(p, a, st);
    return db == 64 ? launch<__half, 64>(p, a, st) : launch<__half, 128>(p, a, st);
}

cudaError_t sm90_fwd_tf32(const AttnFwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                          cudaStream_t st) {
    return db == 64 ? launch_tf32<64>(p, a, w, workspace, st) : launch_tf32<128>(p, a, w, workspace, st);
}

}  // namespace fattn::cuda::attn
