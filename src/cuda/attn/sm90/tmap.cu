// tmap.cu — TMA tensor maps of the sm_90a kernels, built on the host for each call.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "cuda/attn/sm90/tmap.h"

namespace fattn::cuda::attn {

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link).
static PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
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
// one 128-byte panel (64 16-bit or 32 f32 columns) of box_rows rows, 128-byte swizzled (the panel
// layout of sm90/ptx.cuh). Rows past `rows` (the end of the view) read as zeros.
cudaError_t sm90_map(CUtensorMap *m, const void *data, fattn_dtype dt, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t ss, int64_t sh, int64_t sb, int box_rows) {
    auto enc = encode_fn();
    if (!enc) return cudaErrorNotSupported;
    const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
    // A dim of extent 1 is never stepped: its stride (any value in the view, 0 too) is replaced by
    // the span of the dims inside it, which the encoder accepts (a multiple of 16 bytes).
    const cuuint64_t es = dt == FATTN_F32 ? 4 : 2;
    cuuint64_t strides[3] = {cuuint64_t(ss) * es, cuuint64_t(sh) * es, cuuint64_t(sb) * es};
    cuuint64_t span = cuuint64_t(d) * es;
    for (int i = 0; i < 3; ++i) {
        if (dims[i + 1] <= 1) strides[i] = (span + 15) / 16 * 16;
        span = strides[i] * dims[i + 1];
    }
    const cuuint32_t box[4] = {cuuint32_t(128 / es), cuuint32_t(box_rows), 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUtensorMapDataType ty = dt == FATTN_F32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dt == FATTN_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const CUresult r = enc(m, ty, 4,
                           const_cast<void *>(data), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace fattn::cuda::attn
