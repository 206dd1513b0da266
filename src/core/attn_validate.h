// attn_validate.h — the support surface of softmax attention: ONE function that turns
// (ctx, user params, user views) into the resolved AttnBwdParams every backend consumes, or a
// distinct status with a message naming the argument and the rule ("k: ne[3] (head dim) is 80
// but q has 64"), then asks the backend's attn_select. fattn_attn_supports, the size queries,
// the memory model and fwd/bwd dispatch all go through it, so they cannot disagree.
#pragma once

#include <string>

#include "core/attn_params.h"
#include "core/context.h"

namespace fattn {

// What the call will do with the views; decides which views are required and checked.
enum class AttnOp {
    QUERY,  // supports / workspace_size / saved_size / memory: q, k, v only; data may be NULL
    FWD,    // + o, lse (outputs)
    BWD,    // + o, lse, dout (inputs), dq, dk, dv (outputs)
};

// The user's views of one call. Views not used by `op` may be null.
struct AttnViews {
    const fattn_tensor *q = nullptr, *k = nullptr, *v = nullptr;
    const fattn_tensor *o = nullptr, *lse = nullptr;
    const fattn_tensor *dout = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
    // The bias gradient (BWD only; nullptr or data NULL: not requested).
    const fattn_tensor *dbias = nullptr;
    // Requests (FATTN_ATTN_WANT_*) of a QUERY; a BWD derives them from its views.
    uint32_t want = 0;
};

// How much work the validated call holds.
enum class AttnWork {
    NONE,     // every output of the op has zero elements: a valid no-op (B, S or H of 0)
    FILL,     // some outputs are non-empty but nothing attends (Sq = 0 or Skv = 0 or Hq = 0):
              // outputs take their defined values (o = 0, lse = -inf, grads = 0), no kernel
    COMPUTE,  // a kernel runs
};

struct AttnResolved {
    AttnBwdParams p{};  // fwd fields valid for every op; grad fields only for BWD
    AttnWork work = AttnWork::COMPUTE;
};

// Validate and resolve. On failure returns the status of the first rule broken with the reason
// in *why (also recorded as ctx's last error by the caller, not here). With select = true the
// backend's selection function is asked last (skipped when work == NONE or FILL: there is
// nothing for a kernel to run). Never throws except std::bad_alloc.
fattn_status attn_validate(const fattn_ctx *ctx, const fattn_attn_params *params, AttnOp op,
                           const AttnViews &views, bool select, AttnResolved *out,
                           std::string *why);

// The raw buffers of a call (EXACT's `saved`, a caller's workspace) must not share bytes with any
// view of the call, nor with each other: OVERLAP naming both. A conservative byte-extent test
// (buffers are dense). Views must have passed attn_validate for `op` first.
fattn_status attn_check_buffers(AttnOp op, const AttnViews &views, const fattn_attn_params &params,
                                const void *saved, size_t saved_bytes, const void *workspace,
                                size_t workspace_bytes, std::string *why);

// The precision a call would run (never AUTO); p and q are assumed non-null and valid.
fattn_prec attn_resolve_prec(const fattn_ctx *ctx, fattn_prec requested, fattn_dtype dtype);

}  // namespace fattn
