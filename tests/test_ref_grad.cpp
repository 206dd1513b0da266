// test_ref_grad.cpp — the float64 oracle (src/cpu/ref/attn_ref.*) checked against itself:
// its backward vs central finite differences of its forward, for L = Σ o∘W with random W,
// on small cases covering causal (both alignments), window, -inf bias, GQA at B > 1, Skv != Sq,
// varlen (empty and length-1 sequences), fully-masked rows and columns; plus a few closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/ref/attn_ref.h"

namespace {

using fattn::ref::Mask;
using fattn::ref::Outputs;
using fattn::ref::Problem;
using fattn::ref::Tensors;

const double kInf = std::numeric_limits<double>::infinity();

struct Built {
    Problem p;
    Tensors t;
    std::vector<double> w;  // loss weights, same shape as o
};

Built build(Problem p, uint32_t seed, int bias_kind) {
    Built r;
    r.p = p;
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    auto fill = [&](std::vector<double> &x, int64_t n) {
        x.resize(size_t(n));
        for (auto &e : x) e = nd(rng);
    };
    fill(r.t.q, p.B * p.Sq * p.Hq * p.D);
    fill(r.t.k, p.B * p.Skv * p.Hkv * p.D);
    fill(r.t.v, p.B * p.Skv * p.Hkv * p.Dv);
    fill(r.t.dout, p.B * p.Sq * p.Hq * p.Dv);
    r.w = r.t.dout;  // dL/do = W: the backward is seeded with the loss weights
    if (p.has_bias) {
        fill(r.t.bias, p.B * p.Hq * p.Sq * p.Skv);
        // bias_kind 1: -inf on some rows entirely (fully-masked rows) and some columns
        // entirely (keys nobody sees), plus scattered -inf.
        if (bias_kind == 1) {
            for (int64_t b = 0; b < p.B; ++b)
                for (int64_t h = 0; h < p.Hq; ++h)
                    for (int64_t i = 0; i < p.Sq; ++i)
                        for (int64_t j = 0; j < p.Skv; ++j) {
                            double &x = r.t.bias[size_t(((b * p.Hq + h) * p.Sq + i) * p.Skv + j)];
                            if (i % 4 == 1 || j % 3 == 2 || (i + 2 * j) % 5 == 0) x = -kInf;
                        }
        }
    }
    return r;
}

double loss(const Built &b) {
    Outputs o;
    fattn::ref::attn_fwd(b.p, b.t, &o);
    double l = 0.0;
    for (size_t i = 0; i < o.o.size(); ++i) l += o.o[i] * b.w[i];
    return l;
}

double max_abs(const std::vector<double> &x) {
    double m = 0.0;
    for (double e : x) m = std::fmax(m, std::fabs(e));
    return m;
}

// Central differences on every element of one input; returns max |fd - analytic| / max |analytic|.
double fd_check(Built b, std::vector<double> Tensors::*which, const std::vector<double> &analytic,
                const std::string &what) {
    const double h = 1e-5;
    double err = 0.0;
    std::vector<double> &x = b.t.*which;
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::isinf(x[i])) continue;  // a -inf bias has no derivative to check
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(b);
        x[i] = x0 - h;
        double lm = loss(b);
        x[i] = x0;
        double fd = (lp - lm) / (2 * h);
        err = std::fmax(err, std::fabs(fd - analytic[i]));
    }
    double scale = max_abs(analytic);
    EXPECT_GT(scale, 0.0) << what << ": reference gradient is all zero";
    return scale > 0 ? err / scale : err;
}

void check_case(Problem p, int bias_kind, bool check_dbias = false) {
    Built b = build(p, 1234u + uint32_t(p.Sq * 7 + p.Skv), bias_kind);
    Outputs o;
    fattn::ref::attn_fwd(b.p, b.t, &o);
    fattn::ref::attn_bwd(b.p, b.t, &o, check_dbias);
    for (double x : o.o) ASSERT_TRUE(std::isfinite(x));
    for (double x : o.dq) ASSERT_TRUE(std::isfinite(x));
    for (double x : o.dk) ASSERT_TRUE(std::isfinite(x));
    for (double x : o.dv) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LT(fd_check(b, &Tensors::q, o.dq, "dq"), 1e-7);
    EXPECT_LT(fd_check(b, &Tensors::k, o.dk, "dk"), 1e-7);
    EXPECT_LT(fd_check(b, &Tensors::v, o.dv, "dv"), 1e-7);
    if (check_dbias) {
        EXPECT_LT(fd_check(b, &Tensors::bias, o.dbias, "dbias"), 1e-7);
    }
    // Fully-masked rows (lse = -inf): o and dq exactly 0.
    for (int64_t bb = 0; bb < p.B; ++bb)
        for (int64_t h = 0; h < p.Hq; ++h)
            for (int64_t i = 0; i < p.Sq; ++i) {
                if (o.lse[size_t((bb * p.Hq + h) * p.Sq + i)] != -kInf) continue;
                for (int64_t d = 0; d < p.Dv; ++d) EXPECT_EQ(o.o[size_t(((bb * p.Sq + i) * p.Hq + h) * p.Dv + d)], 0.0);
                for (int64_t d = 0; d < p.D; ++d) EXPECT_EQ(o.dq[size_t(((bb * p.Sq + i) * p.Hq + h) * p.D + d)], 0.0);
            }
}

