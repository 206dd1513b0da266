// backend.h — the seam between the core and the backends: one table of entry points per backend.
// Each backend fills its table in its own translation unit (src/cpu/backend_cpu.cpp,
// src/cuda/backend_cuda.cpp); the core finds it with backend_table(), defined in
// src/backends.cpp, the library's one list of the backends it was built with. The core includes
// no backend header: it builds the same whichever backends exist.
//
// Why an explicit list and not self-registration: a backend that put itself in a registry from a
// static object's constructor would live in an object file that nothing references, and a link
// against a static libfattn.a drops such objects (the order of static initializers across files
// is unspecified too). src/backends.cpp names each table's function, so the linker keeps them.
//
// A context's backend runs its calls, never another: a context whose backend is not in the
// library (a CUDA context in a build without CUDA) gets BACKEND_UNAVAILABLE from every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/attn_params.h"
#include "core/context.h"
#include "core/merge_params.h"
#include "core/path_params.h"

namespace fattn {

struct BackendTable {
    // Context: the device's properties into ctx (CUDA; the CPU has none), and the default
    // workspace allocator (the caller's fattn_ctx_set_allocator pair replaces it).
    fattn_status (*open_device)(fattn_ctx *ctx, int device, std::string *err);
    void *(*alloc)(const fattn_ctx *ctx, size_t bytes);
    void (*free)(const fattn_ctx *ctx, void *ptr);

    // Softmax attention. attn_select is the one "supported?" answer, which dispatch also obeys.
    fattn_status (*attn_select)(const fattn_ctx *ctx, const AttnFwdParams &p, std::string *why);
    size_t (*attn_workspace_size)(const fattn_ctx *ctx, const AttnFwdParams &p, fattn_dir dir);
    size_t (*attn_saved_size)(const fattn_ctx *ctx, const AttnFwdParams &p);
    fattn_status (*attn_fwd)(const fattn_ctx *ctx, const AttnFwdParams &p, void *saved,
                             void *workspace, std::string *err);
    fattn_status (*attn_bwd)(const fattn_ctx *ctx, const AttnBwdParams &p, const void *saved,
                             void *workspace, std::string *err);
    // fattn_attn_merge on validated, resolved views (the context's allocator gives any scratch).
    fattn_status (*attn_merge)(fattn_ctx *ctx, const MergeParams &p, std::string *err);

    // PaTH (path_dispatch.h says what each answers).
    fattn_status (*path_select)(const fattn_ctx *ctx, const PathFwdParams &p, std::string *why);
    size_t (*path_workspace)(const fattn_ctx *ctx, const PathFwdParams &p, fattn_dir dir,
                             size_t *history_bytes);
    uint64_t (*path_host_bytes)(const fattn_ctx *ctx, const PathFwdParams &p);
    fattn_status (*path_fwd)(const fattn_ctx *ctx, const PathBwdParams &p, void *workspace,
                             std::string *err);
    fattn_status (*path_bwd)(const fattn_ctx *ctx, const PathBwdParams &p, void *workspace,
                             std::string *err);
};

// The table of backend b, or nullptr when the library was built without it (src/backends.cpp).
const BackendTable *backend_table(fattn_backend b);

// The context's table; nullptr with *why = "ctx: a CUDA context in a build without CUDA" (the
// status is FATTN_ERR_BACKEND_UNAVAILABLE) when the library lacks that backend.
const BackendTable *backend_of(const fattn_ctx *ctx, std::string *why);

}  // namespace fattn
