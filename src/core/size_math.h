// size_math.h — saturating byte-count arithmetic for workspace and memory sizes.
//
// Validation bounds every tensor a call names or implies to < 2^63 bytes, but the scratch a
// backend derives from them (f32 partials of a bf16 tensor, a bias tile map of Sq/64 × Skv/64
// bytes, a PaTH history of ~T²/1024 snapshots) can still exceed 64 bits. Sizes then saturate at
// SIZE_MAX instead of wrapping: a size query never under-predicts, and an allocation of SIZE_MAX
// fails with OUT_OF_MEMORY instead of handing a kernel a buffer too small for it.
// Plain division tests (no compiler builtins) so .cu files can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace fattn {

constexpr size_t kSizeSat = SIZE_MAX;

inline size_t sat_add(size_t a, size_t b) { return a > kSizeSat - b ? kSizeSat : a + b; }

inline size_t sat_mul(size_t a, size_t b) {
    if (a == 0 || b == 0) return 0;
    return a > kSizeSat / b ? kSizeSat : a * b;
}

// Product of non-negative int64 factors as a saturated size (a negative factor counts as 0).
inline size_t sat_prod(std::initializer_list<int64_t> xs) {
    size_t n = 1;
    for (int64_t x : xs) n = sat_mul(n, x > 0 ? size_t(x) : 0);
    return n;
}

// x rounded up to a multiple of a (a power of two), saturated.
inline size_t sat_round(size_t x, size_t a) {
    return x > kSizeSat - (a - 1) ? kSizeSat : (x + a - 1) / a * a;
}

}  // namespace fattn
