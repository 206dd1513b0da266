// backend_cpu.cpp — the CPU backend's table (core/backend.h): every call runs on the calling
// thread with the context's parallel runner installed (ScopedRunner); workspace is 64-byte
// aligned host memory; PaTH's STRICT w / beta check runs here on the host before the kernels.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/backend.h"
#include "core/parallel.h"
#include "core/path_dispatch.h"
#include "cpu/attn_cpu.h"
#include "cpu/attn_merge.h"
#include "cpu/path/path_cpu.h"

namespace fattn::cpu {

namespace {

fattn_status open_device(fattn_ctx *, int, std::string *) { return FATTN_OK; }  // no device

// 64 bytes: a cache line, and enough for any SIMD load the CPU kernels use.
constexpr size_t kHostAlign = 64;

void *host_alloc(const fattn_ctx *, size_t bytes) {
    size_t rounded = (bytes + kHostAlign - 1) / kHostAlign * kHostAlign;  // aligned_alloc rule
    if (rounded < bytes) return nullptr;                                   // wrapped around
    return std::aligned_alloc(kHostAlign, rounded);
}

void host_free(const fattn_ctx *, void *ptr) { std::free(ptr); }

fattn_status select(const fattn_ctx *, const AttnFwdParams &p, std::string *why) {
    return attn_select(p, why);
}

size_t workspace_size(const fattn_ctx *, const AttnFwdParams &p, fattn_dir dir) {
    return attn_workspace_size(p, dir);
}

size_t saved_size(const fattn_ctx *, const AttnFwdParams &p) { return attn_saved_size(p); }

fattn_status fwd(const fattn_ctx *ctx, const AttnFwdParams &p, void *saved, void *workspace,
                 std::string *err) {
    ScopedRunner runner(ctx->runner);
    return attn_fwd(p, saved, workspace, err);
}

fattn_status bwd(const fattn_ctx *ctx, const AttnBwdParams &p, const void *saved, void *workspace,
                 std::string *err) {
    ScopedRunner runner(ctx->runner);
    return attn_bwd(p, saved, workspace, err);
}

fattn_status merge(fattn_ctx *ctx, const MergeParams &p, std::string *) {
    ScopedRunner runner(ctx->runner);
    attn_merge(p);
    return FATTN_OK;
}

fattn_status path_select_ctx(const fattn_ctx *, const PathFwdParams &p, std::string *why) {
    return path_select(p, why);
}

size_t path_workspace_ctx(const fattn_ctx *, const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
    const PathLayout lay = path_layout(p, /*bases=*/false);
    const PathWorkspace ws = path_workspace(p, lay, dir);
    if (history_bytes) *history_bytes = ws.history_bytes;
    return ws.total;
}

uint64_t path_host_bytes(const fattn_ctx *, const PathFwdParams &p) {
    // layout bases (twice), the chunk index, thread handles, the slot pool; as the softmax model
    return 16384 + 1024 * uint64_t(std::max(p.nthreads, 1)) + 64 * uint64_t(std::max<int64_t>(p.num_seqs, 0));
}

// STRICT on the host: |w_t| = 1 within tol, beta_t in [0, 2], every value finite.
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

fattn_status path_fwd_ctx(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    ScopedRunner runner(ctx->runner);
    fattn_status s = host_check(p, err);
    return s != FATTN_OK ? s : path_fwd(p, ws, err);
}

fattn_status path_bwd_ctx(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    ScopedRunner runner(ctx->runner);
    fattn_status s = host_check(p, err);
    return s != FATTN_OK ? s : path_bwd(p, ws, err);
}

// In BackendTable's order: context, softmax attention, merge, PaTH.
constexpr BackendTable kTable = {open_device, host_alloc, host_free,
                                 select, workspace_size, saved_size, fwd, bwd, merge,
                                 path_select_ctx, path_workspace_ctx, path_host_bytes, path_fwd_ctx, path_bwd_ctx};

}  // namespace

const BackendTable *backend() { return &kTable; }

}  // namespace fattn::cpu
