// test_dbias.cpp — the bias gradient on the CPU (fattn_attn_bwd_ex's dbias): against the float64
// oracle (src/cpu/ref, reduced over the broadcast dims by ref::reduce_dbias) for every broadcast
// pattern ([B,Hq,Sq,Skv], [1,Hq,Sq,Skv], [1,1,Sq,Skv], [B,1,1,Skv], [B,Hq,1,Skv]) under GQA, MQA and
// plain heads, both algorithms, causal / window masks, -inf bias entries and whole -inf tiles,
// a finfo.min-like padding row (the backward's stats forward), varlen; exact zeros where no
// contribution reaches an entry; bitwise the same at 1, 2, 3 and 7 threads; dq/dk/dv bitwise
// the same with and without dbias; the validation rules naming dbias; the memory model.
// Run: fattn-unit --gtest_filter='Dbias*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/ref/attn_ref.h"
#include "fattn/fattn.h"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
    std::string name;
    int64_t B = 2, Sq = 130, Skv = 150, Hq = 4, Hkv = 2, D = 32, Dv = 16;
    bool sum_b = false, sum_h = false, sum_i = false;  // bias dims broadcast (stride 0 / extent 1)
    bool b_extent1 = true;   // a broadcast B/H dim given as extent 1 (else extent B/Hq, stride 0)
    fattn_algo algo = FATTN_ALGO_FUSED;
    fattn_causal causal = FATTN_CAUSAL_NONE;
    int64_t wl = -1, wr = -1;
    bool neg_inf = true;     // scattered -inf entries and a -inf block covering whole tiles
    bool pad_row = false;    // one bias row at -1e30 everywhere (a large ceiling)
    bool varlen = false;     // B = 1, three packed sequences
};

struct Result {
    fattn_status st = FATTN_OK;
    std::vector<float> o, lse, dq, dk, dv, dbias;
};

struct Problem {
    Case c;
    std::vector<float> q, k, v, dout, bias;  // bias stored in its reduced (broadcast) shape
    std::vector<int32_t> cu_q, cu_kv;
    int64_t nb = 1, nh = 1, ni = 1;           // reduced bias dims
};

Problem make(const Case &c) {
    Problem pr;
    pr.c = c;
    if (c.varlen) {
        pr.c.B = 1;
        pr.cu_q = {0, 40, 41, int32_t(c.Sq)};
        pr.cu_kv = {0, 70, 100, int32_t(c.Skv)};
    }
    const Case &g = pr.c;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](std::vector<float> &x, int64_t n, float a) {
        x.resize(size_t(n));
        for (auto &e : x) e = a * u(rng);
    };
    fill(pr.q, g.B * g.Sq * g.Hq * g.D, 1.5f);
    fill(pr.k, g.B * g.Skv * g.Hkv * g.D, 1.5f);
    fill(pr.v, g.B * g.Skv * g.Hkv * g.Dv, 1.f);
    fill(pr.dout, g.B * g.Sq * g.Hq * g.Dv, 1.f);
    pr.nb = g.sum_b ? 1 : g.B, pr.nh = g.sum_h ? 1 : g.Hq, pr.ni = g.sum_i ? 1 : g.Sq;
    fill(pr.bias, pr.nb * pr.nh * pr.ni * g.Skv, 2.f);
    if (g.neg_inf) {
        for (int64_t x = 0; x < int64_t(pr.bias.size()); ++x)
            if (x % 7 == 3) pr.bias[size_t(x)] = -kInf;
        // keys [64, 128) of rows [0, 64) of every slice: a whole -inf tile (skipped)
        if (!g.sum_i)
            for (int64_t s = 0; s < pr.nb * pr.nh; ++s)
                for (int64_t i = 0; i < 64 && i < g.Sq; ++i)
                    for (int64_t j = 64; j < 128 && j < g.Skv; ++j) pr.bias[size_t((s * pr.ni + i) * g.Skv + j)] = -kInf;
    }
    if (g.pad_row && !g.sum_i)
        for (int64_t j = 0; j < g.Skv; ++j) pr.bias[size_t(5 * g.Skv + j)] = -1e30f;
    return pr;
}

