// attn_cpu.h — entry points of the CPU softmax-attention backend (fused and exact).
//
// The core (src/core/attn_api.cpp) validates, fills AttnFwdParams/AttnBwdParams and calls these
// through the CPU backend's table (backend_cpu.cpp).
// attn_select is the single "supported?" answer: dispatch and fattn_attn_supports both call it.
// All functions return FATTN_OK or a status with a message in *err. Arithmetic is f32 with f32
// accumulation whatever the input dtype; results are bitwise independent of p.nthreads.
#pragma once

#include <cstddef>
#include <string>

#include "core/attn_params.h"

namespace fattn::cpu {

// FATTN_OK if the CPU backend runs p (fwd and bwd); otherwise UNSUPPORTED/BAD_HEAD_DIM + reason.
fattn_status attn_select(const AttnFwdParams &p, std::string *why);

// Bytes of scratch for one call (the caller allocates; may be 0).
size_t attn_workspace_size(const AttnFwdParams &p, fattn_dir dir);
// Bytes the forward leaves for the backward besides o and lse (0 for FUSED, P for EXACT).
size_t attn_saved_size(const AttnFwdParams &p);

// Forward: writes o and lse (and `saved` for EXACT). `workspace` has attn_workspace_size bytes.
fattn_status attn_fwd(const AttnFwdParams &p, void *saved, void *workspace, std::string *err);
// Backward: writes dq, dk, dv (every element, GQA reduced natively in a fixed order).
fattn_status attn_bwd(const AttnBwdParams &p, const void *saved, void *workspace, std::string *err);

}  // namespace fattn::cpu
