// test_tile_gemm_emu.cpp — the PaTH kernels' tile products (src/cuda/path/common.cuh: cta_gemm over
// shared-memory tiles) under the CPU emulation, against a float64 product: an f32 tile times a
// 16-bit one and the reverse (tf32 mma with the 16-bit ldmatrix fragments widened in registers and
// the f32 operand read in their k order, warp_gemm2), and tiles of one type (16-bit mma, tf32),
// with every storage of the operands the kernels use: A by rows or transposed (AT), B by rows
// (rows = n, as K in Q·Kᵀ) or by k rows (BK, as V in P·V). The values are exact in tf32, so a
// product that pairs an A element with the wrong B element is off by O(1), not by rounding.
// Also the tiles' global -> shared loads (load_tile and the swizzled load_tile_sw), both loops of each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda/path/common.cuh"

namespace {

namespace pk = fattn::pathk;

// A value exact in E (and so in tf32): 16-bit types round to their grid, f32 to tf32's.
template <typename E> float exact_in(float x) {
    if constexpr (sizeof(E) == 4) return pk::tf32_round(x);
    else return pk::to_f(pk::from_f<E>(x));
}

// got[m][n] = op(A) op(B) over KD by cta_gemm on NW = 8 warps, M = 64, against the double product.
template <typename EA, typename EB, bool AT, bool BK, int N, int KD> void run_case(unsigned seed) {
    constexpr int M = 64, NW = 8, NB = N / 16;  // eight warp tiles of 16 x 8NB cover 64 x N once
    const int lda = pk::tile_stride<EA>(AT ? M : KD), ldb = pk::tile_stride<EB>(BK ? N : KD);
    const size_t bytes_a = size_t(AT ? KD : M) * size_t(lda) * sizeof(EA);
    const size_t bytes_b = (size_t(BK ? KD : N) * size_t(ldb) * sizeof(EB) + 15) / 16 * 16;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const size_t na = size_t(M) * KD, nb = size_t(KD) * N;
    std::vector<float> a(na), b(nb);  // logical A[m][k], B[k][n]
    for (auto &x : a) x = exact_in<EA>(u(rng));
    for (auto &x : b) x = exact_in<EB>(u(rng));
    std::vector<double> want(size_t(M) * N, 0.0);
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double s = 0;
            for (int k = 0; k < KD; ++k) s += double(a[size_t(m) * KD + k]) * double(b[size_t(k) * N + n]);
            want[size_t(m) * N + n] = s;
        }
    std::vector<float> got(size_t(M) * N, std::nanf(""));
    fattn::emu::launch({}, 32 * NW, bytes_a + bytes_b, [&](char *smem) {
        EA *sA = reinterpret_cast<EA *>(smem);
        EB *sB = reinterpret_cast<EB *>(smem + bytes_a);
        if (pk::tid() == 0) {
            std::memset(smem, 0, bytes_a + bytes_b);
            for (int m = 0; m < M; ++m)
                for (int k = 0; k < KD; ++k) sA[AT ? k * lda + m : m * lda + k] = pk::from_f<EA>(a[size_t(m) * KD + k]);
            for (int k = 0; k < KD; ++k)
                for (int n = 0; n < N; ++n) sB[BK ? k * ldb + n : n * ldb + k] = pk::from_f<EB>(b[size_t(k) * N + n]);
        }
        pk::sync();
        pk::cta_gemm<EA, AT, BK, NB, NW>(M, N, KD, sA, lda, sB, ldb, [&](int r, int c, float v) { got[size_t(r) * N + c] = v; });
    });
    int bad = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            const double w = want[size_t(m) * N + n], g = got[size_t(m) * N + n];
            if (!(std::fabs(g - w) <= 1e-4 * (1.0 + std::fabs(w))) && bad++ < 5)
                ADD_FAILURE() << "row " << m << " col " << n << ": got " << g << ", want " << w;
        }
    EXPECT_EQ(bad, 0);
}

template <typename EA, typename EB> void all_layouts(unsigned seed) {
    run_case<EA, EB, false, false, 64, 128>(seed);
    run_case<EA, EB, false, true, 128, 64>(seed + 1);
    run_case<EA, EB, true, false, 64, 64>(seed + 2);
    run_case<EA, EB, true, true, 128, 64>(seed + 3);
}

TEST(PathTileGemm, F32TimesBf16) { all_layouts<float, pk::bf16_t>(11); }
TEST(PathTileGemm, Bf16TimesF32) { all_layouts<pk::bf16_t, float>(21); }
TEST(PathTileGemm, F32TimesF16) { all_layouts<float, pk::f16_t>(31); }
TEST(PathTileGemm, F16TimesF32) { all_layouts<pk::f16_t, float>(41); }
TEST(PathTileGemm, OneType) {
    all_layouts<pk::bf16_t, pk::bf16_t>(51);
    all_layouts<pk::f16_t, pk::f16_t>(61);
    all_layouts<float, float>(71);
}

