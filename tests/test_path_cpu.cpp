// test_path_cpu.cpp — the blocked CPU PaTH backend (through the C API) against the float64 oracle.
//
// Cases (a declarative table): dense and varlen, sequences shorter than a chunk / a segment,
// exactly 512, 513, 1025, multi-segment; gate on/off; MHA and GQA; K = 16/32/64/128, V != K;
// f32/f16/bf16 q/k/v; PACKED and RECTANGULAR history. The oracle sees the same rounded inputs.
// Error metric per output: rms(out - ref) / rms(ref) (FLA's err_ratio), and every reference
// gradient is asserted non-zero. f32 bar 3e-5 (observed 1e-7..4e-6); f16/bf16 use FLA's
// per-gradient ratios (PATH.md §7.2). Also: determinism (1 vs 2 threads, bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "cpu/ref/path_ref.h"
#include "fattn/fattn.h"
#include "support/path_case.h"
#include "test/path_data.h"

namespace {

using Case = fattn_test::PathCase;

using Buf = fattn_test::TypedBuf;

struct Problem {
    Case c;
    Buf q, k, v, w, beta, g, o, lse, dout, dq, dk, dv, dw, dbeta, dg;
    fattn::ref::PathRefShape shape() const {
        fattn::ref::PathRefShape s;
        s.B = c.B, s.T = c.T, s.Hq = c.Hq, s.H = c.H, s.K = c.K, s.V = c.V;
        s.cu_seqlens = c.cu;
        return s;
    }
};

void make_inputs(Problem &pb, uint32_t seed, double w_norm_spread = 0.0) {
    const Case &c = pb.c;
    const double beta_hi = c.beta_lo > 1.5 ? 2.0 : 1.95;
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::uniform_real_distribution<double> ub(c.beta_lo, beta_hi), ug(-0.02, 0.0), uw(1 - w_norm_spread, 1 + w_norm_spread);
    const int64_t R = c.B * c.T;
    pb.q.alloc(c.dt, R * c.Hq * c.K);
    pb.k.alloc(c.dt, R * c.H * c.K);
    pb.v.alloc(c.dt, R * c.H * c.V);
    pb.w.alloc(FATTN_F32, R * c.H * c.K);
    pb.beta.alloc(FATTN_F32, R * c.H);
    for (size_t i = 0; i < pb.q.val.size(); ++i) pb.q.set(int64_t(i), nd(rng));
    for (size_t i = 0; i < pb.k.val.size(); ++i) pb.k.set(int64_t(i), nd(rng));
    for (size_t i = 0; i < pb.v.val.size(); ++i) pb.v.set(int64_t(i), nd(rng));
    for (int64_t r = 0; r < R * c.H; ++r) {
        const std::vector<double> wr = fattn_test::unit_vector(c.K, rng, nd);
        const double target = uw(rng);
        for (int64_t d = 0; d < c.K; ++d) pb.w.set(r * c.K + d, wr[size_t(d)] * target);
        pb.beta.set(r, ub(rng));
    }
    if (c.gate) {
        pb.g.alloc(FATTN_F32, R * c.Hq);
        for (size_t i = 0; i < pb.g.val.size(); ++i) pb.g.set(int64_t(i), ug(rng));
    }
    pb.dout.alloc(c.dt, R * c.Hq * c.V);
    for (size_t i = 0; i < pb.dout.val.size(); ++i) pb.dout.set(int64_t(i), nd(rng));
}

fattn_path_params params_of(const Case &c) {
    fattn_path_params p = fattn_path_params_default();
    if (!c.cu.empty()) p.cu_seqlens = c.cu.data(), p.num_seqs = int64_t(c.cu.size()) - 1;
    p.history = c.hist;
    return p;
}

// Runs fwd + bwd on a CPU context with nthreads; outputs land in pb's buffers.
void run(Problem &pb, int nthreads, fattn_path_check check = FATTN_PATH_CHECK_STRICT) {
    const Case &c = pb.c;
    const int64_t R = c.B * c.T;
    pb.o.alloc(c.dt, R * c.Hq * c.V);
    pb.lse.alloc(FATTN_F32, c.B * c.Hq * c.T);
    pb.dq.alloc(c.dt, R * c.Hq * c.K);
    pb.dk.alloc(c.dt, R * c.H * c.K);
    pb.dv.alloc(c.dt, R * c.H * c.V);
    pb.dw.alloc(FATTN_F32, R * c.H * c.K);
    pb.dbeta.alloc(FATTN_F32, R * c.H);
    if (c.gate) pb.dg.alloc(FATTN_F32, R * c.Hq);
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(nthreads, &ctx), FATTN_OK);
    fattn_path_params p = params_of(c);
    p.check = check;
    fattn_tensor q = pb.q.view(c.B, c.T, c.Hq, c.K), k = pb.k.view(c.B, c.T, c.H, c.K),
                 v = pb.v.view(c.B, c.T, c.H, c.V), w = pb.w.view(c.B, c.T, c.H, c.K),
                 beta = pb.beta.view(c.B, c.T, c.H, 1),
                 g = c.gate ? pb.g.view(c.B, c.T, c.Hq, 1) : fattn_tensor_none(),
                 o = pb.o.view(c.B, c.T, c.Hq, c.V), lse = pb.lse.view(c.B, c.Hq, c.T, 1),
                 dout = pb.dout.view(c.B, c.T, c.Hq, c.V), dq = pb.dq.view(c.B, c.T, c.Hq, c.K),
                 dk = pb.dk.view(c.B, c.T, c.H, c.K), dv = pb.dv.view(c.B, c.T, c.H, c.V),
                 dw = pb.dw.view(c.B, c.T, c.H, c.K), dbeta = pb.dbeta.view(c.B, c.T, c.H, 1),
                 dg = c.gate ? pb.dg.view(c.B, c.T, c.Hq, 1) : fattn_tensor_none();
    // Caller-provided workspaces, NaN-poisoned: a cell read before it is written shows up.
    fattn_path_workspace_info wf, wb;
    ASSERT_EQ(fattn_path_workspace_size(ctx, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_FWD, &wf), FATTN_OK)
        << fattn_ctx_last_error(ctx);
    ASSERT_EQ(fattn_path_workspace_size(ctx, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_BWD, &wb), FATTN_OK);
    std::vector<uint8_t> ws(size_t(std::max(wf.total_bytes, wb.total_bytes)), 0xFF);
    ASSERT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, ws.data(), wf.total_bytes),
              FATTN_OK)
        << fattn_ctx_last_error(ctx);
    std::fill(ws.begin(), ws.end(), 0xFF);
    ASSERT_EQ(fattn_path_bwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, &dout, &dq, &dk, &dv, &dw,
                             &dbeta, &dg, ws.data(), wb.total_bytes),
              FATTN_OK)
        << fattn_ctx_last_error(ctx);
    fattn_ctx_free(ctx);
    for (Buf *b : {&pb.o, &pb.lse, &pb.dq, &pb.dk, &pb.dv, &pb.dw, &pb.dbeta}) b->read();
    if (c.gate) pb.dg.read();
}

