// cuda_device.h — the CUDA backends' view of a context's device (cuda::DeviceInfo), for the core's
// dispatch of both families (attn_api.cpp, path_dispatch.cpp). Only with FATTN_WITH_CUDA.
#pragma once

#ifdef FATTN_WITH_CUDA
#include "core/context.h"
#include "cuda/attn_cuda.h"

namespace fattn {

inline cuda::DeviceInfo device_of(const fattn_ctx *ctx) {
    cuda::DeviceInfo d;
    d.device = ctx->device;
    d.sm_major = ctx->sm_major;
    d.sm_minor = ctx->sm_minor;
    d.num_sms = ctx->num_sms;
    d.smem_optin = ctx->smem_optin;
    d.family = ctx->cuda_family;
    return d;
}

}  // namespace fattn
#endif
