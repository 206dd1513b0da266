// path_dispatch.cpp — the PaTH backend seam (path_dispatch.h): CPU (src/cpu/path, with the w /
// beta check on the host) or CUDA (src/cuda/path_cuda.h, with the check on the device).
#include "core/path_dispatch.h"

#include <algorithm>
#include <cmath>

#include "core/cuda_device.h"
#include "cpu/path/path_cpu.h"
#ifdef FATTN_WITH_CUDA
#include "cuda/path_cuda.h"
#endif

namespace fattn {

std::string path_check_message(double norm, float beta, int64_t b, int64_t t, int64_t h, double tol) {
    const std::string at = " at (b " + std::to_string(b) + ", t " + std::to_string(t) + ", h " + std::to_string(h) + ")";
    if (!(std::fabs(norm - 1.0) <= tol))
        return "w: |w| = " + std::to_string(norm) + at + " is not 1 (check STRICT, tol " + std::to_string(tol) +
               "; L2-normalize w or use FATTN_PATH_CHECK_NONE)";
    return "beta: " + std::to_string(beta) + at + " is outside [0, 2] (check STRICT)";
}

namespace {

// STRICT on the host (CPU contexts): |w_t| = 1 within tol, beta_t in [0, 2], every value finite.
fattn_status host_check(const PathFwdParams &p, std::string *err) {
    if (p.check == FATTN_PATH_CHECK_NONE) return FATTN_OK;
    const double tol = p.check_tol;
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t t = 0; t < p.T; ++t)
            for (int64_t h = 0; h < p.h; ++h) {
                const float *w = p.w + b * p.w_sb + t * p.w_ss + h * p.w_sh;
                double n2 = 0;
                for (int64_t d = 0; d < p.dk; ++d) n2 += double(w[d]) * w[d];
                const double nrm = std::sqrt(n2);
                const float be = p.beta[b * p.beta_sb + t * p.beta_ss + h * p.beta_sh];
                if (std::fabs(nrm - 1.0) <= tol && be >= 0.f && be <= 2.f) continue;
                *err = path_check_message(nrm, be, b, t, h, tol);
                return FATTN_ERR_BAD_VALUE;
            }
    return FATTN_OK;
}

}  // namespace

fattn_status path_backend_select(const fattn_ctx *ctx, const PathFwdParams &p, std::string *why) {
    if (ctx->backend == FATTN_BACKEND_CPU) return cpu::path_select(p, why);
#ifdef FATTN_WITH_CUDA
    return cuda::path_select(p, device_of(ctx), why);
#else
    if (why) *why = "ctx: a CUDA context in a build without CUDA";
    return FATTN_ERR_BACKEND_UNAVAILABLE;
#endif
}

size_t path_backend_workspace(const fattn_ctx *ctx, const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
#ifdef FATTN_WITH_CUDA
    if (ctx->backend == FATTN_BACKEND_CUDA) return cuda::path_workspace_size(p, dir, history_bytes);
#endif
    (void)ctx;
    const PathLayout lay = path_layout(p, /*bases=*/false);
    const PathWorkspace ws = path_workspace(p, lay, dir);
    if (history_bytes) *history_bytes = ws.history_bytes;
    return ws.total;
}

uint64_t path_backend_host_bytes(const fattn_ctx *ctx, const PathFwdParams &p) {
    if (ctx->backend != FATTN_BACKEND_CPU) return 0;
    // layout bases (twice), the chunk index, thread handles, the slot pool; as the softmax model
    return 16384 + 1024 * uint64_t(std::max(p.nthreads, 1)) + 64 * uint64_t(std::max<int64_t>(p.num_seqs, 0));
}

fattn_status path_backend_fwd(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
#ifdef FATTN_WITH_CUDA
    if (ctx->backend == FATTN_BACKEND_CUDA) return cuda::path_fwd(p, ctx->stream, ws, err);
#endif
    (void)ctx;
    fattn_status s = host_check(p, err);
    return s != FATTN_OK ? s : cpu::path_fwd(p, ws, err);
}

fattn_status path_backend_bwd(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
#ifdef FATTN_WITH_CUDA
    if (ctx->backend == FATTN_BACKEND_CUDA) return cuda::path_bwd(p, ctx->stream, ws, err);
#endif
    (void)ctx;
    fattn_status s = host_check(p, err);
    return s != FATTN_OK ? s : cpu::path_bwd(p, ws, err);
}

}  // namespace fattn
