// test_parallel.cpp — fattn::parallel_for on its persistent pools: every item exactly once for
// any thread count, nested and concurrent calls, workers that outlive a call (no spawn per call),
// a forked child that can still run parallel work, and a caller's runner (fattn_ctx_set_parallel)
// that replaces the pools for a context's calls. Run: fattn-unit --gtest_filter='Parallel*'
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "fattn/fattn.h"

namespace {

// Threads of this process (Linux: entries of /proc/self/task); -1 if unreadable.
int thread_count() {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    while (dirent *e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n;
}

void expect_each_once(int64_t n, int nthreads) {
    std::vector<std::atomic<int>> hits(size_t(n > 0 ? n : 1));
    for (auto &h : hits) h.store(0);
    fattn::parallel_for(n, nthreads, [&](int64_t i) { hits[size_t(i)].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i << " of " << n << ", threads " << nthreads;
}

TEST(Parallel, EveryItemExactlyOnce) {
    for (int nt : {1, 2, 3, 8})
        for (int64_t n : {0, 1, 2, 7, 1000}) expect_each_once(n, nt);
}

TEST(Parallel, NestedAndConcurrentCalls) {
    std::atomic<int64_t> total{0};
    std::vector<std::thread> users;
    for (int u = 0; u < 3; ++u)
        users.emplace_back([&] {
            for (int rep = 0; rep < 20; ++rep)
                fattn::parallel_for(8, 3, [&](int64_t) {
                    fattn::parallel_for(10, 2, [&](int64_t j) { total.fetch_add(j + 1); });
                });
        });
    for (auto &t : users) t.join();
    EXPECT_EQ(total.load(), 3 * 20 * 8 * 55);
}

TEST(Parallel, WorkersPersistAcrossCalls) {
    fattn::parallel_for(64, 4, [](int64_t) {});
    const int after_first = thread_count();
    if (after_first < 0) GTEST_SKIP() << "/proc/self/task not readable";
    for (int rep = 0; rep < 200; ++rep) fattn::parallel_for(64, 4, [](int64_t) {});
    // The pool's 3 workers are still alive after the calls (a spawn-per-call pool would have
    // joined them), and 200 more calls made no new threads.
    EXPECT_GE(after_first, 4);
    EXPECT_EQ(thread_count(), after_first);
}

TEST(Parallel, ForkedChildRunsParallelWork) {
    fattn::parallel_for(16, 2, [](int64_t) {});  // the parent's pool exists before the fork
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        alarm(20);  // a child waiting on the parent's (absent) workers dies here instead of hanging
        std::atomic<int> n{0};
        fattn::parallel_for(100, 2, [&](int64_t) { n.fetch_add(1); });
        _exit(n.load() == 100 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// A caller's runner: its own threads claim the items from the top down (another order than
// fattn's pool), and it records what it was asked.
struct Recorder {
    std::atomic<int64_t> calls{0}, items{0};
    std::atomic<int> max_threads{0};
};
void reverse_runner(void *user, int64_t n, int max_threads, fattn_task_fn task, void *task_ctx) {
    auto *rec = static_cast<Recorder *>(user);
    rec->calls.fetch_add(1), rec->items.fetch_add(n);
    if (max_threads > rec->max_threads.load()) rec->max_threads.store(max_threads);  // one caller at a time
    std::atomic<int64_t> next{n - 1};
    auto work = [&] {
        for (int64_t i = next.fetch_sub(1); i >= 0; i = next.fetch_sub(1)) task(task_ctx, i);
    };
    std::vector<std::thread> ts;
    for (int t = 1; t < max_threads; ++t) ts.emplace_back(work);
    work();
    for (auto &t : ts) t.join();
}

// Softmax attention (causal GQA with Skv != Sq, 5 q tiles) and PaTH forward and backward; every
// output's bytes, appended.
std::vector<uint8_t> attn_and_path(fattn_ctx_t *ctx) {
    std::vector<uint8_t> out;
    auto append = [&](const std::vector<float> &v) {
        const auto *b = reinterpret_cast<const uint8_t *>(v.data());
        out.insert(out.end(), b, b + v.size() * 4);
    };
    auto filled = [](size_t n, int seed) {
        std::vector<float> v(n);
        uint32_t x = 2463534242u + uint32_t(seed);
        for (float &f : v) x ^= x << 13, x ^= x >> 17, x ^= x << 5, f = float(x % 2001) / 1000.f - 1.f;
        return v;
    };
    {
        const int64_t B = 2, Sq = 300, Skv = 260, Hq = 4, Hkv = 2, D = 32;
        auto q = filled(size_t(B * Sq * Hq * D), 1), k = filled(size_t(B * Skv * Hkv * D), 2);
        auto v = filled(size_t(B * Skv * Hkv * D), 3), dout = filled(size_t(B * Sq * Hq * D), 4);
        std::vector<float> o(q.size()), lse(size_t(B * Hq * Sq)), dq(q.size()), dk(k.size()), dv(v.size());
        fattn_tensor tq = fattn_tensor_contiguous(q.data(), FATTN_F32, B, Sq, Hq, D);
        fattn_tensor tk = fattn_tensor_contiguous(k.data(), FATTN_F32, B, Skv, Hkv, D);
        fattn_tensor tv = fattn_tensor_contiguous(v.data(), FATTN_F32, B, Skv, Hkv, D);
        fattn_tensor to = fattn_tensor_contiguous(o.data(), FATTN_F32, B, Sq, Hq, D);
        fattn_tensor tl = fattn_tensor_contiguous(lse.data(), FATTN_F32, B, Hq, Sq, 1);
        fattn_tensor tdo = fattn_tensor_contiguous(dout.data(), FATTN_F32, B, Sq, Hq, D);
        fattn_tensor tdq = fattn_tensor_contiguous(dq.data(), FATTN_F32, B, Sq, Hq, D);
        fattn_tensor tdk = fattn_tensor_contiguous(dk.data(), FATTN_F32, B, Skv, Hkv, D);
        fattn_tensor tdv = fattn_tensor_contiguous(dv.data(), FATTN_F32, B, Skv, Hkv, D);
        fattn_attn_params p = fattn_attn_params_default();
        p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
        EXPECT_EQ(fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0), FATTN_OK);
        EXPECT_EQ(fattn_attn_bwd(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk, &tdv, nullptr, 0), FATTN_OK);
        for (auto *x : {&o, &lse, &dq, &dk, &dv}) append(*x);
    }
    {
        const int64_t B = 1, T = 70, HQ = 4, H = 2, K = 16, V = 16;
        auto q = filled(size_t(B * T * HQ * K), 5), k = filled(size_t(B * T * H * K), 6);
        auto v = filled(size_t(B * T * H * V), 7), dout = filled(size_t(B * T * HQ * V), 8);
        std::vector<float> w(size_t(B * T * H * K), 0.f), beta(size_t(B * T * H), 1.f);
        for (int64_t i = 0; i < B * T * H; ++i) w[size_t(i * K + i % K)] = 1.f;  // |w| = 1
        std::vector<float> o(dout.size()), lse(size_t(B * HQ * T)), dq(q.size()), dk(k.size()), dv(v.size());
        std::vector<float> dw(w.size()), db(beta.size());
        auto t4 = [](std::vector<float> &x, int64_t a, int64_t b, int64_t c, int64_t d) {
            return fattn_tensor_contiguous(x.data(), FATTN_F32, a, b, c, d);
        };
        fattn_tensor tq = t4(q, B, T, HQ, K), tk = t4(k, B, T, H, K), tv = t4(v, B, T, H, V);
        fattn_tensor tw = t4(w, B, T, H, K), tb = t4(beta, B, T, H, 1), to = t4(o, B, T, HQ, V);
        fattn_tensor tl = t4(lse, B, HQ, T, 1), tdo = t4(dout, B, T, HQ, V), tdq = t4(dq, B, T, HQ, K);
        fattn_tensor tdk = t4(dk, B, T, H, K), tdv = t4(dv, B, T, H, V), tdw = t4(dw, B, T, H, K);
        fattn_tensor tdb = t4(db, B, T, H, 1);
        fattn_path_params p = fattn_path_params_default();
        EXPECT_EQ(fattn_path_fwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, nullptr, &to, &tl, nullptr, 0), FATTN_OK)
            << fattn_ctx_last_error(ctx);
        EXPECT_EQ(fattn_path_bwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, nullptr, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                                 &tdw, &tdb, nullptr, nullptr, 0),
                  FATTN_OK)
            << fattn_ctx_last_error(ctx);
        for (auto *x : {&o, &lse, &dq, &dk, &dv, &dw, &db}) append(*x);
    }
    return out;
}

TEST(Parallel, CallerRunnerRunsEveryLoopBitwiseTheSame) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(3, &ctx), FATTN_OK);
    const std::vector<uint8_t> pool = attn_and_path(ctx);
    Recorder rec;
    ASSERT_EQ(fattn_ctx_set_parallel(ctx, reverse_runner, &rec), FATTN_OK);
    const std::vector<uint8_t> runner = attn_and_path(ctx);
    EXPECT_GT(rec.calls.load(), 4);  // softmax fwd, bwd (delta, main, dQ sum), PaTH phases
    EXPECT_GT(rec.items.load(), 20);
    EXPECT_EQ(rec.max_threads.load(), 3);
    EXPECT_TRUE(runner == pool) << "outputs differ between fattn's pool and the caller's runner";
    // NULL restores fattn's pool: the runner is not called again.
    const int64_t calls = rec.calls.load();
    ASSERT_EQ(fattn_ctx_set_parallel(ctx, nullptr, &rec), FATTN_OK);
    EXPECT_TRUE(attn_and_path(ctx) == pool);
    EXPECT_EQ(rec.calls.load(), calls);
    fattn_ctx_free(ctx);
    EXPECT_EQ(fattn_ctx_set_parallel(nullptr, reverse_runner, nullptr), FATTN_ERR_NULL_POINTER);
}

}  // namespace
