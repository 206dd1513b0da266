// path_bench.cpp — `fattn-bench path [options]`: CPU time of PaTH fwd and fwd+bwd, and the memory
// of the backward (history bytes PACKED vs RECTANGULAR: the model's number next to the workspace
// the library actually allocated, counted by a context allocator). Both history layouts run in the
// same process on the same inputs, so their ratio is readable. Times: median wall ms and median
// process CPU ms (fwd_cpu, fwdbwd_cpu) of `reps` runs after one warm-up.
//
//   fattn-bench path [--T 4096] [--hq 1] [--h 1] [--k 64] [--v 64] [--dtype bf16|f16|f32]
//                    [--threads N] [--reps 3] [--gate 0|1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "bench/path_bench.h"
#include "core/dtype.h"
#include "fattn/fattn.h"

namespace {

struct Alloc {  // counts what the library allocates through the context
    uint64_t live = 0, peak = 0;
};
void *count_alloc(size_t bytes, void *user) {
    auto *a = static_cast<Alloc *>(user);
    void *p = std::malloc(bytes + 64);
    if (!p) return nullptr;
    std::memcpy(p, &bytes, sizeof bytes);
    a->live += bytes;
    a->peak = std::max(a->peak, a->live);
    return static_cast<char *>(p) + 64;
}
void count_free(void *ptr, void *user) {
    if (!ptr) return;
    auto *a = static_cast<Alloc *>(user);
    char *p = static_cast<char *>(ptr) - 64;
    size_t bytes;
    std::memcpy(&bytes, p, sizeof bytes);
    a->live -= bytes;
    std::free(p);
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Process CPU time (all threads): on a shared, oversubscribed machine the wall clock of a
// single-threaded run is inflated by waiting; the CPU time is what the computation cost.
double cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }

}  // namespace

