// test_wgmma_emu.cpp — the emulated wgmma (src/emu: emu::wgmma behind cuda/attn/sm90/wgmma_ops.cuh)
// against a plain float64 product, on tiles laid out by this file's own reading of the 128-byte
// swizzle (ptx.cuh's header: [rows, cols] as panels of 128-byte rows, the 16-byte chunk index
// XOR row % 8), through the products the kernels issue (wgmma_products.cuh): A·Bᵀ with both
// operands K-major in shared memory (bf16, f16, tf32; one and two panels of k), and A·B with A as
// the m16n8k16 / m16n8k8 register fragment and B read MN-major (16-bit) or from a transposed
// tf32 copy. Every accumulator is checked at the row and column the documented map gives it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "emu/cuda_host.h"
#include "cuda/attn/sm90/wgmma_products.cuh"

namespace {

using fattn::cuda::attn::sm90_rs_product;
using fattn::cuda::attn::sm90_ss_product;
using fattn::cuda::sm90::saddr;

// Byte offset of element (r, c) of a [rows, cols] tile of es-byte elements in 128-byte-row panels.
size_t sw_off(int r, int c, int rows, int es) {
    const int per = 128 / es, chunk = (c % per) * es / 16, within = (c % per) * es % 16;
    return size_t(c / per) * size_t(rows) * 128 + size_t(r) * 128 + size_t((chunk ^ (r % 8)) * 16 + within);
}

template <typename T> uint32_t bits_of(float x);
template <> uint32_t bits_of<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x).bits; }
template <> uint32_t bits_of<__half>(float x) { return __float2half_rn(x).bits; }
template <> uint32_t bits_of<float>(float x) { return fattn::emu::f32_to_tf32_bits(x); }
template <typename T> float value_of(uint32_t b) {
    if constexpr (sizeof(T) == 4) return fattn::f32_from_bits(b);
    else if constexpr (std::is_same_v<T, __half>) return fattn::emu::f16_bits_to_f32(uint16_t(b));
    else return fattn::emu::bf16_bits_to_f32(uint16_t(b));
}

// A [64, KD] and B [N, KD] of values exact in T; want = A·Bᵀ in double.
template <typename T> struct Operands {
    int KD, N;
    std::vector<uint32_t> a, b;  // bits
    std::vector<double> want;
    Operands(int kd, int n, unsigned seed) : KD(kd), N(n), a(size_t(64 * kd)), b(size_t(n * kd)), want(size_t(64 * n)) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto &x : a) x = bits_of<T>(u(rng));
        for (auto &x : b) x = bits_of<T>(u(rng));
        for (int m = 0; m < 64; ++m)
            for (int n2 = 0; n2 < n; ++n2) {
                double s = 0;
                for (int k = 0; k < kd; ++k) s += double(value_of<T>(A(m, k))) * double(value_of<T>(B(n2, k)));
                want[size_t(m * n + n2)] = s;
            }
    }
    uint32_t A(int m, int k) const { return a[size_t(m * KD + k)]; }
    uint32_t B(int n, int k) const { return b[size_t(n * KD + k)]; }
};

void put(char *base, size_t off, uint32_t bits, int es) { std::memcpy(base + off, &bits, size_t(es)); }

// Every accumulator of every thread against want: element 4j + i of thread t is row
// 16·(t/32) + (t%32)/4 + 8·(i/2), column 8j + 2·(t%4) + i%2.
template <int N> void check(const std::vector<float> &got, const std::vector<double> &want, const char *what) {
    int bad = 0;
    for (int t = 0; t < 128; ++t)
        for (int e = 0; e < N / 2; ++e) {
            const int j = e / 4, i = e % 4, lane = t % 32;
            const int row = 16 * (t / 32) + lane / 4 + 8 * (i / 2), col = 8 * j + 2 * (lane % 4) + i % 2;
            const double w = want[size_t(row * N + col)], g = got[size_t(t * (N / 2) + e)];
            if (std::fabs(g - w) > 1e-5 * (1 + std::fabs(w)) && bad++ < 5)
                ADD_FAILURE() << what << ": row " << row << " col " << col << " got " << g << " want " << w;
        }
    EXPECT_EQ(bad, 0) << what;
}