double err_ratio(const std::vector<double> &out, const std::vector<double> &ref, double *rms_ref) {
    double se = 0, sr = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) return INFINITY;
        se += (out[i] - ref[i]) * (out[i] - ref[i]);
        sr += ref[i] * ref[i];
    }
    *rms_ref = std::sqrt(sr / double(out.size()));
    return std::sqrt(se / double(out.size())) / (*rms_ref + 1e-12);
}

struct Tol {
    double o, lse, dq, dk, dv, dw, dbeta, dg;
};

Tol tol_for(fattn_dtype dt) {
    if (dt == FATTN_F32) return {3e-5, 3e-5, 3e-5, 3e-5, 3e-5, 3e-5, 3e-5, 3e-5};
    if (dt == FATTN_BF16) return {0.005, 0.005, 0.008, 0.008, 0.008, 0.015, 0.02, 0.02};  // FLA dense bf16
    return {0.005, 0.005, 0.005, 0.005, 0.005, 0.005, 0.005, 0.005};                     // FLA varlen f16
}

void check_against_oracle(Problem &pb, const Tol &tol) {
    const Case &c = pb.c;
    auto s = pb.shape();
    const int64_t R = c.B * c.T;
    std::vector<double> o(size_t(R * c.Hq * c.V)), lse(size_t(c.B * c.Hq * c.T)), dq(pb.q.val.size()),
        dk(pb.k.val.size()), dv(pb.v.val.size()), dw(pb.w.val.size()), db(pb.beta.val.size()),
        dg(size_t(R * c.Hq));
    const double *g = c.gate ? pb.g.val.data() : nullptr;
    fattn::ref::path_ref_fwd(s, pb.q.val.data(), pb.k.val.data(), pb.v.val.data(), pb.w.val.data(),
                             pb.beta.val.data(), g, o.data(), lse.data());
    fattn::ref::path_ref_bwd(s, pb.q.val.data(), pb.k.val.data(), pb.v.val.data(), pb.w.val.data(),
                             pb.beta.val.data(), g, pb.dout.val.data(), dq.data(), dk.data(), dv.data(),
                             dw.data(), db.data(), dg.data());
    struct Cmp {
        const char *name;
        const std::vector<double> &out, &ref;
        double tol;
    };
    std::vector<Cmp> cmps = {{"o", pb.o.val, o, tol.o},       {"lse", pb.lse.val, lse, tol.lse},
                             {"dq", pb.dq.val, dq, tol.dq},   {"dk", pb.dk.val, dk, tol.dk},
                             {"dv", pb.dv.val, dv, tol.dv},   {"dw", pb.dw.val, dw, tol.dw},
                             {"dbeta", pb.dbeta.val, db, tol.dbeta}};
    if (c.gate) cmps.push_back({"dg", pb.dg.val, dg, tol.dg});
    for (const Cmp &m : cmps) {
        double rms_ref = 0;
        const double e = err_ratio(m.out, m.ref, &rms_ref);
        EXPECT_GT(rms_ref, 1e-6) << c.name << " " << m.name << ": reference is ~0";
        EXPECT_LT(e, m.tol) << c.name << " " << m.name << ": err_ratio " << e;
        if (::testing::Test::HasFailure() || std::getenv("FATTN_PATH_VERBOSE"))
            printf("  %-28s %-6s err_ratio %.3e (rms ref %.3e)\n", c.name, m.name, e, rms_ref);
    }
}

