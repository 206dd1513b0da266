// path_dispatch.cpp — the PaTH backend seam (path_dispatch.h) over the context's backend table
// (core/backend.h): the CPU's runs check w / beta on the host, CUDA's on the device; both word a
// failed check with path_check_message.
#include "core/path_dispatch.h"

#include <cmath>

#include "core/backend.h"

namespace fattn {

std::string path_check_message(double norm, float beta, int64_t b, int64_t t, int64_t h, double tol) {
    const std::string at = " at (b " + std::to_string(b) + ", t " + std::to_string(t) + ", h " + std::to_string(h) + ")";
    if (!(std::fabs(norm - 1.0) <= tol))
        return "w: |w| = " + std::to_string(norm) + at + " is not 1 (check STRICT, tol " + std::to_string(tol) +
               "; L2-normalize w or use FATTN_PATH_CHECK_NONE)";
    return "beta: " + std::to_string(beta) + at + " is outside [0, 2] (check STRICT)";
}

fattn_status path_backend_select(const fattn_ctx *ctx, const PathFwdParams &p, std::string *why) {
    const BackendTable *b = backend_of(ctx, why);
    return b ? b->path_select(ctx, p, why) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

size_t path_backend_workspace(const fattn_ctx *ctx, const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
    if (history_bytes) *history_bytes = 0;
    const BackendTable *b = backend_of(ctx, nullptr);
    return b ? b->path_workspace(ctx, p, dir, history_bytes) : 0;
}

uint64_t path_backend_host_bytes(const fattn_ctx *ctx, const PathFwdParams &p) {
    const BackendTable *b = backend_of(ctx, nullptr);
    return b ? b->path_host_bytes(ctx, p) : 0;
}

fattn_status path_backend_fwd(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    const BackendTable *b = backend_of(ctx, err);
    return b ? b->path_fwd(ctx, p, ws, err) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

fattn_status path_backend_bwd(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    const BackendTable *b = backend_of(ctx, err);
    return b ? b->path_bwd(ctx, p, ws, err) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

}  // namespace fattn
