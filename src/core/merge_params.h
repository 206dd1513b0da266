// merge_params.h — the resolved form of one fattn_attn_merge call (attn_merge.cpp validates the
// views and fills it; the CPU kernel in src/cpu/attn_merge.cpp and the CUDA kernel in
// src/cuda/merge.cu consume it). Strides are in elements, with a dim of extent 1 stepped by 0.
#pragma once

#include <cstdint>

#include "fattn/fattn.h"

namespace fattn {

// One partial result: o [B, S, H, Dv] (any storage dtype) and lse [B, H, S] f32.
struct MergePart {
    const void *o;
    int64_t o_sb, o_ss, o_sh;
    const float *lse;
    int64_t lse_sb, lse_sh;  // lse's innermost (S) stride is 1
    int32_t dtype;           // fattn_dtype of o
    int32_t pad_;
};

static_assert(sizeof(MergePart) == 64, "fattn.h documents a 64-byte part table entry");

struct MergeParams {
    int64_t batch, seq, heads, dim_v;
    int64_t n_parts;
    const MergePart *parts;  // host array of n_parts entries, in merge order
    void *o;                 // o_out
    int64_t o_sb, o_ss, o_sh;
    fattn_dtype o_dtype;
    float *lse;              // lse_out
    int64_t lse_sb, lse_sh;
    int nthreads;            // CPU
    void *stream;            // CUDA (cudaStream_t)
};

}  // namespace fattn