// The bias view: reduced storage, broadcast dims as extent 1 or (b_extent1 = false) as the full
// extent with stride 0; the query dim always full extent with stride 0 when broadcast.
fattn_tensor bias_view(Problem &pr) {
    const Case &g = pr.c;
    const int64_t s3 = 1, s2 = g.sum_i ? 0 : g.Skv, s1 = g.sum_h ? 0 : pr.ni * g.Skv;
    const int64_t s0 = g.sum_b ? 0 : pr.nh * pr.ni * g.Skv;
    const int64_t n0 = g.sum_b && g.b_extent1 ? 1 : g.B, n1 = g.sum_h && g.b_extent1 ? 1 : g.Hq;
    return fattn_tensor_4d(pr.bias.data(), FATTN_F32, n0, n1, g.Sq, g.Skv, s0, s1, s2, s3);
}

fattn_attn_params params(Problem &pr) {
    const Case &g = pr.c;
    fattn_attn_params p = fattn_attn_params_default();
    p.algo = g.algo;
    p.causal = g.causal;
    p.window_left = g.wl, p.window_right = g.wr;
    p.bias = bias_view(pr);
    if (g.varlen) p.cu_seqlens_q = pr.cu_q.data(), p.cu_seqlens_kv = pr.cu_kv.data(), p.num_seqs = 3;
    return p;
}

Result run(Problem &pr, int nthreads, bool want_dbias, bool use_plain_bwd = false) {
    const Case &g = pr.c;
    Result r;
    fattn_ctx_t *ctx = nullptr;
    EXPECT_EQ(fattn_ctx_init_cpu(nthreads, &ctx), FATTN_OK);
    fattn_attn_params p = params(pr);
    auto t4 = [](float *d, int64_t b, int64_t s, int64_t h, int64_t x) {
        return fattn_tensor_contiguous(d, FATTN_F32, b, s, h, x);
    };
    r.o.assign(size_t(g.B * g.Sq * g.Hq * g.Dv), 0.f);
    r.lse.assign(size_t(g.B * g.Hq * g.Sq), 0.f);
    r.dq.assign(pr.q.size(), 0.f), r.dk.assign(pr.k.size(), 0.f), r.dv.assign(pr.v.size(), 0.f);
    r.dbias.assign(pr.bias.size(), 12345.f);  // poison: every element must be written
    fattn_tensor tq = t4(pr.q.data(), g.B, g.Sq, g.Hq, g.D), tk = t4(pr.k.data(), g.B, g.Skv, g.Hkv, g.D);
    fattn_tensor tv = t4(pr.v.data(), g.B, g.Skv, g.Hkv, g.Dv), to = t4(r.o.data(), g.B, g.Sq, g.Hq, g.Dv);
    fattn_tensor tdo = t4(pr.dout.data(), g.B, g.Sq, g.Hq, g.Dv), tdq = t4(r.dq.data(), g.B, g.Sq, g.Hq, g.D);
    fattn_tensor tdk = t4(r.dk.data(), g.B, g.Skv, g.Hkv, g.D), tdv = t4(r.dv.data(), g.B, g.Skv, g.Hkv, g.Dv);
    fattn_tensor tl = fattn_tensor_contiguous(r.lse.data(), FATTN_F32, g.B, g.Hq, g.Sq, 1);
    fattn_tensor tdb = fattn_tensor_contiguous(r.dbias.data(), FATTN_F32, pr.nb, pr.nh, pr.ni, g.Skv);
    size_t saved_bytes = 0;
    EXPECT_EQ(fattn_attn_saved_size(ctx, &p, &tq, &tk, &tv, &saved_bytes), FATTN_OK);
    std::vector<float> saved(saved_bytes / 4 + 1);
    r.st = fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, saved.data(), nullptr, 0);
    EXPECT_EQ(r.st, FATTN_OK) << fattn_ctx_last_error(ctx);
    if (use_plain_bwd)
        r.st = fattn_attn_bwd(ctx, &p, &tq, &tk, &tv, &to, &tl, saved.data(), &tdo, &tdq, &tdk, &tdv, nullptr, 0);
    else
        r.st = fattn_attn_bwd_ex(ctx, &p, &tq, &tk, &tv, &to, &tl, saved.data(), &tdo, &tdq, &tdk, &tdv,
                                 want_dbias ? &tdb : nullptr, nullptr, 0);
    EXPECT_EQ(r.st, FATTN_OK) << fattn_ctx_last_error(ctx);
    fattn_ctx_free(ctx);
    return r;
}

