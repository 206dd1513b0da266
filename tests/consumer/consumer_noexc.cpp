// consumer_noexc.cpp — the C++ wrapper built with -fno-exceptions and FATTN_NO_EXCEPTIONS:
// failures come back as statuses with the library's message.
#include <cstdio>
#include <string>
#include <vector>

#include "fattn/fattn.hpp"

int main() {
    fattn::Context ctx = fattn::Context::cpu(1);
    if (!ctx.valid()) return 1;
    std::vector<float> buf(1 * 4 * 2 * 8, 0.25f);
    auto q = fattn::Tensor::contiguous(buf.data(), FATTN_F32, 1, 4, 2, 8);
    auto bad_k = fattn::Tensor::contiguous(buf.data(), FATTN_F32, 1, 4, 2, 9);
    fattn::AttnParams p;
    std::string why;
    if (ctx.supports(p, q, q, q, &why) != FATTN_OK) return 1;
    size_t ws = 0;
    fattn_status s = ctx.workspace_size(p, q, bad_k, bad_k, FATTN_DIR_FWD, &ws);
    if (s != FATTN_ERR_SHAPE_MISMATCH || ctx.last_error().find("head dim") == std::string::npos) {
        std::fprintf(stderr, "expected SHAPE_MISMATCH, got %s: %s\n", fattn_status_string(s),
                     ctx.last_error().c_str());
        return 1;
    }
    fattn::Context none = fattn::Context::cuda(4096);  // no such device, or no CUDA in this build
    if (none.valid() || none.init_status() != FATTN_ERR_BACKEND_UNAVAILABLE) return 1;
    std::printf("consumer_noexc: ok (%s)\n", fattn_ctx_last_error(nullptr));
    return 0;
}
