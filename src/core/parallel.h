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
//
// A caller's runner (fattn_ctx_set_parallel) replaces the pools: the C entry points install the
// context's runner for the duration of a CPU call (ScopedRunner, on the calling thread), and the
// parallel_for calls made on that thread hand their items to it. Loops started inside a task run
// on fattn's pools as before (the runner is per thread, and a task runs on the runner's threads).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fattn/fattn.h"

namespace fattn {

namespace detail {
using TaskFn = void (*)(void *ctx, int64_t i);
// Runs fn(ctx, i) for i in [0, n) on the caller and up to nt - 1 pool workers (or through the
// calling thread's runner); returns when all n items are done. nt >= 2, n >= 1.
void parallel_run(int64_t n, int nt, TaskFn fn, void *ctx);

struct Runner {
    fattn_parallel_fn run = nullptr;
    void *user = nullptr;
};
Runner &current_runner();  // this thread's (run == nullptr: fattn's pools)
}  // namespace detail

// Installs a context's runner on this thread for one library call; restores the previous one.
class ScopedRunner {
  public:
    explicit ScopedRunner(const detail::Runner &r) : saved_(detail::current_runner()) {
        detail::current_runner() = r;
    }
    ~ScopedRunner() { detail::current_runner() = saved_; }
    ScopedRunner(const ScopedRunner &) = delete;
    ScopedRunner &operator=(const ScopedRunner &) = delete;

  private:
    detail::Runner saved_;
};

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
