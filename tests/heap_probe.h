// heap_probe.h — what the memory-model tests share to measure a call: whether the global heap
// hook is compiled in (not under AddressSanitizer, whose runtime owns operator new/delete), the
// hook's counters (defined once, with the hook, in tests/test_memory.cpp), and a context allocator
// that counts the workspace the library takes through it.
#pragma once

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define FATTN_HEAP_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FATTN_HEAP_HOOK 0
#endif
#endif
#ifndef FATTN_HEAP_HOOK
#define FATTN_HEAP_HOOK 1
#endif

#if FATTN_HEAP_HOOK
namespace heap {
extern std::atomic<int64_t> live, high;  // live operator-new bytes and their high-water mark
}
#endif

// fattn_ctx_set_allocator(ctx, CountingAlloc::alloc, CountingAlloc::free_fn, &counter).
struct CountingAlloc {
    int64_t live = 0, high = 0;
    static void *alloc(size_t n, void *u) {
        auto *c = static_cast<CountingAlloc *>(u);
        void *p = std::malloc(n);
        if (p) c->high = std::max(c->high, c->live += int64_t(malloc_usable_size(p)));
        return p;
    }
    static void free_fn(void *p, void *u) {
        static_cast<CountingAlloc *>(u)->live -= int64_t(malloc_usable_size(p));
        std::free(p);
    }
};
