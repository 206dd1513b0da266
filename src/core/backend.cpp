// backend.cpp — the context's backend table (backend.h), and the answer for one the library lacks.
#include "core/backend.h"

namespace fattn {

const BackendTable *backend_of(const fattn_ctx *ctx, std::string *why) {
    const BackendTable *b = backend_table(ctx->backend);
    if (!b && why) {
        const char *name = ctx->backend == FATTN_BACKEND_CPU ? "CPU" : "CUDA";
        *why = std::string("ctx: a ") + name + " context in a build without " + name;
    }
    return b;
}

}  // namespace fattn
