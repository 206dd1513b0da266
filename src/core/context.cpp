// context.cpp — lifecycle of the opaque fattn_ctx (CPU and CUDA), its setters, the last-error
// messages (per thread, per context), and the workspace allocator (caller-settable; the default
// is the backend's: 64-byte aligned host memory on the CPU, stream-ordered device memory on CUDA).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include "core/backend.h"
#include "core/context.h"
#include "core/enum_raw.h"

namespace {

// Last-error messages are kept per thread: several threads may share one context (fattn.h),
// and one string per context was a data race (TSan) that could also hand a thread another
// thread's message. Each thread keeps the messages of the kErrSlots contexts it most recently
// failed on, keyed by context id (id 0: calls that had no context, e.g. ctx init).
constexpr int kErrSlots = 8;
struct ErrSlot {
    uint64_t id = ~uint64_t(0);  // no context has this id
    uint64_t stamp = 0;          // last write, for least-recently-written replacement
    std::string msg;
};
thread_local ErrSlot t_err[kErrSlots];
thread_local uint64_t t_err_clock = 0;

std::atomic<uint64_t> g_next_ctx_id{1};

ErrSlot *find_slot(uint64_t id) {
    for (ErrSlot &e : t_err)
        if (e.id == id) return &e;
    return nullptr;
}

// The thread count a request resolves to, or 0 when it is refused (more than kMaxThreads).
int resolve_nthreads(int nthreads) {
    if (nthreads > fattn::kMaxThreads) return 0;
    if (nthreads > 0) return nthreads;
    unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? int(std::min<unsigned>(hc, unsigned(fattn::kMaxThreads))) : 1;
}

std::string too_many_threads(int nthreads) {
    return "nthreads: " + std::to_string(nthreads) + " is more than the " +
           std::to_string(fattn::kMaxThreads) + " threads a CPU context runs (0 = hardware concurrency)";
}

}  // namespace

namespace fattn {

fattn_status set_error(fattn_ctx *ctx, fattn_status s, const std::string &msg) {
    try {
        const uint64_t id = ctx ? ctx->id : 0;
        ErrSlot *e = find_slot(id);
        if (!e) {  // replace the least recently written slot
            e = &t_err[0];
            for (ErrSlot &x : t_err)
                if (x.stamp < e->stamp) e = &x;
            e->id = id;
        }
        e->stamp = ++t_err_clock;
        e->msg = msg;
    } catch (...) {
        // Out of memory while storing the message: the status still says what happened.
    }
    return s;
}

void *ctx_alloc(fattn_ctx *ctx, size_t bytes) {
    if (!ctx || bytes == 0) return nullptr;
    if (ctx->alloc) return ctx->alloc(bytes, ctx->alloc_user);
    const BackendTable *b = backend_of(ctx, nullptr);
    return b ? b->alloc(ctx, bytes) : nullptr;  // no table: no such context can be made
}

void ctx_free(fattn_ctx *ctx, void *ptr) {
    if (!ctx || !ptr) return;
    if (ctx->free_fn) {
        ctx->free_fn(ptr, ctx->alloc_user);
        return;
    }
    if (const BackendTable *b = backend_of(ctx, nullptr)) b->free(ctx, ptr);
}

}  // namespace fattn

extern "C" {

fattn_status fattn_ctx_init_cpu(int nthreads, fattn_ctx_t **out_ctx) {
    if (!out_ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "out_ctx: is NULL");
    *out_ctx = nullptr;
    const int nt = resolve_nthreads(nthreads);
    if (nt == 0) return fattn::set_error(nullptr, FATTN_ERR_BAD_VALUE, too_many_threads(nthreads));
    fattn_ctx *ctx = new (std::nothrow) fattn_ctx();
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_OUT_OF_MEMORY, "ctx: allocation failed");
    ctx->backend = FATTN_BACKEND_CPU;
    ctx->nthreads = nt;
    ctx->id = g_next_ctx_id.fetch_add(1);
    *out_ctx = ctx;
    return FATTN_OK;
}