// Reference dbias (reduced) from the float64 oracle.
std::vector<double> ref_dbias(Problem &pr) {
    const Case &g = pr.c;
    fattn::ref::Problem rp;
    rp.B = g.B, rp.Sq = g.Sq, rp.Skv = g.Skv, rp.Hq = g.Hq, rp.Hkv = g.Hkv, rp.D = g.D, rp.Dv = g.Dv;
    rp.scale = double(float(1.0 / std::sqrt(double(g.D))));
    rp.mask.causal = int(g.causal);
    rp.mask.window_left = g.wl, rp.mask.window_right = g.wr;
    rp.mask.window_bottom_right = false;
    if (g.varlen) rp.cu_q.assign(pr.cu_q.begin(), pr.cu_q.end()), rp.cu_kv.assign(pr.cu_kv.begin(), pr.cu_kv.end());
    rp.has_bias = true;
    fattn::ref::Tensors t;
    t.q.assign(pr.q.begin(), pr.q.end()), t.k.assign(pr.k.begin(), pr.k.end());
    t.v.assign(pr.v.begin(), pr.v.end()), t.dout.assign(pr.dout.begin(), pr.dout.end());
    t.bias.resize(size_t(g.B * g.Hq * g.Sq * g.Skv));
    for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.Hq; ++h)
            for (int64_t i = 0; i < g.Sq; ++i)
                for (int64_t j = 0; j < g.Skv; ++j)
                    t.bias[size_t(((b * g.Hq + h) * g.Sq + i) * g.Skv + j)] = double(
                        pr.bias[size_t((((g.sum_b ? 0 : b) * pr.nh + (g.sum_h ? 0 : h)) * pr.ni + (g.sum_i ? 0 : i)) * g.Skv + j)]);
    fattn::ref::Outputs o;
    fattn::ref::attn_bwd(rp, t, &o, /*want_dbias=*/true);
    std::vector<double> red;
    fattn::ref::reduce_dbias(rp, o.dbias, g.sum_b, g.sum_h, g.sum_i, &red);
    return red;
}

// 1 where some row that sees any key sees this entry's key through a finite bias (the entries
// a gradient can reach), in the reduced layout; every other entry must come back exactly 0.
std::vector<char> reached(Problem &pr) {
    const Case &g = pr.c;
    fattn::ref::Mask m;
    m.causal = int(g.causal), m.window_left = g.wl, m.window_right = g.wr;
    std::vector<char> out(pr.bias.size(), 0);
    const int64_t nseq = g.varlen ? 3 : g.B;
    for (int64_t s = 0; s < nseq; ++s) {
        const int64_t b = g.varlen ? 0 : s, q0 = g.varlen ? pr.cu_q[size_t(s)] : 0;
        const int64_t k0 = g.varlen ? pr.cu_kv[size_t(s)] : 0;
        const int64_t lq = g.varlen ? pr.cu_q[size_t(s) + 1] - q0 : g.Sq;
        const int64_t lk = g.varlen ? pr.cu_kv[size_t(s) + 1] - k0 : g.Skv;
        for (int64_t h = 0; h < g.Hq; ++h)
            for (int64_t i = 0; i < lq; ++i) {
                const int64_t row = (((g.sum_b ? 0 : b) * pr.nh + (g.sum_h ? 0 : h)) * pr.ni + (g.sum_i ? 0 : q0 + i)) * g.Skv;
                for (int64_t j = 0; j < lk; ++j)
                    if (fattn::ref::key_allowed(m, i, j, lq, lk) && pr.bias[size_t(row + k0 + j)] != -kInf)
                        out[size_t(row + k0 + j)] = 1;
            }
    }
    return out;
}

