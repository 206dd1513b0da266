// path_cuda.cu — the CUDA instantiation of the PaTH backend: a launcher for sequence.h (one
// generic __global__ wrapper per kernel struct), the selection function and the entries. The
// kernels, their order and the workspace layout are in src/cuda/path.
#include <cuda_runtime.h>

#include "cuda/path/sequence.h"
#include "cuda/path_cuda.h"

namespace fattn::cuda {
namespace {

using pathk::PathDev;

template <class K> __global__ void __launch_bounds__(K::kThreads) path_kernel(const PathDev p) {
    extern __shared__ __align__(128) char smem[];
    K::run(p, smem);
}

struct CudaLauncher {
    cudaStream_t stream;
    cudaError_t err = cudaSuccess;
    const char *where = "";
    template <class K> void launch(int64_t gx, int gy, const PathDev &d) {
        if (err != cudaSuccess || gx <= 0 || gy <= 0) return;
        const size_t sm = K::smem();
        if (sm > 48 * 1024) {
            err = cudaFuncSetAttribute(path_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm));
            if (err != cudaSuccess) return void(where = "cudaFuncSetAttribute");
        }
        path_kernel<K><<<dim3(unsigned(gx), unsigned(gy)), K::kThreads, sm, stream>>>(d);
        err = cudaGetLastError();
        if (err != cudaSuccess) where = "kernel launch";
    }
    void upload(void *dst, const void *src, size_t n) {
        if (err == cudaSuccess && (err = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
            where = "cudaMemcpyAsync (tables)";
    }
    void download(void *dst, const void *src, size_t n) {
        if (err == cudaSuccess && (err = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
            where = "cudaMemcpyAsync (check)";
        if (err == cudaSuccess && (err = cudaStreamSynchronize(stream)) != cudaSuccess) where = "cudaStreamSynchronize";
    }
    void fill(void *dst, int byte, size_t n) {
        if (err == cudaSuccess && (err = cudaMemsetAsync(dst, byte, n, stream)) != cudaSuccess) where = "cudaMemsetAsync";
    }
    fattn_status status(std::string *e) {
        if (err == cudaSuccess) return FATTN_OK;
        if (e) *e = std::string("cuda: PaTH ") + where + ": " + cudaGetErrorString(err);
        cudaGetLastError();
        return FATTN_ERR_DEVICE;
    }
};

// The largest dynamic shared memory of the (dtype, D) kernel set: what selection checks.
template <typename Tin, int D> size_t max_smem_of() {
    using namespace pathk;
    size_t m = 0;
    for (size_t s : {KPrep<Tin, D>::smem(), KFwd<Tin, D>::smem(), KSegPrep<Tin, D>::smem(), KHist<Tin, D>::smem(),
                     KDkv<Tin, D>::smem(), KSegInter<Tin, D>::smem(), KSegIntra<Tin, D>::smem(), KOwn<Tin, D>::smem(),
                     KChainA<Tin, D>::smem(), KChainB<Tin, D>::smem()})
        m = s > m ? s : m;
    return m;
}
template <typename Tin> size_t max_smem_d(int D) {
    return D == 32 ? max_smem_of<Tin, 32>() : D == 64 ? max_smem_of<Tin, 64>() : max_smem_of<Tin, 128>();
}

fattn_status run(const PathBwdParams &p, void *stream, void *ws, bool bwd, std::string *err) {
    CudaLauncher l{static_cast<cudaStream_t>(stream)};
    return pathk::gpu_run(l, p, ws, bwd, err);
}

}  // namespace

fattn_status path_select(const PathFwdParams &p, const DeviceInfo &dev, std::string *why) {
    auto ok_dim = [](int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128; };
    if (!ok_dim(p.dk) || !ok_dim(p.dv)) {
        if (why)
            *why = "q: head dims K = " + std::to_string(p.dk) + ", V = " + std::to_string(p.dv) +
                   ": the PaTH CUDA backend runs K, V in {16, 32, 64, 128}";
        return FATTN_ERR_BAD_HEAD_DIM;
    }
    if (dev.sm_major < 8) {
        if (why) *why = "cuda: PaTH needs compute capability 8.0 or newer (mma.sync bf16, cp.async); device is " +
                        std::to_string(dev.sm_major) + "." + std::to_string(dev.sm_minor);
        return FATTN_ERR_UNSUPPORTED;
    }
    const int D = pathk::gpu_dim(p.dk, p.dv);
    const size_t need = p.dtype == FATTN_F32 ? max_smem_d<float>(D)
                        : p.dtype == FATTN_F16 ? max_smem_d<pathk::f16_t>(D) : max_smem_d<pathk::bf16_t>(D);
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