// load_tile (cp.async) of a rows x width tile from a strided global array, both loops (kStep: the
// per-thread row step; else the element loop): every element below rows_valid / cols_valid is the
// source's, every other one 0, at any thread count, including one the row width does not divide
// (the row step then falls back to the element loop).
template <typename E, int NT, bool kStep>
void load_case(int rows, int width, int rows_valid, int cols_valid, int64_t gstride) {
    const int ST = pk::tile_stride<E>(width);
    std::vector<E> g(size_t(rows + 2) * size_t(gstride));
    for (size_t i = 0; i < g.size(); ++i) g[i] = pk::from_f<E>(float(int(i % 1999) - 999));
    std::vector<float> got(size_t(rows) * width, std::nanf(""));
    fattn::emu::launch({}, NT, size_t(rows) * ST * sizeof(E), [&](char *smem) {
        E *s = reinterpret_cast<E *>(smem);
        pk::load_tile<E, NT, kStep>(s, ST, g.data(), gstride, rows, width, rows_valid, cols_valid, true);
        pk::cp_commit();
        pk::cp_wait<0>();
        pk::sync();
        if (pk::tid() == 0)
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < width; ++c) got[size_t(r) * width + c] = pk::to_f(s[r * ST + c]);
    });
    int bad = 0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < width; ++c) {
            const float want = r < rows_valid && c < cols_valid ? pk::to_f(g[size_t(r) * gstride + c]) : 0.f;
            if (!(got[size_t(r) * width + c] == want) && bad++ < 3)
                ADD_FAILURE() << "NT " << NT << " step " << kStep << " rows " << rows << " width " << width << " valid " << rows_valid
                              << " x " << cols_valid << ": (" << r << ", " << c << ") got " << got[size_t(r) * width + c] << ", want " << want;
        }
    EXPECT_EQ(bad, 0);
}

template <typename E, int NT> void load_cases() {
    constexpr int EPC = 16 / int(sizeof(E));
    for (int width : {8 * EPC, 16 * EPC, 3 * EPC})
        for (int rows : {64, 128})
            for (int rv : {rows, rows - 5, 1, 0})
                for (int cv : {width, width - EPC}) {
                    load_case<E, NT, true>(rows, width, rv, cv, width + 3 * EPC);
                    load_case<E, NT, false>(rows, width, rv, cv, width + 3 * EPC);
                }
}

// load_tile_sw (cp.async) of a 64 x D tile into 128-byte swizzled panels, both loops: element
// (r, c) lands at sw128_elem(r, c) and is the source's below rows_valid / cols_valid, else 0.
template <typename E, int D, int NT, bool kStep> void load_sw_case(int rows_valid, int cols_valid, int64_t gstride) {
    constexpr int R = pk::kC;
    std::vector<E> g(size_t(R + 2) * size_t(gstride));
    for (size_t i = 0; i < g.size(); ++i) g[i] = pk::from_f<E>(float(int(i % 1999) - 999));
    std::vector<float> got(size_t(R) * D, std::nanf(""));
    fattn::emu::launch({}, NT, size_t(R) * D * sizeof(E), [&](char *smem) {
        E *s = reinterpret_cast<E *>(smem);
        pk::load_tile_sw<E, D, NT, kStep>(s, g.data(), gstride, rows_valid, cols_valid, true);
        pk::cp_commit();
        pk::cp_wait<0>();
        pk::sync();
        if (pk::tid() == 0)
            for (int r = 0; r < R; ++r)
                for (int c = 0; c < D; ++c) got[size_t(r) * D + c] = pk::to_f(s[pk::sw128_elem(r, c)]);
    });
    int bad = 0;
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < D; ++c) {
            const float want = r < rows_valid && c < cols_valid ? pk::to_f(g[size_t(r) * gstride + c]) : 0.f;
            if (!(got[size_t(r) * D + c] == want) && bad++ < 3)
                ADD_FAILURE() << "D " << D << " NT " << NT << " step " << kStep << " valid " << rows_valid << " x " << cols_valid
                              << ": (" << r << ", " << c << ") got " << got[size_t(r) * D + c] << ", want " << want;
        }
    EXPECT_EQ(bad, 0);
}

template <typename E, int D, int NT> void load_sw_cases() {
    for (int rv : {64, 59, 1, 0})
        for (int cv : {D, D - 8, 8}) {
            load_sw_case<E, D, NT, true>(rv, cv, D + 24);
            load_sw_case<E, D, NT, false>(rv, cv, D + 24);
        }
}

TEST(PathTileLoad, SwizzledBothLoops) {
    load_sw_cases<pk::bf16_t, 128, 128>();
    load_sw_cases<pk::f16_t, 64, 128>();
    load_sw_cases<pk::bf16_t, 64, 256>();
    load_sw_cases<pk::bf16_t, 128, 96>();  // 16 chunks a row do not divide 96 threads: the element loop
}

TEST(PathTileLoad, BothLoopsEveryShape) {
    load_cases<pk::bf16_t, 128>();
    load_cases<pk::bf16_t, 256>();
    load_cases<float, 128>();
    load_cases<pk::f16_t, 256>();
}

}  // namespace