const std::vector<Case> &cases() {
    static const std::vector<Case> t = {
        // name                     B  T     Hq H  K    V    cu_seqlens                       gate  dtype      history
        {"dense_t100_gqa_k16_v32", 2, 100, 2, 1, 16, 32, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED},
        {"varlen_empty_and_T1_seqs", 1, 70, 2, 1, 16, 16, {0, 0, 1, 1, 70}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED},
        {"dense_t512_mha_k64", 1, 512, 2, 2, 64, 64, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED},
        {"dense_t513_gqa_k32_v16", 1, 513, 2, 1, 32, 16, {}, FATTN_F32, false, FATTN_PATH_HISTORY_PACKED},
        {"dense_t1025_k64", 1, 1025, 1, 1, 64, 64, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED, 1.95},
        {"dense_t1600_k16_4seg", 1, 1600, 1, 1, 16, 16, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED, 1.95},
        {"varlen_mixed_gqa_k32", 1, 1600, 2, 1, 32, 32, {0, 15, 333, 900, 1600}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED, 1.95},
        {"dense_t1100_rect_k64", 1, 1100, 2, 1, 64, 64, {}, FATTN_F32, false, FATTN_PATH_HISTORY_RECTANGULAR, 1.95},
        {"dense_t700_k128_bf16", 1, 700, 2, 2, 128, 128, {}, FATTN_BF16, true, FATTN_PATH_HISTORY_PACKED},
        {"varlen_gqa_k64_f16", 1, 1200, 4, 2, 64, 64, {0, 100, 613, 1200}, FATTN_F16, false, FATTN_PATH_HISTORY_PACKED},
        {"dense_t1030_k64_v128_bf16", 1, 1030, 2, 1, 64, 128, {}, FATTN_BF16, true, FATTN_PATH_HISTORY_PACKED, 1.95},
        // head dims of any width (rows of K or V floats; the remainder of the 8-lane dot products)
        {"dense_t600_k7_v5_gqa", 1, 600, 2, 1, 7, 5, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED, 1.95},
        {"varlen_k200_v72_bf16", 1, 700, 1, 1, 200, 72, {0, 90, 700}, FATTN_BF16, false, FATTN_PATH_HISTORY_PACKED},
    };
    return t;
}

class PathCpuVsOracle : public ::testing::TestWithParam<size_t> {};

TEST_P(PathCpuVsOracle, AllOutputs) {
    Problem pb;
    pb.c = cases()[GetParam()];
    make_inputs(pb, 1000 + uint32_t(GetParam()));
    run(pb, 2);
    check_against_oracle(pb, tol_for(pb.c.dt));
}

INSTANTIATE_TEST_SUITE_P(Table, PathCpuVsOracle, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t> &i) { return std::string(cases()[i.param].name); });

