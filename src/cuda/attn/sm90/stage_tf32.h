// stage_tf32.h — the tf32 pre-pass of the sm90 kernels (stage_tf32.cu): which operands it rounds
// and copies into the workspace (workspace.h: kr, tr, qt, dot).
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include "emu/cuda_runtime_host.h"
#endif

#include "cuda/attn/launch.h"

namespace fattn::cuda::attn {

// One side of the problem: the key side (k, v: total_kv rows, Hkv heads, the sequences' kv ranges)
// or the query side (q, dout: total_q rows, Hq heads, their q ranges).
struct Sm90Stage {
    struct Src {
        const float *x;  // a [B_view, rows, heads, D] view (element strides, innermost 1)
        int64_t sb, ss, sh;
    };
    bool queries;     // the query side (else the key side)
    int64_t heads;    // heads staged (grid y): the sources start at the first of them
    Src row_src[2];   // copied as rows [heads, R, D] into rows[i], i < nrows
    float *rows[2];
    int nrows;
    Src t_src[2];     // copied transposed into tr[i] [heads, D, cols], 8-row groups in tf32_key_order
    float *tr[2];
    int ntr;
};

// d: the copies' width, the kernels' bucket (64 or 128; p.d = p.dim_v <= d, zeros past it); rows,
// cols: the side's R and transposed-copy columns (workspace.h).
cudaError_t sm90_tf32_stage(const AttnFwdParams &p, int d, const Sm90Stage &sg, int64_t rows, int64_t cols,
                            cudaStream_t st);

}  // namespace fattn::cuda::attn