fattn_status fattn_ctx_init_cuda(int device, void *stream, fattn_ctx_t **out_ctx) {
    if (!out_ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "out_ctx: is NULL");
    *out_ctx = nullptr;
    const fattn::BackendTable *b = fattn::backend_table(FATTN_BACKEND_CUDA);
    if (!b)
        return fattn::set_error(nullptr, FATTN_ERR_BACKEND_UNAVAILABLE,
                                "fattn_ctx_init_cuda: this fattn library was built without CUDA "
                                "(configure with -DFATTN_CUDA=ON)");
    try {
        fattn_ctx dev;
        dev.backend = FATTN_BACKEND_CUDA;
        std::string err;
        fattn_status s = b->open_device(&dev, device, &err);
        if (s != FATTN_OK) return fattn::set_error(nullptr, s, "device " + std::to_string(device) + ": " + err);
        fattn_ctx *ctx = new fattn_ctx(dev);
        ctx->nthreads = 1;
        ctx->id = g_next_ctx_id.fetch_add(1);
        ctx->stream = stream;
        *out_ctx = ctx;
        return FATTN_OK;
    } catch (const std::bad_alloc &) {
        return fattn::set_error(nullptr, FATTN_ERR_OUT_OF_MEMORY, "ctx: allocation failed");
    } catch (...) {
        return fattn::set_error(nullptr, FATTN_ERR_INTERNAL, "fattn_ctx_init_cuda: unexpected exception");
    }
}

void fattn_ctx_free(fattn_ctx_t *ctx) { delete ctx; }

fattn_backend fattn_ctx_backend(const fattn_ctx_t *ctx) {
    return ctx ? ctx->backend : FATTN_BACKEND_CPU;
}

int fattn_ctx_nthreads(const fattn_ctx_t *ctx) { return ctx ? ctx->nthreads : 0; }

fattn_status fattn_ctx_set_nthreads(fattn_ctx_t *ctx, int nthreads) {
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    if (ctx->backend != FATTN_BACKEND_CPU)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE,
                                "nthreads: only a CPU context has a thread count");
    const int nt = resolve_nthreads(nthreads);
    if (nt == 0) return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, too_many_threads(nthreads));
    ctx->nthreads = nt;
    return FATTN_OK;
}

fattn_status fattn_ctx_set_parallel(fattn_ctx_t *ctx, fattn_parallel_fn run, void *user) {
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    if (ctx->backend != FATTN_BACKEND_CPU)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, "run: only a CPU context has parallel loops");
    ctx->runner = fattn::detail::Runner{run, run ? user : nullptr};
    return FATTN_OK;
}

fattn_status fattn_ctx_set_stream(fattn_ctx_t *ctx, void *stream) {
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    if (ctx->backend != FATTN_BACKEND_CUDA)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, "stream: only a CUDA context has a stream");
    ctx->stream = stream;
    return FATTN_OK;
}

fattn_status fattn_ctx_set_cuda_family(fattn_ctx_t *ctx, fattn_cuda_family family) {
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    const int64_t f = fattn::raw_enum(family);  // a C caller may pass any int
    if (f < FATTN_CUDA_FAMILY_AUTO || f > FATTN_CUDA_FAMILY_SM90)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, "family: " + std::to_string(f) + " is not a fattn_cuda_family");
    if (ctx->backend != FATTN_BACKEND_CUDA && f != FATTN_CUDA_FAMILY_AUTO)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, "family: only a CUDA context has kernel families");
    ctx->cuda_family = int(f);
    return FATTN_OK;
}

const char *fattn_ctx_last_error(const fattn_ctx_t *ctx) {
    const ErrSlot *e = find_slot(ctx ? ctx->id : 0);
    return e ? e->msg.c_str() : "";
}

fattn_status fattn_ctx_set_allocator(fattn_ctx_t *ctx, fattn_alloc_fn alloc, fattn_free_fn free_fn,
                                     void *user) {
    if (!ctx) return fattn::set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    // Both or neither: a custom alloc freed by the default free (or vice versa) is a heap bug.
    if ((alloc == nullptr) != (free_fn == nullptr))
        return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER,
                                alloc ? "free_fn: is NULL but alloc is set (give both, or neither "
                                        "to restore the default)"
                                      : "alloc: is NULL but free_fn is set (give both, or neither "
                                        "to restore the default)");
    ctx->alloc = alloc;
    ctx->free_fn = free_fn;
    ctx->alloc_user = alloc ? user : nullptr;
    return FATTN_OK;
}

}  // extern "C"