Problem prob(int64_t B, int64_t Sq, int64_t Skv, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv) {
    Problem p;
    p.B = B, p.Sq = Sq, p.Skv = Skv, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.Dv = Dv;
    p.scale = 1.0 / std::sqrt(double(D));
    return p;
}

TEST(RefGrad, Plain) { check_case(prob(1, 5, 5, 1, 1, 4, 4), 0); }
TEST(RefGrad, CrossSkvNeSq) { check_case(prob(2, 3, 7, 2, 2, 5, 3), 0); }
TEST(RefGrad, CausalTopLeft) {
    Problem p = prob(1, 6, 9, 2, 1, 4, 4);
    p.mask.causal = 1;
    check_case(p, 0);
}
TEST(RefGrad, CausalBottomRightSqGtSkv) {  // first Sq - Skv rows see nothing
    Problem p = prob(1, 8, 5, 1, 1, 4, 3);
    p.mask.causal = 2;
    check_case(p, 0);
}
TEST(RefGrad, WindowBothAlignments) {
    Problem p = prob(1, 7, 9, 1, 1, 3, 3);
    p.mask.window_left = 2, p.mask.window_right = 1;
    check_case(p, 0);
    p.mask.window_bottom_right = true;
    check_case(p, 0);
}
TEST(RefGrad, CausalPlusWindow) {
    Problem p = prob(1, 9, 9, 1, 1, 4, 4);
    p.mask.causal = 1, p.mask.window_left = 3;
    check_case(p, 0);
}
TEST(RefGrad, BiasWithNegInfRowsAndColumns) {
    Problem p = prob(2, 6, 7, 2, 1, 3, 4);
    p.has_bias = true;
    check_case(p, 1, /*check_dbias=*/true);
}
TEST(RefGrad, DenseBiasDerivative) {
    Problem p = prob(1, 4, 6, 2, 2, 3, 3);
    p.has_bias = true;
    check_case(p, 0, /*check_dbias=*/true);
}
TEST(RefGrad, GqaBatch2) {
    Problem p = prob(2, 5, 6, 4, 2, 4, 5);
    p.mask.causal = 2;
    check_case(p, 0);
}
TEST(RefGrad, VarlenEmptyAndLengthOne) {
    Problem p = prob(1, 9, 11, 2, 1, 3, 3);
    p.cu_q = {0, 4, 4, 5, 9};    // lengths 4, 0, 1, 4
    p.cu_kv = {0, 3, 5, 6, 11};  // lengths 3, 2, 1, 5
    p.mask.causal = 2;
    check_case(p, 0);
}

// Closed forms: one key -> o = v and lse = the logit; two keys -> the softmax by hand.
TEST(RefForward, ClosedForms) {
    Problem p = prob(1, 1, 2, 1, 1, 1, 1);
    p.scale = 0.5;
    Tensors t;
    t.q = {2.0};
    t.k = {1.0, -3.0};
    t.v = {10.0, 20.0};
    Outputs o;
    fattn::ref::attn_fwd(p, t, &o);
    double s0 = 1.0, s1 = -3.0;  // 0.5 * 2 * k
    double z = std::exp(s0) + std::exp(s1);
    EXPECT_NEAR(o.o[0], (10.0 * std::exp(s0) + 20.0 * std::exp(s1)) / z, 1e-12);
    EXPECT_NEAR(o.lse[0], std::log(z), 1e-12);
    p.mask.window_left = 0, p.mask.window_right = 0;  // query 0 sees only key 0 (top-left)
    fattn::ref::attn_fwd(p, t, &o);
    EXPECT_EQ(o.o[0], 10.0);
    EXPECT_NEAR(o.lse[0], 1.0, 1e-15);
}

TEST(RefMask, Definitions) {
    Mask m;
    m.causal = 1;  // top-left: j <= i
    EXPECT_TRUE(fattn::ref::key_allowed(m, 2, 2, 4, 6));
    EXPECT_FALSE(fattn::ref::key_allowed(m, 2, 3, 4, 6));
    m.causal = 2;  // bottom-right: j <= i + 6 - 4
    EXPECT_TRUE(fattn::ref::key_allowed(m, 2, 4, 4, 6));
    EXPECT_FALSE(fattn::ref::key_allowed(m, 2, 5, 4, 6));
    Mask w;
    w.window_left = 1, w.window_right = 2;  // top-left diag i: i-1 <= j <= i+2
    EXPECT_FALSE(fattn::ref::key_allowed(w, 3, 1, 6, 6));
    EXPECT_TRUE(fattn::ref::key_allowed(w, 3, 2, 6, 6));
    EXPECT_TRUE(fattn::ref::key_allowed(w, 3, 5, 6, 6));
    EXPECT_FALSE(fattn::ref::key_allowed(w, 3, 6, 6, 8));
    EXPECT_FALSE(fattn::ref::key_allowed(w, 0, 0, 1, 0));  // no keys at all
}