bool bitwise(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void check_vs_ref(const Case &c) {
    SCOPED_TRACE(c.name);
    Problem pr = make(c);
    Result r = run(pr, 2, true);
    ASSERT_EQ(r.st, FATTN_OK);
    std::vector<double> ref = ref_dbias(pr);
    ASSERT_EQ(ref.size(), r.dbias.size());
    double num = 0, den = 0;
    int64_t zeros = 0, bad_zero = 0, nonfinite = 0;
    const std::vector<char> reach = reached(pr);
    for (size_t x = 0; x < ref.size(); ++x) {
        const double d = double(r.dbias[x]) - ref[x];
        if (!std::isfinite(r.dbias[x])) ++nonfinite;
        num += d * d, den += ref[x] * ref[x];
        if (!reach[x]) {  // no contribution reaches it (mask, -inf, another sequence)
            ++zeros;
            EXPECT_EQ(ref[x], 0.0);
            if (r.dbias[x] != 0.0f) ++bad_zero;
        }
    }
    EXPECT_EQ(nonfinite, 0);
    EXPECT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "rms rel error";
    EXPECT_EQ(bad_zero, 0) << "of " << zeros << " entries no gradient reaches";
    if (c.neg_inf || c.causal || c.wl >= 0 || c.varlen) EXPECT_GT(zeros, 0);
}

// The bias patterns: a name (the bias's [B, H, Sq, Skv] extents, 1 where broadcast) and what sets
// them on Case's defaults; each runs with both algorithms.
struct Pattern {
    const char *name;
    void (*set)(Case &);
};

const Pattern kPatterns[] = {
    // per batch, per head: owned by the main loop
    {"BHSS", [](Case &) {}},
    // shared by the batches: second pass
    {"1HSS", [](Case &c) { c.sum_b = true; }},
    // shared by batches and kv heads
    {"11SS", [](Case &c) { c.sum_b = c.sum_h = true; }},
    {"11SS_stride0", [](Case &c) { c.sum_b = c.sum_h = true, c.b_extent1 = false; }},
    // [B, 1, 1, Skv]
    {"B11S", [](Case &c) { c.sum_h = c.sum_i = true; }},
    // per head, broadcast over queries: owned
    {"BH1S", [](Case &c) { c.sum_i = true; }},
    {"11SS_mqa", [](Case &c) { c.Hkv = 1, c.sum_b = c.sum_h = true; }},
    // heads summed inside one task
    {"B1SS_mqa_owned", [](Case &c) { c.Hkv = 1, c.sum_h = true; }},
    {"BHSS_causal_br", [](Case &c) { c.causal = FATTN_CAUSAL_BOTTOM_RIGHT; }},
    {"11SS_causal_br", [](Case &c) { c.causal = FATTN_CAUSAL_BOTTOM_RIGHT, c.sum_b = c.sum_h = true; }},
    {"1HSS_window", [](Case &c) { c.sum_b = true, c.wl = 20, c.wr = 10; }},
    {"BHSS_window_causal_tl", [](Case &c) { c.wl = 20, c.causal = FATTN_CAUSAL_TOP_LEFT; }},
    {"B11S_causal", [](Case &c) { c.sum_h = c.sum_i = true, c.causal = FATTN_CAUSAL_TOP_LEFT; }},
    {"varlen_1HSS", [](Case &c) { c.varlen = true, c.causal = FATTN_CAUSAL_BOTTOM_RIGHT; }},
    {"varlen_11SS", [](Case &c) { c.varlen = c.sum_h = true, c.causal = FATTN_CAUSAL_BOTTOM_RIGHT; }},
    {"varlen_111S", [](Case &c) { c.varlen = c.sum_h = c.sum_i = true, c.causal = FATTN_CAUSAL_BOTTOM_RIGHT; }},
    {"1HSS_padrow", [](Case &c) { c.sum_b = c.pad_row = true; }},
    {"BHSS_padrow", [](Case &c) { c.pad_row = true; }},
    {"11SS_dense_finite", [](Case &c) { c.sum_b = c.sum_h = true, c.neg_inf = false; }},
};

std::vector<Case> cases() {
    std::vector<Case> v;
    for (fattn_algo algo : {FATTN_ALGO_FUSED, FATTN_ALGO_EXACT}) {
        for (const Pattern &p : kPatterns) {
            Case c;
            c.algo = algo;
            c.name = std::string(algo == FATTN_ALGO_EXACT ? "exact_" : "fused_") + p.name;
            p.set(c);
            v.push_back(c);
        }
    }
    return v;
}

}  // namespace

