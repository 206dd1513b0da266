// path_bench.cpp — `fattn-bench path [options]`: time of PaTH fwd and fwd+bwd, and the memory of
// the backward (history bytes PACKED vs RECTANGULAR: the model's number next to the workspace the
// library actually allocated, counted by a context allocator). Both history layouts run in the
// same process on the same inputs, so their ratio is readable. CPU: median wall ms and median
// process CPU ms (fwd_cpu, fwdbwd_cpu) of `reps` runs after one warm-up. CUDA: median of `reps`
// CUDA-event times after two warm-ups, inputs and outputs in device memory.
//
//   fattn-bench path [--backend cpu|cuda] [--T 4096] [--hq 1] [--h 1] [--k 64] [--v 64]
//                    [--dtype bf16|f16|f32] [--threads N] [--reps 3] [--gate 0|1]
//                    [--cu 0,512,2048,...] (varlen, B = 1)  [--check strict|none]
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

#include "bench/bench.h"
#include "bench/path_bench.h"
#include "core/dtype.h"
#include "fattn/fattn.h"
#include "test/path_data.h"

namespace {

struct Alloc {  // counts what the library allocates through the context (host or device)
    fattn_backend be = FATTN_BACKEND_CPU;
    uint64_t live = 0, peak = 0;
    std::vector<std::pair<void *, size_t>> blocks;
};
void *count_alloc(size_t bytes, void *user) {
    auto *a = static_cast<Alloc *>(user);
    void *p = nullptr;
    if (!fbench::dev::alloc(a->be, &p, bytes ? bytes : 1)) return nullptr;
    a->blocks.push_back({p, bytes});
    a->live += bytes;
    a->peak = std::max(a->peak, a->live);
    return p;
}
void count_free(void *ptr, void *user) {
    if (!ptr) return;
    auto *a = static_cast<Alloc *>(user);
    for (size_t i = 0; i < a->blocks.size(); ++i)
        if (a->blocks[i].first == ptr) {
            a->live -= a->blocks[i].second;
            a->blocks.erase(a->blocks.begin() + long(i));
            break;
        }
    fbench::dev::sync(a->be);  // a device block may still be in use by queued work
    fbench::dev::free(a->be, ptr);
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
    fattn_backend be = FATTN_BACKEND_CPU;
    std::vector<int32_t> cu;
    fattn_path_check check = FATTN_PATH_CHECK_STRICT;
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
        else if (a == "--backend") be = std::string(next()) == "cuda" ? FATTN_BACKEND_CUDA : FATTN_BACKEND_CPU;
        else if (a == "--check") check = std::string(next()) == "none" ? FATTN_PATH_CHECK_NONE : FATTN_PATH_CHECK_STRICT;
        else if (a == "--cu") {
            cu.clear();
            for (const char *c = next(); *c;) {
                char *e = nullptr;
                cu.push_back(int32_t(std::strtol(c, &e, 10)));
                c = *e == ',' ? e + 1 : e;
            }
        }
        else if (a == "--dtype") {
            std::string d = next();
            dt = d == "f32" ? FATTN_F32 : d == "f16" ? FATTN_F16 : FATTN_BF16;
        } else {
            std::fprintf(stderr, "fattn-bench path: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (!cu.empty()) T = cu.back();
    fattn_ctx_t *ctx = nullptr;
    if ((be == FATTN_BACKEND_CUDA ? fattn_ctx_init_cuda(0, nullptr, &ctx) : fattn_ctx_init_cpu(threads, &ctx)) != FATTN_OK) {
        std::fprintf(stderr, "fattn-bench path: %s\n", fattn_ctx_last_error(nullptr));
        return 1;
    }
    Alloc counter;
    counter.be = be;
    fattn_ctx_set_allocator(ctx, count_alloc, count_free, &counter);
    const bool cuda = be == FATTN_BACKEND_CUDA;

    // Inputs as the FLA layer feeds them: N(0,1) q/k/v, unit w, beta = 2 sigmoid(.), g = logsigmoid.
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    const size_t es = fattn_dtype_size(dt);
    std::vector<uint8_t> q(size_t(T * HQ * K) * es), k(size_t(T * H * K) * es), v(size_t(T * H * V) * es),
        o(size_t(T * HQ * V) * es), dout(o.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> w(size_t(T * H * K)), beta(size_t(T * H)), g(size_t(T * HQ)), lse(size_t(HQ * T)),
        dw(w.size()), db(beta.size()), dg(g.size());
    fattn_test::fill_normal(q.data(), dt, T * HQ * K, rng, nd);
    fattn_test::fill_normal(k.data(), dt, T * H * K, rng, nd);
    fattn_test::fill_normal(v.data(), dt, T * H * V, rng, nd);
    fattn_test::fill_normal(dout.data(), dt, T * HQ * V, rng, nd);
    for (int64_t i = 0; i < T * H; ++i) {
        fattn_test::unit_row(w.data() + i * K, K, rng, nd);
        beta[size_t(i)] = 2.f / (1.f + std::exp(-nd(rng)));
    }
    for (auto &x : g) x = -std::log1p(std::exp(-(nd(rng) + 4.f)));  // logsigmoid, mostly near 0
    // The buffers in the backend's memory (CUDA: device copies; the host vectors stage them).
    std::vector<void *> owned;
    auto place = [&](void *host, size_t bytes) -> void * {
        if (!cuda) return host;
        void *d = nullptr;
        if (!fbench::dev::alloc(be, &d, bytes) || !fbench::dev::upload(be, d, host, bytes)) return nullptr;
        owned.push_back(d);
        return d;
    };
    auto ten = [&](void *host, size_t bytes, fattn_dtype t, int64_t h, int64_t d) {
        return fattn_tensor_contiguous(place(host, bytes), t, 1, T, h, d);
    };
    fattn_tensor tq = ten(q.data(), q.size(), dt, HQ, K), tk = ten(k.data(), k.size(), dt, H, K),
                 tv = ten(v.data(), v.size(), dt, H, V), tw = ten(w.data(), w.size() * 4, FATTN_F32, H, K),
                 tb = ten(beta.data(), beta.size() * 4, FATTN_F32, H, 1),
                 tg = gate ? ten(g.data(), g.size() * 4, FATTN_F32, HQ, 1) : fattn_tensor_none(),
                 to = ten(o.data(), o.size(), dt, HQ, V), tdo = ten(dout.data(), dout.size(), dt, HQ, V),
                 tdq = ten(dq.data(), dq.size(), dt, HQ, K), tdk = ten(dk.data(), dk.size(), dt, H, K),
                 tdv = ten(dv.data(), dv.size(), dt, H, V), tdw = ten(dw.data(), dw.size() * 4, FATTN_F32, H, K),
                 tdb = ten(db.data(), db.size() * 4, FATTN_F32, H, 1),
                 tdg = gate ? ten(dg.data(), dg.size() * 4, FATTN_F32, HQ, 1) : fattn_tensor_none();
    fattn_tensor tl = fattn_tensor_contiguous(place(lse.data(), lse.size() * 4), FATTN_F32, 1, HQ, T, 1);
    for (const fattn_tensor *x : {&tq, &tk, &tv, &tw, &tb, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb})
        if (!x->data) {
            std::fprintf(stderr, "fattn-bench path: device allocation failed\n");
            return 1;
        }

    std::printf("fattn-bench path: %s, T=%lld Hq=%lld H=%lld K=%lld V=%lld %s gate=%d %s%s reps=%d check=%s\n",
                cuda ? fbench::dev::device_name().c_str() : "CPU", (long long)T, (long long)HQ, (long long)H,
                (long long)K, (long long)V, fattn_dtype_name(dt), gate, cu.empty() ? "dense" : "varlen",
                cuda ? "" : (" threads=" + std::to_string(fattn_ctx_nthreads(ctx))).c_str(), reps,
                check == FATTN_PATH_CHECK_NONE ? "none" : "strict");
    if (cuda)
        std::printf("%-12s %10s %12s %12s %10s %14s %14s %14s\n", "history", "fwd_ms", "fwdbwd_ms", "bwd_ms",
                    "hist_MiB", "bwd_ws_MiB", "measured_MiB", "bwd_peak_MiB");
    else
        std::printf("%-12s %10s %12s %12s %10s %12s %10s %14s %14s %14s\n", "history", "fwd_ms", "fwdbwd_ms",
                    "bwd_ms", "fwd_cpu", "fwdbwd_cpu", "hist_MiB", "bwd_ws_MiB", "measured_MiB", "bwd_peak_MiB");
    for (fattn_path_history hist : {FATTN_PATH_HISTORY_PACKED, FATTN_PATH_HISTORY_RECTANGULAR}) {
        fattn_path_params p = fattn_path_params_default();
        p.history = hist;
        p.check = check;
        if (!cu.empty()) p.cu_seqlens = cu.data(), p.num_seqs = int64_t(cu.size()) - 1;
        fattn_path_memory_info mem;
        if (fattn_path_memory(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &mem) != FATTN_OK) {
            std::printf("error: %s\n", fattn_ctx_last_error(ctx));
            return 1;
        }
        std::vector<double> tf, tfb, cf, cfb;
        counter.peak = 0;
        // Caller-owned workspace on CUDA (one allocation, outside the timed region); the CPU keeps
        // allocating through the context, as before.
        fattn_path_workspace_info wf{}, wb{};
        fattn_path_workspace_size(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, FATTN_DIR_FWD, &wf);
        fattn_path_workspace_size(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, FATTN_DIR_BWD, &wb);
        void *ws = cuda ? count_alloc(size_t(std::max(wf.total_bytes, wb.total_bytes)), &counter) : nullptr;
        const size_t wsb = cuda ? size_t(std::max(wf.total_bytes, wb.total_bytes)) : 0;
        fbench::dev::Timer tmf(be), tmb(be);
        const int warm = cuda ? 2 : 1;
        for (int r = 0; r < reps + warm; ++r) {
            double t0 = now_ms(), c0 = cpu_ms();
            tmf.start();
            fattn_status s1 = fattn_path_fwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, ws, wsb);
            const double ef = tmf.stop_ms();
            double t1 = now_ms(), c1 = cpu_ms();
            tmb.start();
            fattn_status s2 = fattn_path_bwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, &tdo, &tdq, &tdk,
                                             &tdv, &tdw, &tdb, &tdg, ws, wsb);
            const double eb = tmb.stop_ms();
            double t2 = now_ms(), c2 = cpu_ms();
            if (cuda) t0 = 0, t1 = ef, t2 = ef + eb;
            if (s1 != FATTN_OK || s2 != FATTN_OK) {
                std::printf("error: %s\n", fattn_ctx_last_error(ctx));
                return 1;
            }
            if (r >= warm) tf.push_back(t1 - t0), tfb.push_back(t2 - t0), cf.push_back(c1 - c0), cfb.push_back(c2 - c0);
        }
        if (ws) count_free(ws, &counter);
        const uint64_t hb = hist == FATTN_PATH_HISTORY_PACKED ? mem.history_packed_bytes : mem.history_rectangular_bytes;
        const char *name = hist == FATTN_PATH_HISTORY_PACKED ? "packed" : "rectangular";
        if (cuda)
            std::printf("%-12s %10.3f %12.3f %12.3f %10.2f %14.2f %14.2f %14.2f\n", name, median(tf), median(tfb),
                        median(tfb) - median(tf), mib(hb), mib(mem.bwd_workspace_bytes), mib(counter.peak),
                        mib(mem.bwd_peak_bytes));
        else
            std::printf("%-12s %10.1f %12.1f %12.1f %10.1f %12.1f %10.2f %14.2f %14.2f %14.2f\n", name, median(tf),
                        median(tfb), median(tfb) - median(tf), median(cf), median(cfb), mib(hb),
                        mib(mem.bwd_workspace_bytes), mib(counter.peak), mib(mem.bwd_peak_bytes));
    }
    for (void *d : owned) fbench::dev::free(be, d);
    fattn_ctx_free(ctx);
    return 0;
}