// Results are bitwise independent of the thread count.
TEST(PathCpu, DeterministicAcrossThreadCounts) {
    Case c{"det", 1, 1100, 4, 2, 32, 32, {0, 300, 1100}, FATTN_BF16, true, FATTN_PATH_HISTORY_PACKED};
    Problem a, b;
    a.c = b.c = c;
    make_inputs(a, 77);
    make_inputs(b, 77);
    run(a, 1);
    run(b, 3);
    for (auto [x, y, n] : {std::tuple{&a.o, &b.o, "o"}, {&a.lse, &b.lse, "lse"}, {&a.dq, &b.dq, "dq"},
                           {&a.dk, &b.dk, "dk"}, {&a.dv, &b.dv, "dv"}, {&a.dw, &b.dw, "dw"},
                           {&a.dbeta, &b.dbeta, "dbeta"}, {&a.dg, &b.dg, "dg"}})
        EXPECT_EQ(x->bytes, y->bytes) << n << " differs between 1 and 3 threads";
}

// CHECK_NONE computes the definition as is for w off the unit sphere (still matches the oracle);
// STRICT rejects such inputs, and beta outside [0, 2], naming the argument.
TEST(PathCpu, WBetaCheckModes) {
    Case c{"unnormalized_w", 1, 200, 1, 1, 16, 16, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED};
    Problem pb;
    pb.c = c;
    make_inputs(pb, 5, /*w_norm_spread=*/0.2);
    run(pb, 2, FATTN_PATH_CHECK_NONE);
    check_against_oracle(pb, tol_for(FATTN_F32));

    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    fattn_path_params p = fattn_path_params_default();
    fattn_tensor q = pb.q.view(1, 200, 1, 16), k = pb.k.view(1, 200, 1, 16), v = pb.v.view(1, 200, 1, 16),
                 w = pb.w.view(1, 200, 1, 16), beta = pb.beta.view(1, 200, 1, 1),
                 g = pb.g.view(1, 200, 1, 1), o = pb.o.view(1, 200, 1, 16), lse = pb.lse.view(1, 1, 200, 1);
    EXPECT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, nullptr, 0), FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(std::string(fattn_ctx_last_error(ctx)).rfind("w: ", 0), 0u) << fattn_ctx_last_error(ctx);
    // renormalize w, then break one beta
    std::vector<float> wn(200 * 16);
    for (int t = 0; t < 200; ++t) {
        double n = 0;
        for (int d = 0; d < 16; ++d) n += pb.w.val[size_t(t * 16 + d)] * pb.w.val[size_t(t * 16 + d)];
        for (int d = 0; d < 16; ++d) wn[size_t(t * 16 + d)] = float(pb.w.val[size_t(t * 16 + d)] / std::sqrt(n));
    }
    w = fattn_tensor_contiguous(wn.data(), FATTN_F32, 1, 200, 1, 16);
    EXPECT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, nullptr, 0), FATTN_OK)
        << fattn_ctx_last_error(ctx);
    reinterpret_cast<float *>(pb.beta.bytes.data())[17] = 2.5f;
    EXPECT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, nullptr, 0), FATTN_ERR_BAD_VALUE);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("beta: "), std::string::npos);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("t 17"), std::string::npos);
    p.check = FATTN_PATH_CHECK_NONE;
    EXPECT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, nullptr, 0), FATTN_OK);
    fattn_ctx_free(ctx);
}

