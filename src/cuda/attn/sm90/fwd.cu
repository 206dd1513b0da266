// fwd.cu — launcher of the sm_90a forward (fwd_kernel.cuh): the TMA tensor maps of q, k, v, the
// grid, and the dtype × head-dim dispatch. Compiled for 90a only (CMake: the fattn_sm90 object
// library); select.cpp decides with sm90_fwd_legal() whether a request may run here.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/fwd_kernel.cuh"

namespace fattn::cuda::attn {
namespace {

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

// A [batch, rows, heads, d] view (element strides, innermost 1) as a 4-D tensor map whose box is
// one 64-column panel of box_rows rows, 128-byte swizzled (the panel layout of sm90/ptx.cuh).
// Rows past `rows` (the end of the view) read as zeros.
cudaError_t make_map(CUtensorMap *m, const void *data, fattn_dtype dt, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t ss, int64_t sh, int64_t sb, int box_rows) {
    auto enc = encode_fn();
    if (!enc) return cudaErrorNotSupported;
    const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
    const cuuint64_t strides[3] = {cuuint64_t(ss) * 2, cuuint64_t(sh) * 2, cuuint64_t(sb) * 2};
    const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUresult r = enc(m, dt == FATTN_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                           const_cast<void *>(data), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename T, int D>
cudaError_t launch(const AttnFwdParams &p, const KArgs &a, cudaStream_t st) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    Sm90Maps maps;
    cudaError_t e;
    if ((e = make_map(&maps.q, p.q, p.dtype, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, sm90cfg::kBM)) != cudaSuccess ||
        (e = make_map(&maps.k, p.k, p.dtype, p.d, p.total_kv, p.hkv, bview, p.k_ss, p.k_sh, p.k_sb, sm90cfg::kBN)) != cudaSuccess ||
        (e = make_map(&maps.v, p.v, p.dtype, p.dim_v, p.total_kv, p.hkv, bview, p.v_ss, p.v_sh, p.v_sb, sm90cfg::kBN)) != cudaSuccess)
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
