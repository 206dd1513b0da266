// host_par.h — host-side helpers for fattn-test's big buffers (the --large cases hold tensors of
// more than 2^31 elements): byte vectors that are not zero-filled on growth, and a parallel loop
// over chunks that the caller fixes, so every result is the same whatever the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace fattn_test {

// An allocator whose value-less construct() leaves the element uninitialized: resize() of a
// HostBytes only reserves the pages; the first writer (often a parallel fill) touches them.
template <class T, class A = std::allocator<T>>
class NoInitAlloc : public A {
    using traits = std::allocator_traits<A>;

public:
    template <class U>
    struct rebind {
        using other = NoInitAlloc<U, typename traits::template rebind_alloc<U>>;
    };
    using A::A;
    template <class U>
    void construct(U *p) noexcept(std::is_nothrow_default_constructible<U>::value) {
        ::new (static_cast<void *>(p)) U;
    }
    template <class U, class... Args>
    void construct(U *p, Args &&...args) {
        traits::construct(static_cast<A &>(*this), p, std::forward<Args>(args)...);
    }
};

using HostBytes = std::vector<unsigned char, NoInitAlloc<unsigned char>>;

// Threads for host loops over big buffers (all cores).
inline int host_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

// fn(chunk) for every chunk in [0, nchunks), on up to host_threads() threads; inline when
// nchunks <= 1. Chunks are the caller's fixed partition: the work of one chunk never depends on
// which thread runs it.
template <class F>
void par_chunks(int64_t nchunks, F &&fn) {
    const int64_t nt = std::min<int64_t>(nchunks, host_threads());
    if (nt <= 1) {
        for (int64_t c = 0; c < nchunks; ++c) fn(c);
        return;
    }
    std::atomic<int64_t> next{0};
    auto worker = [&] {
        for (int64_t c; (c = next.fetch_add(1)) < nchunks;) fn(c);
    };
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < nt; ++t) pool.emplace_back(worker);
    worker();
    for (auto &t : pool) t.join();
}

// par_chunks over [0, n) in fixed blocks of `block` items: fn(begin, end).
template <class F>
void par_range(int64_t n, int64_t block, F &&fn) {
    par_chunks((n + block - 1) / block, [&](int64_t c) { fn(c * block, std::min(n, (c + 1) * block)); });
}

}  // namespace fattn_test