TEST(Dbias, MatchesFloat64OracleEveryBroadcastPattern) {
    for (const Case &c : cases()) check_vs_ref(c);
}

TEST(Dbias, BitwiseAcrossThreadCountsAndOtherOutputsUnchanged) {
    for (const Case &c : cases()) {
        SCOPED_TRACE(c.name);
        Problem pr = make(c);
        const Result base = run(pr, 1, true);
        const Result plain = run(pr, 1, false, /*use_plain_bwd=*/true);
        const Result ex_null = run(pr, 3, false);
        // dbias = NULL (plain call or _ex with NULL): dq, dk, dv bitwise as with dbias
        EXPECT_TRUE(bitwise(base.dq, plain.dq) && bitwise(base.dk, plain.dk) && bitwise(base.dv, plain.dv));
        EXPECT_TRUE(bitwise(base.dq, ex_null.dq) && bitwise(base.dk, ex_null.dk) && bitwise(base.dv, ex_null.dv));
        EXPECT_TRUE(bitwise(plain.dbias, std::vector<float>(plain.dbias.size(), 12345.f)))
            << "dbias written without being requested";
        for (int nt : {2, 3, 7}) {
            const Result r = run(pr, nt, true);
            EXPECT_TRUE(bitwise(base.dbias, r.dbias)) << nt << " threads";
            EXPECT_TRUE(bitwise(base.dq, r.dq) && bitwise(base.dk, r.dk) && bitwise(base.dv, r.dv)) << nt;
        }
    }
}