TEST(RefDecode, F16AndBf16) {
    uint16_t one_f16 = 0x3c00, sub_f16 = 0x0001, neg2_bf16 = 0xc000;
    EXPECT_EQ(fattn::ref::decode(&one_f16, FATTN_F16, 0), 1.0);
    EXPECT_EQ(fattn::ref::decode(&sub_f16, FATTN_F16, 0), std::ldexp(1.0, -24));
    EXPECT_EQ(fattn::ref::decode(&neg2_bf16, FATTN_BF16, 0), -2.0);
}

}  // namespace

// The sampled layer (single rows / single keys, straight from views) agrees with the
// materialized core through the gather layer, on a strided f32 problem with GQA, varlen,
// a window and a broadcast bias holding -inf.
TEST(RefSampled, MatchesCore) {
    const int64_t total_q = 11, total_kv = 13, Hq = 4, Hkv = 2, D = 3, Dv = 2;
    std::vector<int32_t> cu_q = {0, 5, 5, 11}, cu_kv = {0, 6, 8, 13};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    // q stored [Hq, S, D] (transposed strides), the rest [S, H, D].
    std::vector<float> q(size_t(Hq * total_q * D)), k(size_t(total_kv * Hkv * D)), v(size_t(total_kv * Hkv * Dv)),
        dout(size_t(total_q * Hq * Dv)), bias(size_t(total_q * total_kv));
    for (auto *x : {&q, &k, &v, &dout, &bias})
        for (auto &e : *x) e = nd(rng);
    for (int64_t i = 0; i < total_q; ++i) bias[size_t(i * total_kv + (i * 5) % total_kv)] = -INFINITY;
    fattn::AttnBwdParams a{};
    a.batch = 3, a.seqlen_q = 6, a.seqlen_kv = 6, a.total_q = total_q, a.total_kv = total_kv;
    a.hq = Hq, a.hkv = Hkv, a.d = D;
    a.dim_v = Dv;
    a.dtype = FATTN_F32, a.scale = 0.7f;
    a.q = q.data(), a.q_sb = 0, a.q_ss = D, a.q_sh = total_q * D;
    a.k = k.data(), a.k_sb = 0, a.k_ss = Hkv * D, a.k_sh = D;
    a.v = v.data(), a.v_sb = 0, a.v_ss = Hkv * Dv, a.v_sh = Dv;
    a.dout = dout.data(), a.do_sb = 0, a.do_ss = Hq * Dv, a.do_sh = Dv;
    a.bias = bias.data(), a.bias_dtype = FATTN_F32, a.bias_sb = 0, a.bias_sh = 0, a.bias_si = total_kv;
    a.win_left = 3, a.win_right = 1, a.bottom_right = true;
    a.cu_seqlens_q = cu_q.data(), a.cu_seqlens_kv = cu_kv.data();
    Problem p;
    Tensors t;
    fattn::ref::gather(a, &p, &t);
    Outputs o;
    fattn::ref::attn_fwd(p, t, &o);
    fattn::ref::attn_bwd(p, t, &o);
    int64_t masked = 0;
    for (int64_t s = 0; s < 3; ++s) {
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < cu_q[size_t(s) + 1] - cu_q[size_t(s)]; ++i) {
                fattn::ref::RowRef r;
                fattn::ref::attn_row(a, s, h, i, &r);
                const int64_t gi = cu_q[size_t(s)] + i;
                const double lse = o.lse[size_t(h * total_q + gi)];
                masked += lse == -kInf;
                if (lse == -kInf) EXPECT_EQ(r.lse, -kInf);
                else EXPECT_NEAR(r.lse, lse, 1e-12);
                for (int64_t d = 0; d < Dv; ++d) EXPECT_NEAR(r.o[size_t(d)], o.o[size_t((gi * Hq + h) * Dv + d)], 1e-12);
                for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(r.dq[size_t(d)], o.dq[size_t((gi * Hq + h) * D + d)], 1e-12);
            }
        for (int64_t hk = 0; hk < Hkv; ++hk)
            for (int64_t j = 0; j < cu_kv[size_t(s) + 1] - cu_kv[size_t(s)]; ++j) {
                std::vector<double> dk, dv;
                fattn::ref::attn_key(a, s, hk, j, &dk, &dv);
                const int64_t gj = cu_kv[size_t(s)] + j;
                for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(dk[size_t(d)], o.dk[size_t((gj * Hkv + hk) * D + d)], 1e-12);
                for (int64_t d = 0; d < Dv; ++d) EXPECT_NEAR(dv[size_t(d)], o.dv[size_t((gj * Hkv + hk) * Dv + d)], 1e-12);
            }
    }
    EXPECT_GT(max_abs(o.dq), 0.0);
    EXPECT_GT(max_abs(o.dk), 0.0);
}
