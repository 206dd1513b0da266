// parallel.h — a deterministic parallel-for for the CPU backend.
//
// parallel_for(n, nthreads, fn) calls fn(i) exactly once for every i in [0, n), spread over up to
// nthreads threads (the caller's thread included). Work items are independent by contract: each
// writes its own outputs with a fixed internal order, so results never depend on nthreads or on
// which thread ran which item. Exceptions must not escape fn (the library never throws across the
// C API); fn returns nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace fattn {

template <class Fn>
void parallel_for(int64_t n, int nthreads, Fn &&fn) {
    if (n <= 0) return;
    int nt = int(std::min<int64_t>(std::max(nthreads, 1), n));
    if (nt == 1) {
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
    std::atomic<int64_t> next{0};  // dynamic scheduling: only *which thread* varies, never the math
    auto worker = [&]() {
        for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
    };
    // A thread that cannot be created (resource limits) must not abort the process: run with the
    // threads we got. Results do not depend on the thread count, so this changes only the speed.
    std::vector<std::thread> pool;
    try {
        pool.reserve(size_t(nt - 1));
        for (int t = 1; t < nt; ++t) pool.emplace_back(worker);
    } catch (...) {
    }
    worker();
    for (auto &th : pool) th.join();
}

}  // namespace fattn
