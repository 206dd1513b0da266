// attn_cuda.h — entry points of the CUDA softmax-attention backend (fused kernels + exact arm).
// Plain C++ header (no CUDA types), included by the backend's table (backend_cuda.cpp).
// attn_select is the one selection function: dispatch and fattn_attn_supports both call it, so
// "supported" and "what runs" cannot disagree. Never falls back to the CPU.
#pragma once

#include <cstddef>
#include <string>

#include "core/attn_params.h"

namespace fattn::cuda {

struct DeviceInfo {
    int device = 0;
    int sm_major = 0, sm_minor = 0, num_sms = 0;
    size_t smem_optin = 0;  // max dynamic shared memory per block (opt-in)
    int family = 0;         // the context's fattn_cuda_family (0 = AUTO)
};

// Query the device; BACKEND_UNAVAILABLE with a message if it does not exist / no driver.
fattn_status device_info(int device, DeviceInfo *out, std::string *err);

// Default allocator of a CUDA context (stream-ordered). Frees with device_free.
void *device_alloc(size_t bytes, void *stream);
void device_free(void *ptr, void *stream);

// FATTN_OK if this device runs p (fwd and bwd, at p.prec/p.algo); else UNSUPPORTED + reason.
fattn_status attn_select(const AttnFwdParams &p, const DeviceInfo &dev, std::string *why);

size_t attn_workspace_size(const AttnFwdParams &p, const DeviceInfo &dev, fattn_dir dir);
size_t attn_saved_size(const AttnFwdParams &p, const DeviceInfo &dev);

// Enqueue on p.stream. Return after launch (asynchronous) with launch errors checked.
fattn_status attn_fwd(const AttnFwdParams &p, const DeviceInfo &dev, void *saved, void *workspace,
                      std::string *err);
fattn_status attn_bwd(const AttnBwdParams &p, const DeviceInfo &dev, const void *saved,
                      void *workspace, std::string *err);

}  // namespace fattn::cuda
