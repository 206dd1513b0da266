// attn_dispatch.h — thin routing of resolved softmax-attention params to the context's backend
// (CPU or CUDA): size queries and the two runs. Used by attn_api.cpp and attn_memory.cpp so the
// memory model reads exactly the sizes dispatch allocates.
#pragma once

#include <cstddef>
#include <string>

#include "core/attn_params.h"
#include "core/context.h"

namespace fattn {

// The backend's one selection function ("supported?" and "what runs"): cpu::attn_select or
// cuda::attn_select; a CUDA context in a build without CUDA is BACKEND_UNAVAILABLE.
fattn_status attn_backend_select(const fattn_ctx *ctx, const AttnFwdParams &p, std::string *why);
size_t attn_backend_workspace_size(const fattn_ctx *ctx, const AttnFwdParams &p, fattn_dir dir);
size_t attn_backend_saved_size(const fattn_ctx *ctx, const AttnFwdParams &p);
fattn_status attn_backend_fwd(const fattn_ctx *ctx, const AttnFwdParams &p, void *saved,
                              void *workspace, std::string *err);
fattn_status attn_backend_bwd(const fattn_ctx *ctx, const AttnBwdParams &p, const void *saved,
                              void *workspace, std::string *err);

}  // namespace fattn
