// stage_tf32.h — the tf32 pre-pass of the sm90 kernels (stage_tf32.cu): which operands it rounds
// and copies into the workspace (workspace.h: kr, vr, tr).
#pragma once

#include <cuda_runtime.h>

#include "cuda/attn/launch.h"

namespace fattn::cuda::attn {

struct Sm90Stage {
    struct Src {
        const float *x;  // a [B_view, total_kv, Hkv, D] view (element strides, innermost 1)
        int64_t sb, ss, sh;
    };
    Src row_src[2];   // copied as rows [Hkv, R, D] into rows[i], i < nrows
    float *rows[2];
    int nrows;
    Src t_src;        // copied transposed into tr [Hkv, D, vt_cols], 8-key groups in tf32_key_order
    float *tr;
};

// D = Dv = d (64 or 128); w: the workspace layout of the call (kr_rows, vt_cols).
cudaError_t sm90_tf32_stage(const AttnFwdParams &p, int d, const Sm90Stage &sg, const Workspace &w, cudaStream_t st);

}  // namespace fattn::cuda::attn
