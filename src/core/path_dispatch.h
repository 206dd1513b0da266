// path_dispatch.h — routing of resolved PaTH params to the context's backend (CPU or CUDA): the
// one selection function (what fattn_path_supports answers and what runs), the workspace size
// and the two runs. path_api.cpp calls only these, so "supported" and "what runs" cannot
// disagree, and a CUDA context never runs anything on the CPU.
#pragma once

#include <cstddef>
#include <string>

#include "core/context.h"
#include "core/path_params.h"

namespace fattn {

// FATTN_OK, or the status and reason the backend refuses p with (a CUDA context in a build
// without CUDA is BACKEND_UNAVAILABLE).
fattn_status path_backend_select(const fattn_ctx *ctx, const PathFwdParams &p, std::string *why);

// Bytes of the call's workspace; *history_bytes: the part holding the history (bwd, else 0).
size_t path_backend_workspace(const fattn_ctx *ctx, const PathFwdParams &p, fattn_dir dir,
                              size_t *history_bytes);

// Host heap a call takes besides its workspace (the CPU backend's bookkeeping; 0 on CUDA).
uint64_t path_backend_host_bytes(const fattn_ctx *ctx, const PathFwdParams &p);

// The STRICT check's message for the first offending token (|w| is tested first), the same from
// every backend: "w: |w| = 1.010000 at (b 0, t 5, h 0) is not 1 (...)" / "beta: 2.500000 at ...".
std::string path_check_message(double norm, float beta, int64_t b, int64_t t, int64_t h, double tol);

// The runs (the w / beta check included: p.check). CUDA: enqueued on the context's stream.
fattn_status path_backend_fwd(const fattn_ctx *ctx, const PathBwdParams &p, void *workspace, std::string *err);
fattn_status path_backend_bwd(const fattn_ctx *ctx, const PathBwdParams &p, void *workspace, std::string *err);

}  // namespace fattn
