// bench_sgemm.cpp — the CPU ceiling fattn-bench prints beside its own rates: OpenBLAS SGEMM
// (C = A·B, n × n × n, f32) on the bench's thread count, timed in the same process right before
// each case, so a fused rate is compared with a GEMM measured under the same machine load.
// Built with OpenBLAS when CMake finds it (tools/bench/blas.cmake); otherwise "no BLAS".
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"

#ifdef FATTN_BENCH_OPENBLAS
extern "C" {
// OpenBLAS's C interface (cblas.h): row-major = 101, no transpose = 111.
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_config(void);
char *openblas_get_corename(void);
}
#endif

namespace fbench {

bool sgemm_built() {
#ifdef FATTN_BENCH_OPENBLAS
    return true;
#else
    return false;
#endif
}

std::string sgemm_name() {
#ifdef FATTN_BENCH_OPENBLAS
    return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")";
#else
    return "no BLAS (OpenBLAS not found when fattn-bench was configured)";
#endif
}

double sgemm_gflops(int threads, int n, int reps) {
#ifdef FATTN_BENCH_OPENBLAS
    const size_t nn = size_t(n) * size_t(n);
    std::vector<float> a(nn), b(nn), c(nn);
    for (size_t i = 0; i < nn; ++i) {  // values in [-1, 1): no denormals, no special cases
        a[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-3f;
        b[i] = float(int(i * 40503u % 2001) - 1000) * 1e-3f;
    }
    openblas_set_num_threads(threads > 0 ? threads : int(std::thread::hardware_concurrency()));
    auto once = [&] {
        cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        return true;
    };
    double ms = dev::time_median(FATTN_BACKEND_CPU, 1, reps, once);
    // OpenBLAS workers busy-wait for a while after a call; let them go to sleep before the
    // case's own timing starts, so they do not steal its cores.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return ms > 0 ? 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e9 : -1;
#else
    (void)threads, (void)n, (void)reps;
    return -1;
#endif
}

}  // namespace fbench
