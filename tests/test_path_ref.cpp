// test_path_ref.cpp — the float64 PaTH oracle against central finite differences.
//
// Loss = sum(o * R) with a random R; every input (q, k, v, w, beta, g) is perturbed element by
// element and the oracle's analytic gradient must match (o(x+h) - o(x-h)) / 2h. Each gradient is
// also asserted non-zero (a 0-vs-0 comparison would pass vacuously). Small cases: dense and
// varlen, MHA and GQA, gate on and off, V != K.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/ref/path_ref.h"

namespace {

using fattn::ref::PathRefShape;

struct Inputs {
    std::vector<double> q, k, v, w, beta, g;
};

Inputs random_inputs(const PathRefShape &s, bool gate, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::uniform_real_distribution<double> ub(0.2, 1.9), ug(-0.3, 0.0);
    const int64_t R = s.B * s.T;
    Inputs in;
    auto fill = [&](std::vector<double> &x, int64_t n) {
        x.resize(n);
        for (auto &e : x) e = nd(rng);
    };
    fill(in.q, R * s.Hq * s.K);
    fill(in.k, R * s.H * s.K);
    fill(in.v, R * s.H * s.V);
    fill(in.w, R * s.H * s.K);
    for (int64_t i = 0; i < R * s.H; ++i) {  // unit w rows, as the layer feeds them
        double n = 0;
        for (int64_t d = 0; d < s.K; ++d) n += in.w[i * s.K + d] * in.w[i * s.K + d];
        for (int64_t d = 0; d < s.K; ++d) in.w[i * s.K + d] /= std::sqrt(n);
    }
    in.beta.resize(R * s.H);
    for (auto &e : in.beta) e = ub(rng);
    if (gate) {
        in.g.resize(R * s.Hq);
        for (auto &e : in.g) e = ug(rng);
    }
    return in;
}

double loss(const PathRefShape &s, const Inputs &in, const std::vector<double> &R) {
    std::vector<double> o(s.B * s.T * s.Hq * s.V), lse(s.B * s.Hq * s.T);
    fattn::ref::path_ref_fwd(s, in.q.data(), in.k.data(), in.v.data(), in.w.data(), in.beta.data(),
                             in.g.empty() ? nullptr : in.g.data(), o.data(), lse.data());
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * R[i];
    return l;
}

void check_fd(const PathRefShape &s, bool gate, uint32_t seed) {
    Inputs in = random_inputs(s, gate, seed);
    std::mt19937 rng(seed + 1);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<double> R(s.B * s.T * s.Hq * s.V);
    for (auto &e : R) e = nd(rng);
    const int64_t rows = s.B * s.T;
    std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.v.size()), dw(in.w.size()),
        db(in.beta.size()), dg(rows * s.Hq);
    fattn::ref::path_ref_bwd(s, in.q.data(), in.k.data(), in.v.data(), in.w.data(), in.beta.data(),
                             gate ? in.g.data() : nullptr, R.data(), dq.data(), dk.data(),
                             dv.data(), dw.data(), db.data(), dg.data());
    struct Arg {
        const char *name;
        std::vector<double> *x;
        const std::vector<double> *grad;
    };
    std::vector<Arg> args = {{"q", &in.q, &dq}, {"k", &in.k, &dk},      {"v", &in.v, &dv},
                             {"w", &in.w, &dw}, {"beta", &in.beta, &db}};
    if (gate) args.push_back({"g", &in.g, &dg});
    const double h = 1e-5;
    for (const Arg &a : args) {
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < a.x->size(); ++i) {
            double x0 = (*a.x)[i];
            (*a.x)[i] = x0 + h;
            double lp = loss(s, in, R);
            (*a.x)[i] = x0 - h;
            double lm = loss(s, in, R);
            (*a.x)[i] = x0;
            double fd = (lp - lm) / (2 * h);
            max_err = std::max(max_err, std::fabs(fd - (*a.grad)[i]));
            max_ref = std::max(max_ref, std::fabs(fd));
        }
        EXPECT_GT(max_ref, 1e-3) << a.name << ": finite-difference gradient is ~0";
        EXPECT_LT(max_err, 1e-7 * std::max(1.0, max_ref)) << a.name << ": max |fd - analytic| "
                                                          << max_err << " (max |fd| " << max_ref
                                                          << ")";
    }
}

TEST(PathRef, FiniteDiffDenseMhaGate) {
    PathRefShape s;
    s.B = 2, s.T = 7, s.Hq = 2, s.H = 2, s.K = 4, s.V = 3;
    check_fd(s, true, 11);
}

TEST(PathRef, FiniteDiffDenseGqaNoGate) {
    PathRefShape s;
    s.B = 1, s.T = 9, s.Hq = 4, s.H = 2, s.K = 5, s.V = 5, s.scale = 0.7;
    check_fd(s, false, 12);
}

TEST(PathRef, FiniteDiffVarlenGqaGate) {
    PathRefShape s;
    s.B = 1, s.T = 13, s.Hq = 2, s.H = 1, s.K = 4, s.V = 6;
    s.cu_seqlens = {0, 1, 6, 13};
    check_fd(s, true, 13);
}

TEST(PathRef, FiniteDiffVarlenMhaNoGate) {
    PathRefShape s;
    s.B = 1, s.T = 10, s.Hq = 2, s.H = 2, s.K = 3, s.V = 2;
    s.cu_seqlens = {0, 4, 10};
    check_fd(s, false, 14);
}

// beta = 0 everywhere makes every H_t the identity: PaTH is then plain causal softmax attention.
TEST(PathRef, IdentityHouseholdersGiveSoftmaxAttention) {
    PathRefShape s;
    s.B = 1, s.T = 6, s.Hq = 1, s.H = 1, s.K = 4, s.V = 4;
    Inputs in = random_inputs(s, false, 21);
    for (auto &b : in.beta) b = 0;
    std::vector<double> o(s.T * s.V), lse(s.T);
    fattn::ref::path_ref_fwd(s, in.q.data(), in.k.data(), in.v.data(), in.w.data(), in.beta.data(),
                             nullptr, o.data(), lse.data());
    const double sc = 0.5;
    for (int64_t i = 0; i < s.T; ++i) {
        std::vector<double> l(i + 1);
        double m = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
            double d = 0;
            for (int64_t c = 0; c < s.K; ++c) d += in.q[i * s.K + c] * in.k[j * s.K + c];
            l[j] = sc * d;
            m = std::max(m, l[j]);
        }
        for (int64_t j = 0; j <= i; ++j) z += std::exp(l[j] - m);
        EXPECT_NEAR(lse[i], m + std::log(z), 1e-12);
        for (int64_t c = 0; c < s.V; ++c) {
            double acc = 0;
            for (int64_t j = 0; j <= i; ++j) acc += std::exp(l[j] - m) / z * in.v[j * s.V + c];
            EXPECT_NEAR(o[i * s.V + c], acc, 1e-12);
        }
    }
}

}  // namespace