TEST(Dbias, ValidationNamesDbias) {
    Case c;
    c.B = 2, c.Sq = 16, c.Skv = 24, c.Hq = 2, c.Hkv = 1, c.D = 8, c.Dv = 8, c.sum_b = true;
    Problem pr = make(c);
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    fattn_attn_params p = params(pr);
    auto t4 = [](float *d, int64_t b, int64_t s, int64_t h, int64_t x) {
        return fattn_tensor_contiguous(d, FATTN_F32, b, s, h, x);
    };
    std::vector<float> o(size_t(2 * 16 * 2 * 8)), lse(size_t(2 * 2 * 16)), dq(pr.q.size()), dk(pr.k.size()),
        dv(pr.v.size()), db(size_t(2 * 16 * 24 * 2));
    fattn_tensor tq = t4(pr.q.data(), 2, 16, 2, 8), tk = t4(pr.k.data(), 2, 24, 1, 8), tv = t4(pr.v.data(), 2, 24, 1, 8);
    fattn_tensor to = t4(o.data(), 2, 16, 2, 8), tdo = t4(pr.dout.data(), 2, 16, 2, 8), tdq = t4(dq.data(), 2, 16, 2, 8);
    fattn_tensor tdk = t4(dk.data(), 2, 24, 1, 8), tdv = t4(dv.data(), 2, 24, 1, 8);
    fattn_tensor tl = fattn_tensor_contiguous(lse.data(), FATTN_F32, 2, 2, 16, 1);
    ASSERT_EQ(fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0), FATTN_OK);
    auto bwd = [&](const fattn_tensor &tdb) {
        return fattn_attn_bwd_ex(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk, &tdv, &tdb, nullptr, 0);
    };
    auto msg = [&] { return std::string(fattn_ctx_last_error(ctx)); };
    // good: [1, Hq, Sq, Skv]
    EXPECT_EQ(bwd(fattn_tensor_contiguous(db.data(), FATTN_F32, 1, 2, 16, 24)), FATTN_OK) << msg();
    // the batch is broadcast: ne[0] must be 1
    EXPECT_EQ(bwd(fattn_tensor_contiguous(db.data(), FATTN_F32, 2, 2, 16, 24)), FATTN_ERR_SHAPE_MISMATCH);
    EXPECT_NE(msg().find("dbias: ne[0] (batch) is 2, must be 1"), std::string::npos) << msg();
    EXPECT_EQ(bwd(fattn_tensor_contiguous(db.data(), FATTN_F32, 1, 2, 16, 23)), FATTN_ERR_SHAPE_MISMATCH);
    EXPECT_NE(msg().find("dbias: ne[3]"), std::string::npos) << msg();
    EXPECT_EQ(bwd(fattn_tensor_contiguous(db.data(), FATTN_F16, 1, 2, 16, 24)), FATTN_ERR_DTYPE_MISMATCH);
    EXPECT_NE(msg().find("dbias: dtype is f16, must be f32"), std::string::npos) << msg();
    EXPECT_EQ(bwd(fattn_tensor_4d(db.data(), FATTN_F32, 1, 2, 16, 24, 0, 0, 24, 1)), FATTN_ERR_BAD_STRIDE);
    EXPECT_NE(msg().find("dbias"), std::string::npos) << msg();
    EXPECT_EQ(bwd(fattn_tensor_contiguous(dq.data(), FATTN_F32, 1, 1, 16, 8)), FATTN_ERR_SHAPE_MISMATCH);
    {  // dbias over dq's bytes
        std::vector<float> big(size_t(2 * 16 * 24 + 64));
        fattn_tensor tdq2 = t4(big.data(), 2, 16, 2, 8);
        fattn_tensor tdb2 = fattn_tensor_contiguous(big.data(), FATTN_F32, 1, 2, 16, 24);
        EXPECT_EQ(fattn_attn_bwd_ex(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq2, &tdk, &tdv, &tdb2,
                                    nullptr, 0),
                  FATTN_ERR_OVERLAP);
        EXPECT_NE(msg().find("dbias"), std::string::npos) << msg();
    }
    // no bias: BAD_BIAS naming dbias
    fattn_attn_params nob = p;
    nob.bias = fattn_tensor_none();
    fattn_tensor tdb = fattn_tensor_contiguous(db.data(), FATTN_F32, 1, 2, 16, 24);
    EXPECT_EQ(fattn_attn_bwd_ex(ctx, &nob, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk, &tdv, &tdb, nullptr, 0),
              FATTN_ERR_BAD_BIAS);
    EXPECT_NE(msg().find("dbias"), std::string::npos) << msg();
    char why[256];
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &nob, &tq, &tk, &tv, FATTN_ATTN_WANT_DBIAS, why, sizeof why), FATTN_ERR_BAD_BIAS);
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &tq, &tk, &tv, FATTN_ATTN_WANT_DBIAS, why, sizeof why), FATTN_OK) << why;
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &tq, &tk, &tv, 2u, why, sizeof why), FATTN_ERR_BAD_VALUE);
    // sizes: the CPU's dbias needs no workspace; the memory model counts dbias (f32, reduced shape)
    size_t w0 = 0, w1 = 0;
    EXPECT_EQ(fattn_attn_workspace_size(ctx, &p, &tq, &tk, &tv, FATTN_DIR_BWD, &w0), FATTN_OK);
    EXPECT_EQ(fattn_attn_workspace_size_ex(ctx, &p, &tq, &tk, &tv, FATTN_ATTN_WANT_DBIAS, FATTN_DIR_BWD, &w1), FATTN_OK);
    EXPECT_EQ(w0, w1);
    fattn_attn_memory_info m0{}, m1{}, m2{};
    EXPECT_EQ(fattn_attn_memory(ctx, &p, &tq, &tk, &tv, &m0), FATTN_OK);
    EXPECT_EQ(fattn_attn_memory_ex(ctx, &p, &tq, &tk, &tv, 0, &m2), FATTN_OK);
    EXPECT_EQ(fattn_attn_memory_ex(ctx, &p, &tq, &tk, &tv, FATTN_ATTN_WANT_DBIAS, &m1), FATTN_OK);
    EXPECT_EQ(std::memcmp(&m0, &m2, sizeof m0), 0);
    EXPECT_EQ(m1.grads_bytes, m0.grads_bytes + uint64_t(2 * 16 * 24 * 4));
    EXPECT_EQ(m1.bwd_peak_bytes, m0.bwd_peak_bytes + uint64_t(2 * 16 * 24 * 4));
    EXPECT_EQ(m1.fwd_peak_bytes, m0.fwd_peak_bytes);
    fattn_ctx_free(ctx);
}

