// exact.h — the materialized ("exact") softmax-attention arm on CUDA: cuBLAS batched GEMMs for
// S = scale·Q·Kᵀ (+ bias, masks), a row-softmax kernel that writes P [B, Hq, Sq, Skv] (f32) into the
// caller's `saved` buffer, and GEMMs for O = P·V; the backward reads P back (dV = Pᵀ·dO,
// dP = dO·Vᵀ, dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS·K, dK = scale·dSᵀ·Q), GQA reduced over the
// group in a fixed order. Same semantics as the fused kernels (src/cuda/attn), deterministic.
// Called from src/cuda/attn_cuda.cpp when p.algo == FATTN_ALGO_EXACT.
#pragma once

#include <cstddef>
#include <string>

#include "core/attn_params.h"
#include "cuda/attn_cuda.h"

namespace fattn::cuda::exact {

fattn_status select(const AttnFwdParams &p, const DeviceInfo &dev, std::string *why);
size_t workspace_size(const AttnFwdParams &p, const DeviceInfo &dev, fattn_dir dir);
size_t saved_size(const AttnFwdParams &p, const DeviceInfo &dev);
fattn_status fwd(const AttnFwdParams &p, const DeviceInfo &dev, void *saved, void *workspace,
                 std::string *err);
fattn_status bwd(const AttnBwdParams &p, const DeviceInfo &dev, const void *saved, void *workspace,
                 std::string *err);

}  // namespace fattn::cuda::exact
