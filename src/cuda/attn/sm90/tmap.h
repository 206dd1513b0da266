// tmap.h — TMA tensor maps of the sm_90a kernels (tmap.cu).
#pragma once

#if defined(__CUDACC__)
#include <cuda.h>
#include <cuda_runtime.h>
#else
#include "cuda/attn/sm90/ptx.cuh"       // CUtensorMap
#include "emu/cuda_runtime_host.h"  // the CPU emulation: src/emu/sm90_map_emu.cpp encodes the maps
#endif

#include <cstdint>

#include "fattn/fattn.h"

namespace fattn::cuda::attn {

// A [batch, rows, heads, d] view (element strides, innermost 1; bf16, f16 or f32 elements) as a
// 4-D tensor map whose box is one 128-byte panel (64 16-bit or 32 f32 columns) of box_rows rows,
// 128-byte swizzled (sm90/ptx.cuh). Rows past `rows` read as zeros. cudaErrorNotSupported when the driver has no cuTensorMapEncodeTiled.
cudaError_t sm90_map(CUtensorMap *m, const void *data, fattn_dtype dt, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t ss, int64_t sh, int64_t sb, int box_rows);

}  // namespace fattn::cuda::attn
