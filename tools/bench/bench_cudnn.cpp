// bench_cudnn.cpp — the cuDNN SDPA arm of fattn-bench, through the header-only cudnn-frontend.
// Compiled with the frontend only when CMake found its headers (FATTN_CUDNN_FRONTEND_DIR, see
// tools/bench/bench.cmake; scripts/fetch-peer-headers.sh brings them into .carry/); otherwise
// the arm reports "skipped: not built". Implementation in bench_cudnn_impl.h.
#include "bench/bench.h"

#if defined(FATTN_BENCH_CUDNN)
#include "bench/bench_cudnn_impl.h"
#else
namespace fbench {
bool cudnn_built() { return false; }
ArmResult run_cudnn_arm(const Case &, const Options &, const HostData &) {
    ArmResult r;
    r.arm = "cudnn";
    r.status = "skipped: not built (no cudnn-frontend headers; scripts/fetch-peer-headers.sh)";
    return r;
}
}  // namespace fbench
#endif