// Non-contiguous views (q, k, v interleaved in one fused buffer with padding, beta/g/w strided, o
// and the gradients strided too) give bitwise the results of contiguous views: strides are
// only addresses, never a copy or a different arithmetic order.
TEST(PathCpu, StridedViewsMatchContiguous) {
    Case c{"strided", 2, 150, 2, 1, 16, 16, {}, FATTN_F32, true, FATTN_PATH_HISTORY_PACKED};
    Problem a;
    a.c = c;
    make_inputs(a, 31);
    run(a, 2);
    // fused row per (b, t): [q (Hq*K) | k (H*K) | v (H*V) | pad 3], all f32
    const int64_t B = c.B, T = c.T, HQ = c.Hq, H = c.H, K = c.K, V = c.V;
    const int64_t row = HQ * K + H * K + H * V + 3;
    std::vector<float> fused(size_t(B * T * row)), wst(size_t(B * T * H * (K + 5))), bst(size_t(B * T * H * 2)),
        gst(size_t(B * T * HQ * 3));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            const int64_t r = b * T + t;
            for (int64_t i = 0; i < HQ * K; ++i) fused[size_t(r * row + i)] = float(a.q.val[size_t(r * HQ * K + i)]);
            for (int64_t i = 0; i < H * K; ++i) fused[size_t(r * row + HQ * K + i)] = float(a.k.val[size_t(r * H * K + i)]);
            for (int64_t i = 0; i < H * V; ++i)
                fused[size_t(r * row + HQ * K + H * K + i)] = float(a.v.val[size_t(r * H * V + i)]);
            for (int64_t h = 0; h < H; ++h) {
                for (int64_t d = 0; d < K; ++d) wst[size_t((r * H + h) * (K + 5) + d)] = float(a.w.val[size_t((r * H + h) * K + d)]);
                bst[size_t((r * H + h) * 2)] = float(a.beta.val[size_t(r * H + h)]);
            }
            for (int64_t h = 0; h < HQ; ++h) gst[size_t((r * HQ + h) * 3)] = float(a.g.val[size_t(r * HQ + h)]);
        }
    float *f = fused.data();
    fattn_tensor q = fattn_tensor_4d(f, FATTN_F32, B, T, HQ, K, T * row, row, K, 1);
    fattn_tensor k = fattn_tensor_4d(f + HQ * K, FATTN_F32, B, T, H, K, T * row, row, K, 1);
    fattn_tensor v = fattn_tensor_4d(f + HQ * K + H * K, FATTN_F32, B, T, H, V, T * row, row, V, 1);
    fattn_tensor w = fattn_tensor_4d(wst.data(), FATTN_F32, B, T, H, K, T * H * (K + 5), H * (K + 5), K + 5, 1);
    fattn_tensor beta = fattn_tensor_4d(bst.data(), FATTN_F32, B, T, H, 1, T * H * 2, H * 2, 2, 1);
    fattn_tensor g = fattn_tensor_4d(gst.data(), FATTN_F32, B, T, HQ, 1, T * HQ * 3, HQ * 3, 3, 1);
    // strided outputs: every row padded by one element
    std::vector<float> o(size_t(B * T * HQ * (V + 1))), lse(size_t(B * HQ * (T + 2))), dq(size_t(B * T * HQ * (K + 1))),
        dk(size_t(B * T * H * (K + 1))), dv(size_t(B * T * H * (V + 1))), dw(size_t(B * T * H * (K + 1))),
        db(size_t(B * T * H * 2)), dg(size_t(B * T * HQ * 2)), dout(size_t(B * T * HQ * (V + 1)));
    for (int64_t r = 0; r < B * T * HQ; ++r)
        for (int64_t d = 0; d < V; ++d) dout[size_t(r * (V + 1) + d)] = float(a.dout.val[size_t(r * V + d)]);
    auto sv = [](std::vector<float> &x, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t pad) {
        return fattn_tensor_4d(x.data(), FATTN_F32, n0, n1, n2, n3, n1 * n2 * (n3 + pad), n2 * (n3 + pad), n3 + pad, 1);
    };
    fattn_tensor to = sv(o, B, T, HQ, V, 1), tdo = sv(dout, B, T, HQ, V, 1), tdq = sv(dq, B, T, HQ, K, 1),
                 tdk = sv(dk, B, T, H, K, 1), tdv = sv(dv, B, T, H, V, 1), tdw = sv(dw, B, T, H, K, 1),
                 tdb = sv(db, B, T, H, 1, 1), tdg = sv(dg, B, T, HQ, 1, 1);
    fattn_tensor tl = fattn_tensor_4d(lse.data(), FATTN_F32, B, HQ, T, 1, HQ * (T + 2), T + 2, 1, 1);
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(2, &ctx), FATTN_OK);
    fattn_path_params p = fattn_path_params_default();
    ASSERT_EQ(fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &to, &tl, nullptr, 0), FATTN_OK) << fattn_ctx_last_error(ctx);
    ASSERT_EQ(fattn_path_bwd(ctx, &p, &q, &k, &v, &w, &beta, &g, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb, &tdg,
                             nullptr, 0),
              FATTN_OK)
        << fattn_ctx_last_error(ctx);
    fattn_ctx_free(ctx);
    auto same = [](const Buf &ref, const std::vector<float> &x, int64_t rows, int64_t n, int64_t pitch, const char *name) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t d = 0; d < n; ++d)
                ASSERT_EQ(float(ref.val[size_t(r * n + d)]), x[size_t(r * pitch + d)]) << name << " row " << r << " d " << d;
    };
    same(a.o, o, B * T * HQ, V, V + 1, "o");
    same(a.lse, lse, B * HQ, T, T + 2, "lse");
    same(a.dq, dq, B * T * HQ, K, K + 1, "dq");
    same(a.dk, dk, B * T * H, K, K + 1, "dk");
    same(a.dv, dv, B * T * H, V, V + 1, "dv");
    same(a.dw, dw, B * T * H, K, K + 1, "dw");
    same(a.dbeta, db, B * T * H, 1, 2, "dbeta");
    same(a.dg, dg, B * T * HQ, 1, 2, "dg");
}

}  // namespace