// Nothing attends (Skv = 0 keeps dbias empty; Sq = 0 with a query-broadcast bias leaves one row
// per slice): dbias is all zeros.
TEST(Dbias, EmptyQueriesGiveZeros) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    std::vector<float> k(size_t(3 * 8), 0.5f), v(size_t(3 * 8), 0.5f), dk(k.size()), dv(v.size()), bias(3, 0.f);
    std::vector<float> db(3, 7.f);
    float dummy[8] = {0};
    fattn_tensor tq = fattn_tensor_contiguous(dummy, FATTN_F32, 1, 0, 1, 8);
    fattn_tensor tk = fattn_tensor_contiguous(k.data(), FATTN_F32, 1, 3, 1, 8), tv = fattn_tensor_contiguous(v.data(), FATTN_F32, 1, 3, 1, 8);
    fattn_tensor tdk = fattn_tensor_contiguous(dk.data(), FATTN_F32, 1, 3, 1, 8), tdv = fattn_tensor_contiguous(dv.data(), FATTN_F32, 1, 3, 1, 8);
    fattn_tensor tl = fattn_tensor_contiguous(dummy, FATTN_F32, 1, 1, 0, 1);
    fattn_attn_params p = fattn_attn_params_default();
    p.bias = fattn_tensor_4d(bias.data(), FATTN_F32, 1, 1, 0, 3, 0, 0, 0, 1);
    fattn_tensor tdb = fattn_tensor_contiguous(db.data(), FATTN_F32, 1, 1, 1, 3);
    EXPECT_EQ(fattn_attn_bwd_ex(ctx, &p, &tq, &tk, &tv, &tq, &tl, nullptr, &tq, &tq, &tdk, &tdv, &tdb, nullptr, 0),
              FATTN_OK)
        << fattn_ctx_last_error(ctx);
    EXPECT_EQ(db, std::vector<float>(3, 0.f));
    fattn_ctx_free(ctx);
}

// On a CUDA context the fused kernels compute no dbias: supports_ex and memory_ex answer
// UNSUPPORTED naming dbias, the plain queries are unaffected, and the EXACT arm accepts it.
// The fused CUDA kernels serve the bias gradient (mma_dbias_kernel / sc_dbias_kernel after any
// family's backward): supports and memory answer for it as for the exact arm.
TEST(Dbias, CudaFusedAnswersForTheBiasGradient) {
    fattn_ctx_t *ctx = nullptr;
    if (fattn_ctx_init_cuda(0, nullptr, &ctx) != FATTN_OK)
        GTEST_SKIP() << "no CUDA device: " << fattn_ctx_last_error(nullptr);
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 128, 2, 64);
    fattn_tensor k = q, v = q;
    p.bias = fattn_tensor_4d(nullptr, FATTN_F32, 1, 1, 128, 128, 0, 0, 128, 1);
    p.bias.data = reinterpret_cast<void *>(uintptr_t(256));  // never read by a query
    char why[256];
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &q, &k, &v, 0, why, sizeof why), FATTN_OK) << why;
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &q, &k, &v, FATTN_ATTN_WANT_DBIAS, why, sizeof why), FATTN_OK) << why;
    fattn_attn_memory_info m{};
    EXPECT_EQ(fattn_attn_memory_ex(ctx, &p, &q, &k, &v, FATTN_ATTN_WANT_DBIAS, &m), FATTN_OK);
    p.algo = FATTN_ALGO_FUSED;
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &q, &k, &v, FATTN_ATTN_WANT_DBIAS, why, sizeof why), FATTN_OK) << why;
    p.algo = FATTN_ALGO_EXACT;
    EXPECT_EQ(fattn_attn_supports_ex(ctx, &p, &q, &k, &v, FATTN_ATTN_WANT_DBIAS, why, sizeof why), FATTN_OK) << why;
    fattn_ctx_free(ctx);
}
