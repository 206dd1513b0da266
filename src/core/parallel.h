// parallel.h — a deterministic parallel-for for the CPU backend, on persistent worker threads.
//
// parallel_for(n, nthreads, fn) calls fn(i) exactly once for every i in [0, n), spread over up to
// nthreads threads (the caller's thread included). Work items are independent by contract: each
// writes its own outputs with a fixed internal order, so results never depend on nthreads or on
// which thread ran which item. Exceptions must not escape fn (the library never throws across the
// C API); fn returns nothing.
//
// The threads come from a process-wide cache of pools (parallel.cpp): a call borrows an idle pool
// (or makes one), grows it to nthreads - 1 workers if it can, and gives it back, so steady-state
// calls create no threads. A thread that cannot be created only lowers the speed of that call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace fattn {

namespace detail {
using TaskFn = void (*)(void *ctx, int64_t i);
// Runs fn(ctx, i) for i in [0, n) on the caller and up to nt - 1 pool workers; returns when all
// n items are done. nt >= 2, n >= 1.
void parallel_run(int64_t n, int nt, TaskFn fn, void *ctx);
}  // namespace detail

template <class Fn>
void parallel_for(int64_t n, int nthreads, Fn &&fn) {
    if (n <= 0) return;
    int nt = int(std::min<int64_t>(std::max(nthreads, 1), n));
    if (nt == 1) {
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
    using F = std::remove_reference_t<Fn>;
    detail::parallel_run(n, nt, [](void *c, int64_t i) { (*static_cast<F *>(c))(i); },
                         const_cast<void *>(static_cast<const void *>(&fn)));
}

}  // namespace fattn
