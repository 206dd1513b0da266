// test_parallel.cpp — fattn::parallel_for on its persistent pools: every item exactly once for
// any thread count, nested and concurrent calls, workers that outlive a call (no spawn per call),
// and a forked child that can still run parallel work. Run: fattn-unit --gtest_filter='Parallel*'
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <dirent.h>
#include <thread>
#include <vector>

#include "core/parallel.h"

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

}  // namespace
