// context.h — the opaque fattn_ctx behind the C API: backend, threads/stream, allocator, and
// the id under which each thread keeps the context's last error message (context.cpp).
// Only src/core and the backends' entry files include it.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "core/parallel.h"
#include "fattn/fattn.h"

struct fattn_ctx {
    fattn_backend backend = FATTN_BACKEND_CPU;
    int nthreads = 1;          // CPU: resolved thread count (>= 1)
    fattn::detail::Runner runner;  // CPU: the caller's parallel runner (run == nullptr: fattn's pools)
    int device = -1;           // CUDA: device ordinal
    void *stream = nullptr;    // CUDA: cudaStream_t
    int sm_major = 0, sm_minor = 0, num_sms = 0;  // CUDA: filled at init
    size_t smem_optin = 0;                       // CUDA: opt-in shared memory per block
    int cuda_family = 0;                         // CUDA: fattn_cuda_family (0 = AUTO)
    fattn_alloc_fn alloc = nullptr;  // nullptr: the backend's default
    fattn_free_fn free_fn = nullptr;
    void *alloc_user = nullptr;
    uint64_t id = 0;  // never reused: keys the per-thread last-error messages (0 = no context)
};

namespace fattn {

// Most threads a CPU context takes (fattn_ctx_init_cpu / set_nthreads refuse more): per-thread
// scratch and thread creation scale with it, and INT_MAX once meant 75 TB of scratch slots.
constexpr int kMaxThreads = 1024;

// Record msg as ctx's last error (or the thread's, when ctx is null) and return s.
fattn_status set_error(fattn_ctx *ctx, fattn_status s, const std::string &msg);

// Workspace from the context's allocator (host or device). Returns nullptr on failure.
void *ctx_alloc(fattn_ctx *ctx, size_t bytes);
void ctx_free(fattn_ctx *ctx, void *ptr);

// Runs body (returning fattn_status) and turns any escaping exception into a status recorded on
// ctx: every C entry point goes through it, so the C API never throws.
template <class Body>
fattn_status guarded(fattn_ctx *ctx, const char *fn, Body &&body) {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return set_error(ctx, FATTN_ERR_OUT_OF_MEMORY, std::string(fn) + ": out of host memory");
    } catch (const std::exception &e) {
        return set_error(ctx, FATTN_ERR_INTERNAL, std::string(fn) + ": " + e.what());
    } catch (...) {
        return set_error(ctx, FATTN_ERR_INTERNAL, std::string(fn) + ": unknown exception");
    }
}

}  // namespace fattn
