// parallel.cpp — the persistent worker pools behind fattn::parallel_for (see parallel.h).
//
// A Pool is a set of worker threads that sleep on a condition variable between jobs. One job is
// (n items, fn, ctx) and an atomic "next item" counter; the caller and the workers that join it
// claim items from the counter until none is left (dynamic scheduling changes only which thread
// runs an item, never the math: items are independent and each has a fixed internal order).
//
// Pools live in a process-wide free list: a call borrows one (making it if none is idle) and
// returns it, so concurrent calls from several user threads, or a parallel_for nested inside a
// task, each get their own pool and never wait for each other. Pools are never destroyed (their
// threads sleep until the process exits), which is what makes them persistent; the state is
// reached through a heap pointer that is never freed, so exit-time destructors never race with
// a pool still in use.
//
// fork(): a child process has none of the parent's worker threads. pthread_atfork hands the child
// a fresh, empty free list (the parent's pools are abandoned there, never touched), so a library
// call in the child makes new threads instead of waiting for threads that do not exist.
#include "core/parallel.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace fattn::detail {

namespace {

class Pool {
  public:
    // Runs the job; the caller works too. Uses at most nt - 1 workers (fewer if threads could not
    // be created: the caller alone still finishes every item).
    void run(int64_t n, int nt, TaskFn fn, void *ctx) {
        grow(nt - 1);
        {
            std::lock_guard<std::mutex> lk(mu_);
            fn_ = fn;
            ctx_ = ctx;
            n_ = n;
            helpers_ = nt - 1;
            next_.store(0, std::memory_order_relaxed);
            open_ = true;
            gen_.store(gen_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        }
        cv_work_.notify_all();
        drain(fn, ctx, n);
        // Every item is claimed; close the job so a worker that wakes late does not join it, and
        // wait for the workers that did join to finish the items they claimed.
        std::unique_lock<std::mutex> lk(mu_);
        open_ = false;
        cv_done_.wait(lk, [&] { return running_ == 0; });
    }

  private:
    void drain(TaskFn fn, void *ctx, int64_t n) {
        for (int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < n;
             i = next_.fetch_add(1, std::memory_order_relaxed))
            fn(ctx, i);
    }

    // Adds workers up to `want`; stops quietly at the first thread that cannot be created.
    void grow(int want) {
        while (int(threads_.size()) < want) {
            try {
                int id = int(threads_.size());
                threads_.reserve(threads_.size() + 1);
                threads_.emplace_back([this, id] { worker(id); });
            } catch (...) {  // std::system_error (resource limits) or bad_alloc: fewer threads
                return;
            }
        }
    }

    void worker(int id) {
        uint64_t seen = 0;
        for (;;) {
            // Spin briefly before sleeping: the kernels issue several parallel_for calls back to
            // back (bias map, delta, main loop, dQ sum), and a condition-variable wake-up costs
            // tens of microseconds. Short, so an idle pool does not steal a shared core.
            for (int s = 0; s < kSpin && gen_.load(std::memory_order_acquire) == seen; ++s) pause();
            TaskFn fn;
            void *ctx;
            int64_t n;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_work_.wait(lk, [&] { return gen_.load(std::memory_order_relaxed) != seen; });
                seen = gen_.load(std::memory_order_relaxed);
                if (!open_ || id >= helpers_) continue;  // finished already, or not needed
                ++running_;
                fn = fn_;
                ctx = ctx_;
                n = n_;
            }
            drain(fn, ctx, n);
            std::lock_guard<std::mutex> lk(mu_);
            if (--running_ == 0) cv_done_.notify_one();
        }
    }

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    static constexpr int kSpin = 4096;  // ~100 µs of pause instructions on current x86 cores

    std::mutex mu_;
    std::condition_variable cv_work_, cv_done_;
    std::vector<std::thread> threads_;  // only the borrowing caller touches it (in grow)
    std::atomic<uint64_t> gen_{0};      // bumped per job, under mu_
    std::atomic<int64_t> next_{0};
    TaskFn fn_ = nullptr;
    void *ctx_ = nullptr;
    int64_t n_ = 0;
    int helpers_ = 0;
    int running_ = 0;
    bool open_ = false;
};

struct FreeList {
    std::mutex mu;
    std::vector<Pool *> idle;
};

// Never freed (see the file comment); replaced in a forked child.
FreeList *g_free = nullptr;
std::once_flag g_once;

void atfork_prepare() { g_free->mu.lock(); }
void atfork_parent() { g_free->mu.unlock(); }
void atfork_child() {
    // The parent's pools (idle or borrowed) have no threads here: abandon them with the old list,
    // whose mutex this thread holds from atfork_prepare.
    g_free = new (std::nothrow) FreeList();
}

bool init_free_list() {
    std::call_once(g_once, [] {
        g_free = new (std::nothrow) FreeList();
        if (g_free) pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    });
    return g_free != nullptr;
}

Pool *borrow() {
    if (!init_free_list()) return nullptr;
    FreeList *fl = g_free;
    {
        std::lock_guard<std::mutex> lk(fl->mu);
        if (!fl->idle.empty()) {
            Pool *p = fl->idle.back();
            fl->idle.pop_back();
            return p;
        }
    }
    return new (std::nothrow) Pool();
}

void give_back(Pool *p) {
    FreeList *fl = g_free;
    if (!fl) return;  // a forked child that could not allocate a list: keep the pool abandoned
    try {
        std::lock_guard<std::mutex> lk(fl->mu);
        fl->idle.push_back(p);
    } catch (...) {  // out of memory growing the list: the pool is abandoned, nothing breaks
    }
}

}  // namespace

Runner &current_runner() {
    static thread_local Runner r;
    return r;
}

void parallel_run(int64_t n, int nt, TaskFn fn, void *ctx) {
    const Runner r = current_runner();
    if (r.run) {
        // The items run on the caller's threads, where no runner is installed: a loop a task
        // starts (none today) would use fattn's pools rather than re-enter the caller's runner.
        r.run(r.user, n, nt, fn, ctx);
        return;
    }
    Pool *p = borrow();
    if (!p) {  // out of memory: run every item on the caller
        for (int64_t i = 0; i < n; ++i) fn(ctx, i);
        return;
    }
    p->run(n, nt, fn, ctx);
    give_back(p);
}

}  // namespace fattn::detail
