// launch.cu — the fused CUDA attention kernels' launch sequence (sequence.h) on the GPU: the
// launcher turns each step into a kernel launch on the call's stream (the pre-passes of prep.cuh,
// each family's launchers of launch.h) and launch errors into a status.
#include <cuda_runtime.h>

#include "cuda/attn/launch.h"
#include "cuda/attn/sequence.h"

namespace fattn::cuda::attn {
namespace {

struct CudaLauncher {
    using Err = cudaError_t;
    cudaStream_t st;
    static constexpr Err ok() { return cudaSuccess; }

    Err bias_prep(const AttnFwdParams &p, const Workspace &w, uint8_t *map, bool vec, float *ceil) {
        bias_prep_kernel<<<unsigned(bias_prep_blocks(p, w)), 256, 0, st>>>(p, w, map, vec, ceil);
        return cudaGetLastError();
    }
    Err delta(const AttnBwdParams &p, const KArgs &a, int64_t rows, bool v8) {
        const unsigned blocks = unsigned((rows + 7) / 8);
        switch (p.dtype) {
        case FATTN_F16: delta_kernel<__half><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        case FATTN_BF16: delta_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        default: delta_kernel<float><<<blocks, 256, 0, st>>>(p, a, rows, v8); break;
        }
        return cudaGetLastError();
    }
    Err dbias_zero(const AttnBwdParams &p, int64_t rows) {
        dbias_zero_kernel<<<unsigned((rows + 7) / 8), 256, 0, st>>>(p, rows);
        return cudaGetLastError();
    }
    Err native_dbias(const AttnBwdParams &p, const KArgs &a, int db) { return attn::native_dbias(p, a, db, st); }
    Err tf32_dbias(const AttnBwdParams &p, const KArgs &a, int db) { return attn::tf32_dbias(p, a, db, st); }
    Err scalar_dbias(const AttnBwdParams &p, const KArgs &a, int db) { return attn::scalar_dbias(p, a, db, st); }
    Err native_fwd(const AttnFwdParams &p, const KArgs &a, int db) { return attn::native_fwd(p, a, db, st); }
    Err tf32_fwd(const AttnFwdParams &p, const KArgs &a, int db) { return attn::tf32_fwd(p, a, db, st); }
    Err scalar_fwd(const AttnFwdParams &p, const KArgs &a, int db) { return attn::scalar_fwd(p, a, db, st); }
    Err native_bwd(const AttnBwdParams &p, const KArgs &a, int db) { return attn::native_bwd(p, a, db, st); }
    Err tf32_bwd(const AttnBwdParams &p, const KArgs &a, int db) { return attn::tf32_bwd(p, a, db, st); }
    Err scalar_bwd(const AttnBwdParams &p, const KArgs &a, int db) { return attn::scalar_bwd(p, a, db, st); }
#ifdef FATTN_HAVE_SM90
    Err sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db) { return attn::sm90_fwd(p, a, db, st); }
    Err sm90_fwd_tf32(const AttnFwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return attn::sm90_fwd_tf32(p, a, db, w, ws, st);
    }
    Err sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return attn::sm90_bwd(p, a, db, w, ws, st);
    }
    Err sm90_bwd_tf32(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return attn::sm90_bwd_tf32(p, a, db, w, ws, st);
    }
#endif
    fattn_status check(Err e, const char *what, std::string *err) const {
        if (e == cudaSuccess) return FATTN_OK;
        if (err) *err = std::string("cuda fused attn: ") + what + ": " + cudaGetErrorString(e);
        return FATTN_ERR_DEVICE;
    }
};

}  // namespace

fattn_status fwd(const AttnFwdParams &p, const DeviceInfo &, const Choice &c, void *workspace, std::string *err) {
    CudaLauncher r{static_cast<cudaStream_t>(p.stream)};
    return seq_fwd(r, p, c, workspace, err);
}

fattn_status bwd(const AttnBwdParams &p, const DeviceInfo &dev, const Choice &c, void *workspace, std::string *err) {
    CudaLauncher r{static_cast<cudaStream_t>(p.stream)};
    return seq_bwd(r, p, dev, c, workspace, err);
}

}  // namespace fattn::cuda::attn
