// merge_cuda.h — the CUDA kernel of fattn_attn_merge (merge.cu). Plain C++ header (no CUDA
// types), included by the backend's table (backend_cuda.cpp).
#pragma once

#include <string>

#include "core/merge_params.h"
#include "cuda/attn_cuda.h"

namespace fattn::cuda {

// Copies p.parts (host) into parts_dev (device memory of p.n_parts MergePart entries, stream
// ordered) and enqueues the merge on p.stream; returns after launch, launch errors checked.
fattn_status attn_merge(const MergeParams &p, const DeviceInfo &dev, MergePart *parts_dev,
                        std::string *err);

}  // namespace fattn::cuda