// acc = A·Bᵀ, both K-major in shared memory (KD columns: one or two panels).
template <typename T, int KD, int N> void ss_case(unsigned seed) {
    constexpr int es = sizeof(T);
    const Operands<T> op(KD, N, seed);
    const size_t a_panel = 64 * 128, b_panel = size_t(N) * 128, panels = size_t(KD * es / 128 > 0 ? KD * es / 128 : 1);
    std::vector<float> got(size_t(128 * (N / 2)));
    fattn::emu::launch({}, 128, (a_panel + b_panel) * panels, [&](char *sm) {
        if (threadIdx.x == 0) {
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < KD; ++k) put(sm, sw_off(m, k, 64, es), op.A(m, k), es);
            for (int n = 0; n < N; ++n)
                for (int k = 0; k < KD; ++k) put(sm + a_panel * panels, sw_off(n, k, N, es), op.B(n, k), es);
        }
        __syncthreads();
        float acc[N / 2];
        sm90_ss_product<T, KD, N>(acc, saddr(sm), uint32_t(a_panel), saddr(sm + a_panel * panels), uint32_t(b_panel));
        for (int e = 0; e < N / 2; ++e) got[size_t(int(threadIdx.x) * (N / 2) + e)] = acc[e];
    });
    check<N>(got, op.want, "ss");
}

// acc = A·B over NK k-steps: A as each warp's register fragments, B = op.B read as [KD, N] (its
// transpose) MN-major from a row tile (16-bit), or from a transposed copy's [N, 32] panels (tf32).
template <typename T, int N, int NK> void rs_case(unsigned seed) {
    constexpr int es = sizeof(T), KS = es == 4 ? 8 : 16, KD = NK * KS;
    const Operands<T> op(KD, N, seed);
    std::vector<float> got(size_t(128 * (N / 2)));
    // 16-bit: rows = k, [KD, N] in panels of 64 columns (KD·128 bytes apart). tf32: [N, KD] in
    // panels of 32 k (N·128 bytes apart): what sm90_rs_product's descriptors walk.
    const size_t bytes = es == 4 ? size_t(N) * 128 * size_t((KD + 31) / 32) : size_t(KD) * 128 * size_t((N + 63) / 64);
    fattn::emu::launch({}, 128, bytes, [&](char *sm) {
        if (threadIdx.x == 0) {
            for (int n = 0; n < N; ++n)
                for (int k = 0; k < KD; ++k)
                    put(sm, es == 4 ? sw_off(n, k, N, es) : sw_off(k, n, KD, es), op.B(n, k), es);
        }
        __syncthreads();
        const int t = int(threadIdx.x), w = t / 32, g = (t % 32) / 4, q = t % 4;
        uint32_t a[NK][4];
        for (int kk = 0; kk < NK; ++kk)
            for (int r = 0; r < 4; ++r) {
                const int m = 16 * w + g + 8 * (r % 2);
                if constexpr (es == 4) {
                    a[kk][r] = op.A(m, kk * 8 + q + 4 * (r / 2));
                } else {
                    const int k = kk * 16 + 2 * q + 8 * (r / 2);
                    a[kk][r] = op.A(m, k) | op.A(m, k + 1) << 16;
                }
            }
        float acc[N / 2];
        for (float &x : acc) x = 0.f;
        sm90_rs_product<T, N, NK>(acc, a, saddr(sm), saddr(sm), uint32_t(KD * 128));
        for (int e = 0; e < N / 2; ++e) got[size_t(t * (N / 2) + e)] = acc[e];
    });
    check<N>(got, op.want, "rs");
}

TEST(WgmmaEmu, SsMatchesTheProduct) {
    ss_case<__nv_bfloat16, 64, 64>(1);
    ss_case<__nv_bfloat16, 128, 128>(2);  // two panels of k
    ss_case<__half, 64, 128>(3);
    ss_case<__half, 128, 64>(4);
    ss_case<float, 32, 64>(5);
    ss_case<float, 128, 128>(6);  // four panels of k
}

TEST(WgmmaEmu, RsMatchesTheProduct) {
    rs_case<__nv_bfloat16, 64, 4>(7);
    rs_case<__nv_bfloat16, 128, 4>(8);  // B across two panels of columns
    rs_case<__half, 64, 2>(9);
    rs_case<float, 64, 4>(10);
    rs_case<float, 128, 8>(11);  // two panels of k
}

}  // namespace
