// attn_cuda.cpp — the entry of the CUDA softmax-attention backend: device query, the context's
// default allocator, and the one selection function (attn_select) that both the support query and
// dispatch use. FUSED requests go to the kernels of src/cuda/attn (attn_kernels.h), EXACT requests
// to the cuBLAS arm of src/cuda/exact (exact.h). Never falls back to the CPU: what no kernel here
// runs is FATTN_ERR_UNSUPPORTED with the reason.
#include "cuda/attn_cuda.h"

#include <cuda_runtime.h>

#include "cuda/attn/attn_kernels.h"
#include "cuda/exact/exact.h"

namespace fattn::cuda {

fattn_status device_info(int device, DeviceInfo *out, std::string *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        if (err) *err = std::string("cuda: no device available (") + cudaGetErrorString(e) + ")";
        cudaGetLastError();  // clear the sticky-free error so later calls are not poisoned
        return FATTN_ERR_BACKEND_UNAVAILABLE;
    }
    if (device < 0 || device >= count) {
        if (err) *err = "cuda: device " + std::to_string(device) + " does not exist (" +
                        std::to_string(count) + " devices)";
        return FATTN_ERR_BACKEND_UNAVAILABLE;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        if (err) *err = std::string("cuda: cudaGetDeviceProperties: ") + cudaGetErrorString(e);
        return FATTN_ERR_DEVICE;
    }
    out->device = device;
    out->sm_major = prop.major;
    out->sm_minor = prop.minor;
    out->num_sms = prop.multiProcessorCount;
    out->smem_optin = prop.sharedMemPerBlockOptin;
    return FATTN_OK;
}

void *device_alloc(size_t bytes, void *stream) {
    if (bytes == 0) bytes = 1;  // a valid, freeable pointer even for empty workspaces
    void *ptr = nullptr;
    if (cudaMallocAsync(&ptr, bytes, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return ptr;
}

void device_free(void *ptr, void *stream) {
    if (ptr) cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));
}

fattn_status attn_select(const AttnFwdParams &p, const DeviceInfo &dev, std::string *why) {
    if (p.algo == FATTN_ALGO_EXACT) return exact::select(p, dev, why);
    attn::Choice c;
    return attn::choose(p, dev, &c, why);
}

size_t attn_workspace_size(const AttnFwdParams &p, const DeviceInfo &dev, fattn_dir dir) {
    if (p.algo == FATTN_ALGO_EXACT) return exact::workspace_size(p, dev, dir);
    attn::Choice c;
    std::string why;
    if (attn::choose(p, dev, &c, &why) != FATTN_OK) return 0;
    return attn::workspace_size(p, c, dir);
}

size_t attn_saved_size(const AttnFwdParams &p, const DeviceInfo &dev) {
    if (p.algo == FATTN_ALGO_EXACT) return exact::saved_size(p, dev);
    return 0;  // FUSED keeps only o and lse
}

fattn_status attn_fwd(const AttnFwdParams &p, const DeviceInfo &dev, void *saved, void *workspace,
                      std::string *err) {
    if (p.algo == FATTN_ALGO_EXACT) return exact::fwd(p, dev, saved, workspace, err);
    attn::Choice c;
    fattn_status s = attn::choose(p, dev, &c, err);
    if (s != FATTN_OK) return s;
    return attn::fwd(p, dev, c, workspace, err);
}

fattn_status attn_bwd(const AttnBwdParams &p, const DeviceInfo &dev, const void *saved,
                      void *workspace, std::string *err) {
    if (p.algo == FATTN_ALGO_EXACT) return exact::bwd(p, dev, saved, workspace, err);
    attn::Choice c;
    fattn_status s = attn::choose(p, dev, &c, err);
    if (s != FATTN_OK) return s;
    return attn::bwd(p, dev, c, workspace, err);
}

}  // namespace fattn::cuda
