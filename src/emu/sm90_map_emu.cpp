// sm90_map_emu.cpp — the emulation's TMA tensor-map encoder (the model of cuTensorMapEncodeTiled that
// sm90/tmap.cu calls on the GPU): the same view, strides and box, as an emu::TensorMap inside the
// CUtensorMap's bytes (emu.h: tma_load reads it).
#include <cstring>

#include "cuda/attn/sm90/tmap.h"

namespace fattn::cuda::attn {

cudaError_t sm90_map(CUtensorMap *m, const void *data, fattn_dtype dt, int64_t d, int64_t rows, int64_t heads,
                     int64_t batch, int64_t ss, int64_t sh, int64_t sb, int box_rows) {
    const int64_t es = dt == FATTN_F32 ? 4 : 2;
    emu::TensorMap t{};
    t.base = data;
    t.es = es;
    const int64_t dims[4] = {d, rows, heads, batch}, strides[3] = {ss * es, sh * es, sb * es};
    for (int i = 0; i < 4; ++i) t.dims[i] = dims[i];
    for (int i = 0; i < 3; ++i) t.strides[i] = strides[i];
    t.box[0] = 128 / es;
    t.box[1] = box_rows;
    // The encoder's rules (as the driver checks them): a 16-byte aligned base, and strides of the
    // dims that are stepped in whole 16-byte units below 2^40.
    if (reinterpret_cast<uintptr_t>(data) % 16 != 0 || box_rows < 1 || box_rows > 256) return cudaErrorInvalidValue;
    for (int i = 0; i < 3; ++i)
        if (dims[i + 1] > 1 && (strides[i] <= 0 || strides[i] % 16 != 0 || strides[i] >= (int64_t(1) << 40)))
            return cudaErrorInvalidValue;
    std::memset(m, 0, sizeof *m);
    std::memcpy(m->opaque, &t, sizeof t);
    return cudaSuccess;
}

}  // namespace fattn::cuda::attn
