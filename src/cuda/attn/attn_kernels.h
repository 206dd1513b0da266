// attn_kernels.h — internal interface of the fused CUDA softmax-attention kernels (src/cuda/attn).
// Plain C++ (no CUDA types): attn_cuda.cpp includes it. The one selection function `choose`
// decides which kernel family, dtype and head-dim bucket runs; attn_select (support query) and
// attn_fwd/attn_bwd (dispatch) both call it, so "supported" and "what runs" cannot disagree.
#pragma once

#include <cstddef>
#include <string>

#include "core/attn_params.h"
#include "cuda/attn_cuda.h"

namespace fattn::cuda::attn {

// Which kernel family runs a request.
enum class Family {
    SCALAR_F32,   // strict IEEE fp32 FMA, any sm_75+, any head dim <= 256, any input dtype
    MMA_NATIVE,   // bf16/f16 mma.sync.m16n8k16, fp32 accumulation, sm_80+
    MMA_TF32,     // f32 inputs on mma.sync.m16n8k8 (tf32), sm_80+
    SM90_NATIVE,  // bf16/f16 wgmma + TMA, warp-specialized (src/cuda/attn/sm90), sm_90a
    SM90_TF32,    // f32 inputs on tf32 wgmma + TMA, forward and backward (src/cuda/attn/sm90), sm_90a
};

struct Choice {
    Family family = Family::SCALAR_F32;      // the backward's family (and the forward's by default)
    Family fwd_family = Family::SCALAR_F32;  // the forward's family (SM90_NATIVE or SM90_TF32 where they apply)
    int d_bucket = 0;  // head dim the kernel is instantiated for (>= max(d, dv), padded loads masked)
    int64_t tf32_pass_kv_heads = 0;  // SM90_TF32 backward: kv heads per pass (workspace.h); 0 = all
    // SM90_NATIVE backward: dQ inside the dK/dV kernel (FATTN_SM90_DQ_FUSED; sm90/bwd_dkdv_kernel.cuh).
    // Never with a bias: its dead tiles break the contiguous order of the key tiles that add to a
    // query tile.
    bool dq_fused = false;
};

// FATTN_OK and *c filled, or UNSUPPORTED with *why.
fattn_status choose(const AttnFwdParams &p, const DeviceInfo &dev, Choice *c, std::string *why);
// The selection switches choose() was built with (tiles.h: FATTN_SM90_D256, FATTN_SM90_TF32_PAD).
bool selects_sm90_d256();
bool selects_sm90_tf32_pad();

size_t workspace_size(const AttnFwdParams &p, const Choice &c, fattn_dir dir);

fattn_status fwd(const AttnFwdParams &p, const DeviceInfo &dev, const Choice &c, void *workspace,
                 std::string *err);
fattn_status bwd(const AttnBwdParams &p, const DeviceInfo &dev, const Choice &c, void *workspace,
                 std::string *err);

}  // namespace fattn::cuda::attn
