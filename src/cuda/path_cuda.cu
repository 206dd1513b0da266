// path_cuda.cu — the entry of the CUDA PaTH backend: the selection function and fwd / bwd, which
// hand the call to the input dtype's translation unit (path_cuda_{f32,f16,bf16}.cu). The kernels,
// their order and the workspace layout are in src/cuda/path.
#include "cuda/path/cuda_launcher.cuh"
#include "cuda/path_cuda.h"

namespace fattn::cuda {
namespace {

using pathk::bf16_t;
using pathk::f16_t;

size_t max_smem_d(fattn_dtype t, int D) {
    return t == FATTN_F32 ? pathk::cuda_max_smem<float>(D)
           : t == FATTN_F16 ? pathk::cuda_max_smem<f16_t>(D) : pathk::cuda_max_smem<bf16_t>(D);
}

fattn_status run(const PathBwdParams &p, void *stream, void *ws, bool bwd, std::string *err) {
    switch (p.dtype) {
    case FATTN_F32: return pathk::cuda_run<float>(p, stream, ws, bwd, err);
    case FATTN_F16: return pathk::cuda_run<f16_t>(p, stream, ws, bwd, err);
    default: return pathk::cuda_run<bf16_t>(p, stream, ws, bwd, err);
    }
}

}  // namespace

fattn_status path_select(const PathFwdParams &p, const DeviceInfo &dev, std::string *why) {
    // Any K, V up to 128 run on the kernels of the head dim above them (gpu_layout.h: gpu_dim),
    // with zeros past K and V in every tile.
    auto ok_dim = [](int64_t d) { return d >= 1 && d <= 128; };
    if (!ok_dim(p.dk) || !ok_dim(p.dv)) {
        if (why)
            *why = "q: head dims K = " + std::to_string(p.dk) + ", V = " + std::to_string(p.dv) +
                   ": the PaTH CUDA backend runs K and V from 1 to 128";
        return FATTN_ERR_BAD_HEAD_DIM;
    }
    if (dev.sm_major < 8) {
        if (why) *why = "cuda: PaTH needs compute capability 8.0 or newer (mma.sync bf16, cp.async); device is " +
                        std::to_string(dev.sm_major) + "." + std::to_string(dev.sm_minor);
        return FATTN_ERR_UNSUPPORTED;
    }
    const int D = pathk::gpu_dim(p.dk, p.dv);
    const size_t need = max_smem_d(p.dtype, D);
    if (need > dev.smem_optin) {
        if (why) *why = "cuda: PaTH kernels for head dim " + std::to_string(D) + " need " + std::to_string(need) +
                        " bytes of shared memory per block; the device allows " + std::to_string(dev.smem_optin);
        return FATTN_ERR_UNSUPPORTED;
    }
    const PathLayout lay = path_layout(p, /*bases=*/false);
    if (lay.total_chunks > INT32_MAX || p.hq > 65535) {
        if (why) *why = "q: " + std::to_string(lay.total_chunks) + " chunks x " + std::to_string(p.hq) +
                        " heads exceed the CUDA grid (2^31 - 1 x 65535)";
        return FATTN_ERR_UNSUPPORTED;
    }
    return FATTN_OK;
}

size_t path_workspace_size(const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
    const PathLayout lay = path_layout(p, /*bases=*/false);
    const pathk::GpuWs w = pathk::gpu_workspace(p, lay, dir);
    if (history_bytes) *history_bytes = w.history_bytes;
    return w.total;
}

fattn_status path_fwd(const PathBwdParams &p, void *stream, void *ws, std::string *err) {
    return run(p, stream, ws, false, err);
}
fattn_status path_bwd(const PathBwdParams &p, void *stream, void *ws, std::string *err) {
    return run(p, stream, ws, true, err);
}

}  // namespace fattn::cuda
