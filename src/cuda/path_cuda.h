// path_cuda.h — entry points of the CUDA PaTH backend (kernels in src/cuda/path). Plain C++ (no
// CUDA types), included by the backend's table (backend_cuda.cpp). path_select is the one
// selection function: dispatch and fattn_path_supports both call it. Never falls back to the CPU.
#pragma once

#include <cstddef>
#include <string>

#include "core/path_params.h"
#include "cuda/attn_cuda.h"  // DeviceInfo

namespace fattn::cuda {

// FATTN_OK if this device runs p (fwd and bwd); else UNSUPPORTED / BAD_HEAD_DIM + reason.
fattn_status path_select(const PathFwdParams &p, const DeviceInfo &dev, std::string *why);

// Workspace bytes of one call (history_bytes: the part that holds the history, bwd only).
size_t path_workspace_size(const PathFwdParams &p, fattn_dir dir, size_t *history_bytes);

// Enqueue on stream; return after launch with launch errors checked (STRICT mode synchronizes
// once, to read the w / beta check's verdict before anything is written).
fattn_status path_fwd(const PathBwdParams &p, void *stream, void *workspace, std::string *err);
fattn_status path_bwd(const PathBwdParams &p, void *stream, void *workspace, std::string *err);

}  // namespace fattn::cuda
