// backend_cuda.cpp — the CUDA backend's table (core/backend.h): the context's device as the
// kernels' DeviceInfo, the stream-ordered default allocator, and the entries of attn_cuda.h,
// merge_cuda.h and path_cuda.h. Every call is enqueued on the context's stream; nothing falls
// back to the CPU.
#include "core/backend.h"
#include "cuda/attn_cuda.h"
#include "cuda/merge_cuda.h"
#include "cuda/path_cuda.h"

namespace fattn::cuda {

namespace {

DeviceInfo device_of(const fattn_ctx *ctx) {
    DeviceInfo d;
    d.device = ctx->device;
    d.sm_major = ctx->sm_major;
    d.sm_minor = ctx->sm_minor;
    d.num_sms = ctx->num_sms;
    d.smem_optin = ctx->smem_optin;
    d.family = ctx->cuda_family;
    return d;
}

fattn_status open_device(fattn_ctx *ctx, int device, std::string *err) {
    DeviceInfo info;
    fattn_status s = device_info(device, &info, err);
    if (s != FATTN_OK) return s;
    ctx->device = info.device;
    ctx->sm_major = info.sm_major;
    ctx->sm_minor = info.sm_minor;
    ctx->num_sms = info.num_sms;
    ctx->smem_optin = info.smem_optin;
    return FATTN_OK;
}

void *alloc(const fattn_ctx *ctx, size_t bytes) { return device_alloc(bytes, ctx->stream); }
void free(const fattn_ctx *ctx, void *ptr) { device_free(ptr, ctx->stream); }

fattn_status select(const fattn_ctx *ctx, const AttnFwdParams &p, std::string *why) {
    return attn_select(p, device_of(ctx), why);
}

size_t workspace_size(const fattn_ctx *ctx, const AttnFwdParams &p, fattn_dir dir) {
    return attn_workspace_size(p, device_of(ctx), dir);
}

size_t saved_size(const fattn_ctx *ctx, const AttnFwdParams &p) {
    return attn_saved_size(p, device_of(ctx));
}

fattn_status fwd(const fattn_ctx *ctx, const AttnFwdParams &p, void *saved, void *workspace,
                 std::string *err) {
    return attn_fwd(p, device_of(ctx), saved, workspace, err);
}

fattn_status bwd(const fattn_ctx *ctx, const AttnBwdParams &p, const void *saved, void *workspace,
                 std::string *err) {
    return attn_bwd(p, device_of(ctx), saved, workspace, err);
}

// The part table goes to device memory from the context's allocator, freed stream-ordered like
// every workspace of the context.
fattn_status merge(fattn_ctx *ctx, const MergeParams &p, std::string *err) {
    const size_t table = size_t(p.n_parts) * sizeof(MergePart);
    void *dev_parts = ctx_alloc(ctx, table);
    if (!dev_parts) {
        *err = "workspace: the context allocator failed to provide " + std::to_string(table) +
               " bytes (the part table)";
        return FATTN_ERR_OUT_OF_MEMORY;
    }
    fattn_status s = attn_merge(p, device_of(ctx), static_cast<MergePart *>(dev_parts), err);
    ctx_free(ctx, dev_parts);
    return s;
}

fattn_status path_select_ctx(const fattn_ctx *ctx, const PathFwdParams &p, std::string *why) {
    return path_select(p, device_of(ctx), why);
}

size_t path_workspace_ctx(const fattn_ctx *, const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
    return path_workspace_size(p, dir, history_bytes);
}

uint64_t path_host_bytes(const fattn_ctx *, const PathFwdParams &) { return 0; }  // no host heap

fattn_status path_fwd_ctx(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    return path_fwd(p, ctx->stream, ws, err);
}

fattn_status path_bwd_ctx(const fattn_ctx *ctx, const PathBwdParams &p, void *ws, std::string *err) {
    return path_bwd(p, ctx->stream, ws, err);
}

// In BackendTable's order: context, softmax attention, merge, PaTH.
constexpr BackendTable kTable = {
    open_device, alloc, free, select, workspace_size, saved_size, fwd, bwd, merge,
    path_select_ctx, path_workspace_ctx, path_host_bytes, path_fwd_ctx, path_bwd_ctx};

}  // namespace

const BackendTable *backend() { return &kTable; }

}  // namespace fattn::cuda
