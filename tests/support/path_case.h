// path_case.h — one PaTH problem of the tests: q [B, T, Hq, K], k and w [B, T, H, K],
// v [B, T, H, V], beta [B, T, H], g [B, T, Hq] when gated; q, k, v (o, dout and their
// gradients) in dt; packed sequences at the offsets cu (empty: dense, else B = 1).
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "fattn/fattn.h"

namespace fattn_test {

struct PathCase {
    const char *name;
    int64_t B, T, Hq, H, K, V;
    std::vector<int32_t> cu;
    fattn_dtype dt;
    bool gate = false;
    fattn_path_history hist = FATTN_PATH_HISTORY_PACKED;
    // Where a test draws beta ~ U(beta_lo, 1.95 or 2): close to 2 the products stay
    // near-orthogonal, so long-range (cross-segment) paths carry real weight in every gradient;
    // lower values contract them.
    double beta_lo = 0.3;
    // A rounding test's bar is FLA's times this: with K below 16 the tf32 / f16 products' rounding
    // alone exceeds it on dw and dbeta (test_path_emu.cpp: its exact-tf32 run shows the kernels' own
    // residual is f32's).
    double tol_scale = 1.0;
};

// A parameterized test's cases print as their names.
inline void PrintTo(const PathCase &c, std::ostream *os) { *os << c.name; }

}  // namespace fattn_test