extern "C" int fattn_bench_path_main(int argc, char **argv) {
    int64_t T = 4096, HQ = 1, H = 1, K = 64, V = 64;
    int threads = 0, reps = 3, gate = 1;
    fattn_dtype dt = FATTN_BF16;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> const char * { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "path") continue;
        if (a == "--T") T = std::atoll(next());
        else if (a == "--hq") HQ = std::atoll(next());
        else if (a == "--h") H = std::atoll(next());
        else if (a == "--k") K = std::atoll(next());
        else if (a == "--v") V = std::atoll(next());
        else if (a == "--threads") threads = std::atoi(next());
        else if (a == "--reps") reps = std::max(1, std::atoi(next()));
        else if (a == "--gate") gate = std::atoi(next());
        else if (a == "--dtype") {
            std::string d = next();
            dt = d == "f32" ? FATTN_F32 : d == "f16" ? FATTN_F16 : FATTN_BF16;
        } else {
            std::fprintf(stderr, "fattn-bench path: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    fattn_ctx_t *ctx = nullptr;
    if (fattn_ctx_init_cpu(threads, &ctx) != FATTN_OK) return 1;
    Alloc counter;
    fattn_ctx_set_allocator(ctx, count_alloc, count_free, &counter);

    // Inputs as the FLA layer feeds them: N(0,1) q/k/v, unit w, beta = 2 sigmoid(.), g = logsigmoid.
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    const size_t es = fattn_dtype_size(dt);
    std::vector<uint8_t> q(size_t(T * HQ * K) * es), k(size_t(T * H * K) * es), v(size_t(T * H * V) * es),
        o(size_t(T * HQ * V) * es), dout(o.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> w(size_t(T * H * K)), beta(size_t(T * H)), g(size_t(T * HQ)), lse(size_t(HQ * T)),
        dw(w.size()), db(beta.size()), dg(g.size());
    for (int64_t i = 0; i < T * HQ * K; ++i) fattn::store_f32(q.data(), dt, i, nd(rng));
    for (int64_t i = 0; i < T * H * K; ++i) fattn::store_f32(k.data(), dt, i, nd(rng));
    for (int64_t i = 0; i < T * H * V; ++i) fattn::store_f32(v.data(), dt, i, nd(rng));
    for (int64_t i = 0; i < T * HQ * V; ++i) fattn::store_f32(dout.data(), dt, i, nd(rng));
    for (int64_t i = 0; i < T * H; ++i) {
        float n = 0;
        for (int64_t d = 0; d < K; ++d) n += (w[size_t(i * K + d)] = nd(rng)) * w[size_t(i * K + d)];
        for (int64_t d = 0; d < K; ++d) w[size_t(i * K + d)] /= std::sqrt(n);
        beta[size_t(i)] = 2.f / (1.f + std::exp(-nd(rng)));
    }
    for (auto &x : g) x = -std::log1p(std::exp(-(nd(rng) + 4.f)));  // logsigmoid, mostly near 0
    fattn_tensor tq = fattn_tensor_contiguous(q.data(), dt, 1, T, HQ, K),
                 tk = fattn_tensor_contiguous(k.data(), dt, 1, T, H, K),
                 tv = fattn_tensor_contiguous(v.data(), dt, 1, T, H, V),
                 tw = fattn_tensor_contiguous(w.data(), FATTN_F32, 1, T, H, K),
                 tb = fattn_tensor_contiguous(beta.data(), FATTN_F32, 1, T, H, 1),
                 tg = gate ? fattn_tensor_contiguous(g.data(), FATTN_F32, 1, T, HQ, 1) : fattn_tensor_none(),
                 to = fattn_tensor_contiguous(o.data(), dt, 1, T, HQ, V),
                 tl = fattn_tensor_contiguous(lse.data(), FATTN_F32, 1, HQ, T, 1),
                 tdo = fattn_tensor_contiguous(dout.data(), dt, 1, T, HQ, V),
                 tdq = fattn_tensor_contiguous(dq.data(), dt, 1, T, HQ, K),
                 tdk = fattn_tensor_contiguous(dk.data(), dt, 1, T, H, K),
                 tdv = fattn_tensor_contiguous(dv.data(), dt, 1, T, H, V),
                 tdw = fattn_tensor_contiguous(dw.data(), FATTN_F32, 1, T, H, K),
                 tdb = fattn_tensor_contiguous(db.data(), FATTN_F32, 1, T, H, 1),
                 tdg = gate ? fattn_tensor_contiguous(dg.data(), FATTN_F32, 1, T, HQ, 1) : fattn_tensor_none();

    std::printf("fattn-bench path: CPU, T=%lld Hq=%lld H=%lld K=%lld V=%lld %s gate=%d threads=%d reps=%d\n",
                (long long)T, (long long)HQ, (long long)H, (long long)K, (long long)V, fattn_dtype_name(dt),
                gate, fattn_ctx_nthreads(ctx), reps);
    std::printf("%-12s %10s %12s %12s %10s %12s %10s %14s %14s %14s\n", "history", "fwd_ms", "fwdbwd_ms",
                "bwd_ms", "fwd_cpu", "fwdbwd_cpu", "hist_MiB", "bwd_ws_MiB", "measured_MiB", "bwd_peak_MiB");
    for (fattn_path_history hist : {FATTN_PATH_HISTORY_PACKED, FATTN_PATH_HISTORY_RECTANGULAR}) {
        fattn_path_params p = fattn_path_params_default();
        p.history = hist;
        fattn_path_memory_info mem;
        if (fattn_path_memory(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &mem) != FATTN_OK) {
            std::printf("error: %s\n", fattn_ctx_last_error(ctx));
            return 1;
        }
        std::vector<double> tf, tfb, cf, cfb;
        counter.peak = 0;
        for (int r = 0; r < reps + 1; ++r) {  // first rep is warm-up
            double t0 = now_ms(), c0 = cpu_ms();
            fattn_status s1 = fattn_path_fwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, nullptr, 0);
            double t1 = now_ms(), c1 = cpu_ms();
            fattn_status s2 = fattn_path_bwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, &tdo, &tdq, &tdk,
                                             &tdv, &tdw, &tdb, &tdg, nullptr, 0);
            double t2 = now_ms(), c2 = cpu_ms();
            if (s1 != FATTN_OK || s2 != FATTN_OK) {
                std::printf("error: %s\n", fattn_ctx_last_error(ctx));
                return 1;
            }
            if (r > 0) tf.push_back(t1 - t0), tfb.push_back(t2 - t0), cf.push_back(c1 - c0), cfb.push_back(c2 - c0);
        }
        const uint64_t hb = hist == FATTN_PATH_HISTORY_PACKED ? mem.history_packed_bytes : mem.history_rectangular_bytes;
        std::printf("%-12s %10.1f %12.1f %12.1f %10.1f %12.1f %10.2f %14.2f %14.2f %14.2f\n",
                    hist == FATTN_PATH_HISTORY_PACKED ? "packed" : "rectangular", median(tf), median(tfb),
                    median(tfb) - median(tf), median(cf), median(cfb), mib(hb), mib(mem.bwd_workspace_bytes), mib(counter.peak),
                    mib(mem.bwd_peak_bytes));
    }
    fattn_ctx_free(ctx);
    return 0;
}
