// test_attn_merge.cpp — fattn_attn_merge (CPU): against a float64 fold of the same partials
// (-inf rows, one part, many parts, f16/bf16 parts and outputs, strided views), bitwise
// independence of the thread count, argument errors naming the argument, and the seam a
// context-parallel engine relies on: merging the forward's per-key-block (o, lse) equals the
// forward over all keys, and the backward per key block with the merged (global) o and lse sums
// to the backward over all keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "fattn/fattn.h"

namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();

struct Ctx {
    fattn_ctx_t *c = nullptr;
    explicit Ctx(int nthreads = 2) { EXPECT_EQ(fattn_ctx_init_cpu(nthreads, &c), FATTN_OK); }
    ~Ctx() { fattn_ctx_free(c); }
};

// One partial: o [B, S, H, Dv] stored in `dtype` with token stride S_pad >= H * Dv (a strided
// view when larger), lse [B, H, S] f32.
struct Part {
    fattn_dtype dtype;
    std::vector<uint16_t> o16;
    std::vector<float> o32;
    std::vector<float> lse;
    fattn_tensor o, l;
};

struct Shape {
    int64_t B, S, H, Dv;
};

void fill_part(Part &p, const Shape &s, fattn_dtype dt, int64_t tok_stride, std::mt19937 &rng,
               double p_neg_inf) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    p.dtype = dt;
    const int64_t n = s.B * s.S * tok_stride;
    if (dt == FATTN_F32) p.o32.assign(size_t(n), 0.f); else p.o16.assign(size_t(n), 0);
    void *data = dt == FATTN_F32 ? static_cast<void *>(p.o32.data()) : static_cast<void *>(p.o16.data());
    for (int64_t i = 0; i < n; ++i) fattn::store_f32(data, dt, i, nd(rng));
    p.o = fattn_tensor_4d(data, dt, s.B, s.S, s.H, s.Dv, s.S * tok_stride, tok_stride, s.Dv, 1);
    p.lse.resize(size_t(s.B * s.H * s.S));
    for (auto &x : p.lse) x = u(rng) < p_neg_inf ? kNegInf : 3.f * nd(rng);
    p.l = fattn_tensor_contiguous(p.lse.data(), FATTN_F32, s.B, s.H, s.S, 1);
}

// The same fold in float64 (parts read as stored, i.e. after their rounding to their dtype).
void ref_merge(const std::vector<Part> &parts, const Shape &s, std::vector<double> *o,
               std::vector<double> *lse) {
    o->assign(size_t(s.B * s.S * s.H * s.Dv), 0.0);
    lse->assign(size_t(s.B * s.H * s.S), -INFINITY);
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.S; ++t)
            for (int64_t h = 0; h < s.H; ++h) {
                const int64_t li = (b * s.H + h) * s.S + t;
                double m = -INFINITY;
                for (const Part &p : parts) m = std::max(m, double(p.lse[size_t(li)]));
                if (m == -INFINITY) continue;
                double den = 0;
                for (const Part &p : parts) den += std::exp(double(p.lse[size_t(li)]) - m);
                (*lse)[size_t(li)] = m + std::log(den);
                for (const Part &p : parts) {
                    const double l = p.lse[size_t(li)];
                    if (l == -INFINITY) continue;
                    const double w = std::exp(l - m) / den;
                    for (int64_t d = 0; d < s.Dv; ++d) {
                        const int64_t off = b * p.o.nb[0] + t * p.o.nb[1] + h * p.o.nb[2] + d;
                        (*o)[size_t(((b * s.S + t) * s.H + h) * s.Dv + d)] +=
                            w * fattn::load_f32(p.o.data, p.dtype, off);
                    }
                }
            }
}

struct Out {
    std::vector<float> o32;
    std::vector<uint16_t> o16;
    std::vector<float> lse;
    fattn_tensor o, l;
    Out(const Shape &s, fattn_dtype dt) {
        const int64_t n = s.B * s.S * s.H * s.Dv;
        if (dt == FATTN_F32) o32.assign(size_t(n), 123.f); else o16.assign(size_t(n), 0x7777);
        void *d = dt == FATTN_F32 ? static_cast<void *>(o32.data()) : static_cast<void *>(o16.data());
        o = fattn_tensor_contiguous(d, dt, s.B, s.S, s.H, s.Dv);
        lse.assign(size_t(s.B * s.H * s.S), 77.f);
        l = fattn_tensor_contiguous(lse.data(), FATTN_F32, s.B, s.H, s.S, 1);
    }
    float at(int64_t i) const { return fattn::load_f32(o.data, o.dtype, i); }
};

fattn_status run_merge(fattn_ctx_t *ctx, const std::vector<Part> &parts, Out *out) {
    std::vector<fattn_tensor> os, ls;
    for (const Part &p : parts) {
        os.push_back(p.o);
        ls.push_back(p.l);
    }
    return fattn_attn_merge(ctx, int64_t(parts.size()), os.data(), ls.data(), &out->o, &out->l);
}

// Checks out against the float64 fold: o within tol of max|o_ref| (relative), lse within tol
// relative (per element, 1e-30 floor), -inf exactly where the reference has it.
void expect_close(const std::vector<Part> &parts, const Shape &s, const Out &out, double tol) {
    std::vector<double> ro, rl;
    ref_merge(parts, s, &ro, &rl);
    double omax = 0, oerr = 0;
    for (size_t i = 0; i < ro.size(); ++i) {
        omax = std::max(omax, std::fabs(ro[i]));
        oerr = std::max(oerr, std::fabs(double(out.at(int64_t(i))) - ro[i]));
    }
    EXPECT_LE(oerr, tol * std::max(omax, 1e-30)) << "max |o - ref| " << oerr << ", max |ref| " << omax;
    for (size_t i = 0; i < rl.size(); ++i) {
        if (rl[i] == -INFINITY) {
            EXPECT_EQ(out.lse[i], kNegInf) << "row " << i;
            const int64_t b = int64_t(i) / (s.H * s.S), h = (int64_t(i) / s.S) % s.H, t = int64_t(i) % s.S;
            for (int64_t d = 0; d < s.Dv; ++d)
                EXPECT_EQ(out.at(((b * s.S + t) * s.H + h) * s.Dv + d), 0.f) << "row " << i;
        } else {
            EXPECT_NEAR(out.lse[i], rl[i], 2e-6 * std::max(1.0, std::fabs(rl[i]))) << "row " << i;
        }
    }
}

std::vector<Part> make_parts(const Shape &s, int n, std::vector<fattn_dtype> dts, int64_t pad,
                             double p_neg_inf, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Part> parts(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
        fill_part(parts[size_t(i)], s, dts[size_t(i) % dts.size()], s.H * s.Dv + pad, rng, p_neg_inf);
    return parts;
}

TEST(AttnMerge, MatchesFloat64Fold) {
    Ctx ctx;
    const Shape s{2, 9, 3, 20};
    for (int n : {1, 2, 3, 17}) {
        SCOPED_TRACE("n_parts " + std::to_string(n));
        auto parts = make_parts(s, n, {FATTN_F32}, 0, 0.25, 11u + uint32_t(n));
        Out out(s, FATTN_F32);
        ASSERT_EQ(run_merge(ctx.c, parts, &out), FATTN_OK) << fattn_ctx_last_error(ctx.c);
        expect_close(parts, s, out, 2e-6);
    }
}

TEST(AttnMerge, OnePartIsACopy) {
    Ctx ctx;
    const Shape s{1, 5, 2, 8};
    auto parts = make_parts(s, 1, {FATTN_F32}, 3, 0.3, 5u);
    Out out(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, parts, &out), FATTN_OK) << fattn_ctx_last_error(ctx.c);
    for (int64_t t = 0; t < s.S; ++t)
        for (int64_t h = 0; h < s.H; ++h) {
            const float l = parts[0].lse[size_t(h * s.S + t)];
            EXPECT_EQ(std::memcmp(&out.lse[size_t(h * s.S + t)], &l, 4), 0);
            for (int64_t d = 0; d < s.Dv; ++d) {
                const float want = l == kNegInf ? 0.f : parts[0].o32[size_t(t * parts[0].o.nb[1] + h * s.Dv + d)];
                EXPECT_EQ(out.o32[size_t((t * s.H + h) * s.Dv + d)], want);
            }
        }
}

TEST(AttnMerge, NegInfRowsGiveZeroAndNegInf) {
    Ctx ctx;
    const Shape s{1, 4, 2, 6};
    auto parts = make_parts(s, 3, {FATTN_F32}, 0, 0.0, 9u);
    // Row (h 0, t 1): every part -inf, with garbage in o; row (h 1, t 2): only the last part
    // alive; row (h 0, t 3): the first part -inf with NaN in its o (never read).
    for (auto &p : parts) {
        p.lse[0 * s.S + 1] = kNegInf;
        for (int64_t d = 0; d < s.Dv; ++d) p.o32[size_t((1 * s.H + 0) * s.Dv + d)] = std::nanf("");
    }
    parts[0].lse[1 * s.S + 2] = parts[1].lse[1 * s.S + 2] = kNegInf;
    parts[0].lse[0 * s.S + 3] = kNegInf;
    for (int64_t d = 0; d < s.Dv; ++d) parts[0].o32[size_t((3 * s.H + 0) * s.Dv + d)] = std::nanf("");
    Out out(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, parts, &out), FATTN_OK) << fattn_ctx_last_error(ctx.c);
    EXPECT_EQ(out.lse[0 * s.S + 1], kNegInf);
    for (int64_t d = 0; d < s.Dv; ++d) EXPECT_EQ(out.o32[size_t((1 * s.H + 0) * s.Dv + d)], 0.f);
    EXPECT_EQ(out.lse[1 * s.S + 2], parts[2].lse[1 * s.S + 2]);  // one live part: exactly it
    for (int64_t d = 0; d < s.Dv; ++d)
        EXPECT_EQ(out.o32[size_t((2 * s.H + 1) * s.Dv + d)], parts[2].o32[size_t((2 * s.H + 1) * s.Dv + d)]);
    for (int64_t d = 0; d < s.Dv; ++d) EXPECT_TRUE(std::isfinite(out.o32[size_t((3 * s.H + 0) * s.Dv + d)]));
    // The other rows: against float64 (garbage o at a -inf lse is never read there either).
    for (auto &p : parts)
        for (int64_t d = 0; d < s.Dv; ++d) p.o32[size_t((1 * s.H + 0) * s.Dv + d)] = 0.f;
    for (int64_t d = 0; d < s.Dv; ++d) parts[0].o32[size_t((3 * s.H + 0) * s.Dv + d)] = 0.f;
    expect_close(parts, s, out, 2e-6);
}

TEST(AttnMerge, LowPrecisionPartsAndOutputs) {
    Ctx ctx;
    const Shape s{2, 7, 2, 300};  // Dv > 256: two column passes per row
    auto parts = make_parts(s, 5, {FATTN_BF16, FATTN_F32, FATTN_F16}, 5, 0.2, 21u);
    for (fattn_dtype dt : {FATTN_F32, FATTN_BF16, FATTN_F16}) {
        SCOPED_TRACE(fattn_dtype_name(dt));
        Out out(s, dt);
        ASSERT_EQ(run_merge(ctx.c, parts, &out), FATTN_OK) << fattn_ctx_last_error(ctx.c);
        expect_close(parts, s, out, dt == FATTN_F32 ? 2e-6 : dt == FATTN_BF16 ? 8e-3 : 1e-3);
    }
    auto bf = make_parts(s, 4, {FATTN_BF16}, 0, 0.1, 22u);
    Out out(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, bf, &out), FATTN_OK) << fattn_ctx_last_error(ctx.c);
    expect_close(bf, s, out, 2e-6);  // bf16 parts, f32 accumulation and output
}

TEST(AttnMerge, StridedOutputs) {
    Ctx ctx;
    const Shape s{2, 6, 3, 8};
    auto parts = make_parts(s, 4, {FATTN_F32}, 2, 0.2, 31u);
    Out dense(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, parts, &dense), FATTN_OK);
    // o_out inside a wider buffer (token stride H * Dv + 4), lse_out with a padded head stride.
    std::vector<float> ob(size_t(s.B * s.S * (s.H * s.Dv + 4)), 5.f), lb(size_t(s.B * s.H * (s.S + 3)), 5.f);
    std::vector<fattn_tensor> os, ls;
    for (auto &p : parts) { os.push_back(p.o); ls.push_back(p.l); }
    fattn_tensor o = fattn_tensor_4d(ob.data(), FATTN_F32, s.B, s.S, s.H, s.Dv,
                                     s.S * (s.H * s.Dv + 4), s.H * s.Dv + 4, s.Dv, 1);
    fattn_tensor l = fattn_tensor_4d(lb.data(), FATTN_F32, s.B, s.H, s.S, 1, s.H * (s.S + 3), s.S + 3, 1, 1);
    ASSERT_EQ(fattn_attn_merge(ctx.c, 4, os.data(), ls.data(), &o, &l), FATTN_OK) << fattn_ctx_last_error(ctx.c);
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.S; ++t)
            for (int64_t h = 0; h < s.H; ++h) {
                const float lw = dense.lse[size_t((b * s.H + h) * s.S + t)];
                const float lg = lb[size_t(b * l.nb[0] + h * l.nb[1] + t)];
                EXPECT_EQ(std::memcmp(&lw, &lg, 4), 0);
                for (int64_t d = 0; d < s.Dv; ++d)
                    EXPECT_EQ(ob[size_t(b * o.nb[0] + t * o.nb[1] + h * s.Dv + d)],
                              dense.o32[size_t(((b * s.S + t) * s.H + h) * s.Dv + d)]);
            }
}

TEST(AttnMerge, BitwiseIndependentOfThreadCount) {
    const Shape s{3, 33, 4, 40};
    auto parts = make_parts(s, 6, {FATTN_F32, FATTN_BF16}, 0, 0.15, 41u);
    Ctx c1(1), c3(3), c8(8);
    Out a(s, FATTN_F32), b(s, FATTN_F32), c(s, FATTN_F32);
    ASSERT_EQ(run_merge(c1.c, parts, &a), FATTN_OK);
    ASSERT_EQ(run_merge(c3.c, parts, &b), FATTN_OK);
    ASSERT_EQ(run_merge(c8.c, parts, &c), FATTN_OK);
    EXPECT_EQ(std::memcmp(a.o32.data(), b.o32.data(), a.o32.size() * 4), 0);
    EXPECT_EQ(std::memcmp(a.o32.data(), c.o32.data(), a.o32.size() * 4), 0);
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0);
    EXPECT_EQ(std::memcmp(a.lse.data(), c.lse.data(), a.lse.size() * 4), 0);
}

TEST(AttnMerge, OrderFixesTheBits) {
    Ctx ctx;
    const Shape s{1, 16, 2, 16};
    auto parts = make_parts(s, 5, {FATTN_F32}, 0, 0.0, 51u);
    Out a(s, FATTN_F32), b(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, parts, &a), FATTN_OK);
    ASSERT_EQ(run_merge(ctx.c, parts, &b), FATTN_OK);
    EXPECT_EQ(std::memcmp(a.o32.data(), b.o32.data(), a.o32.size() * 4), 0);  // repeatable
    std::reverse(parts.begin(), parts.end());
    Out r(s, FATTN_F32);
    ASSERT_EQ(run_merge(ctx.c, parts, &r), FATTN_OK);
    expect_close(parts, s, r, 2e-6);  // another order: equally exact
}

// Expects status st and a last error starting with `head`.
void expect_error(fattn_ctx_t *ctx, fattn_status got, fattn_status st, const std::string &head) {
    EXPECT_EQ(got, st) << fattn_ctx_last_error(ctx);
    EXPECT_EQ(std::string(fattn_ctx_last_error(ctx)).rfind(head, 0), 0u) << fattn_ctx_last_error(ctx);
}

TEST(AttnMerge, ArgumentErrorsNameTheArgument) {
    Ctx ctx;
    const Shape s{1, 4, 2, 8};
    auto parts = make_parts(s, 3, {FATTN_F32}, 0, 0.0, 61u);
    std::vector<fattn_tensor> os, ls;
    for (auto &p : parts) { os.push_back(p.o); ls.push_back(p.l); }
    Out out(s, FATTN_F32);
    EXPECT_EQ(fattn_attn_merge(nullptr, 3, os.data(), ls.data(), &out.o, &out.l), FATTN_ERR_NULL_POINTER);
    expect_error(ctx.c, fattn_attn_merge(ctx.c, 0, os.data(), ls.data(), &out.o, &out.l), FATTN_ERR_BAD_VALUE, "n_parts: 0");
    expect_error(ctx.c, fattn_attn_merge(ctx.c, -2, os.data(), ls.data(), &out.o, &out.l), FATTN_ERR_BAD_VALUE, "n_parts: -2");
    expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, nullptr, ls.data(), &out.o, &out.l), FATTN_ERR_NULL_POINTER, "o_parts:");
    expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), nullptr, &out.o, &out.l), FATTN_ERR_NULL_POINTER, "lse_parts:");
    expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), nullptr, &out.l), FATTN_ERR_NULL_POINTER, "o_out:");
    expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &out.o, nullptr), FATTN_ERR_NULL_POINTER, "lse_out:");
    {  // a part's seq length differs
        auto bad = os;
        bad[1].ne[1] = 3;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, bad.data(), ls.data(), &out.o, &out.l),
                     FATTN_ERR_SHAPE_MISMATCH, "o_parts[1]: ne[1] (seq) is 3 but o_out has 4");
    }
    {  // an lse with the wrong heads
        auto bad = ls;
        bad[2].ne[1] = 1;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), bad.data(), &out.o, &out.l),
                     FATTN_ERR_SHAPE_MISMATCH, "lse_parts[2]: ne[1] (heads) is 1 but o_out has 2");
    }
    {  // lse not f32
        auto bad = ls;
        bad[0].dtype = FATTN_BF16;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), bad.data(), &out.o, &out.l),
                     FATTN_ERR_DTYPE_MISMATCH, "lse_parts[0]: dtype is bf16, must be f32");
        fattn_tensor l = out.l;
        l.dtype = FATTN_F16;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &out.o, &l),
                     FATTN_ERR_DTYPE_MISMATCH, "lse_out: dtype is f16, must be f32");
    }
    {  // a dtype that is no fattn_dtype
        auto bad = os;
        std::memset(&bad[1].dtype, 0x7f, 1);
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, bad.data(), ls.data(), &out.o, &out.l),
                     FATTN_ERR_BAD_VALUE, "o_parts[1]: dtype");
    }
    {  // innermost stride, broadcast output, NULL data
        auto bad = os;
        bad[2].nb[3] = 2;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, bad.data(), ls.data(), &out.o, &out.l),
                     FATTN_ERR_BAD_STRIDE, "o_parts[2]: nb[3]");
        fattn_tensor o = out.o;
        o.nb[1] = 0;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &o, &out.l),
                     FATTN_ERR_BAD_STRIDE, "o_out: nb[1] is 0");
        auto nul = ls;
        nul[1].data = nullptr;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), nul.data(), &out.o, &out.l),
                     FATTN_ERR_NULL_POINTER, "lse_parts[1]: data is NULL");
        fattn_tensor mis = out.o;
        mis.data = reinterpret_cast<char *>(mis.data) + 2;
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &mis, &out.l),
                     FATTN_ERR_BAD_VALUE, "o_out: data pointer is not aligned");
    }
    {  // merging into part 0 (in place) and outputs sharing bytes
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &os[0], &out.l),
                     FATTN_ERR_OVERLAP, "o_out: overlaps input o_parts[0]");
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &out.o, &ls[2]),
                     FATTN_ERR_OVERLAP, "lse_out: overlaps input lse_parts[2]");
        fattn_tensor l = fattn_tensor_contiguous(out.o32.data(), FATTN_F32, 1, 2, 4, 1);
        expect_error(ctx.c, fattn_attn_merge(ctx.c, 3, os.data(), ls.data(), &out.o, &l),
                     FATTN_ERR_OVERLAP, "o_out: overlaps output lse_out");
    }
    // Nothing was written by the failed calls.
    for (float x : out.o32) EXPECT_EQ(x, 123.f);
    // Empty rows: a no-op that succeeds.
    fattn_tensor eo = out.o, el = out.l;
    eo.ne[1] = 0; el.ne[2] = 0;
    auto eos = os, els = ls;
    for (auto &t : eos) t.ne[1] = 0;
    for (auto &t : els) t.ne[2] = 0;
    EXPECT_EQ(fattn_attn_merge(ctx.c, 3, eos.data(), els.data(), &eo, &el), FATTN_OK) << fattn_ctx_last_error(ctx.c);
}

// ---- the seam of a context-parallel engine: fattn's own forward / backward over key blocks ----

// q, k, v drawn from N(0, 1) by a generator seeded with `seed`, which the test draws on from.
struct Attn {
    int64_t B = 2, Sq = 24, Skv = 37, Hq = 4, Hkv = 2, D = 16;
    std::vector<float> q, k, v, bias;
    std::mt19937 rng;
    std::normal_distribution<float> nd{0.f, 1.f};
    explicit Attn(unsigned seed) : rng(seed) {
        q.resize(size_t(B * Sq * Hq * D));
        k.resize(size_t(B * Skv * Hkv * D));
        v.resize(k.size());
        for (auto *t : {&q, &k, &v})
            for (auto &x : *t) x = nd(rng);
    }
};

double rel(const std::vector<float> &a, const std::vector<float> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isinf(b[i]) && a[i] == b[i]) continue;
        num = std::max(num, std::fabs(double(a[i]) - b[i]));
        if (std::isfinite(b[i])) den = std::max(den, std::fabs(double(b[i])));
    }
    return num / std::max(den, 1e-30);
}

TEST(AttnMerge, ForwardOverKeyBlocksEqualsForwardOverAllKeys) {
    Attn a(71u);
    // A per-(query, key) bias with -inf regions: keys 10..19 masked for every query of batch 1,
    // query 3 of batch 0 sees no key at all (a -inf row), so whole blocks are -inf for some rows.
    a.bias.assign(size_t(a.B * a.Sq * a.Skv), 0.f);
    for (int64_t b = 0; b < a.B; ++b)
        for (int64_t i = 0; i < a.Sq; ++i)
            for (int64_t j = 0; j < a.Skv; ++j) {
                float &x = a.bias[size_t((b * a.Sq + i) * a.Skv + j)];
                x = 0.5f * a.nd(a.rng);
                if ((b == 1 && j >= 10 && j < 20) || (b == 0 && i == 3)) x = kNegInf;
            }
    Ctx ctx(3);
    fattn_attn_params p = fattn_attn_params_default();
    p.prec = FATTN_PREC_F32;
    const fattn_tensor q = fattn_tensor_contiguous(a.q.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    auto kv = [&](std::vector<float> &x, int64_t j0, int64_t n) {
        return fattn_tensor_4d(x.data() + j0 * a.Hkv * a.D, FATTN_F32, a.B, n, a.Hkv, a.D,
                               a.Skv * a.Hkv * a.D, a.Hkv * a.D, a.D, 1);
    };
    auto bias = [&](int64_t j0, int64_t n) {  // [B, 1 (heads: stride 0), Sq, n]
        return fattn_tensor_4d(a.bias.data() + j0, FATTN_F32, a.B, 1, a.Sq, n, a.Sq * a.Skv, 0, a.Skv, 1);
    };
    const size_t no = size_t(a.B * a.Sq * a.Hq * a.D), nl = size_t(a.B * a.Hq * a.Sq);
    // The forward over all keys.
    std::vector<float> o_full(no), l_full(nl);
    const fattn_tensor of = fattn_tensor_contiguous(o_full.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    const fattn_tensor lf = fattn_tensor_contiguous(l_full.data(), FATTN_F32, a.B, a.Hq, a.Sq, 1);
    {
        fattn_tensor k = kv(a.k, 0, a.Skv), v = kv(a.v, 0, a.Skv);
        p.bias = bias(0, a.Skv);
        ASSERT_EQ(fattn_attn_fwd(ctx.c, &p, &q, &k, &v, &of, &lf, nullptr, nullptr, 0), FATTN_OK)
            << fattn_ctx_last_error(ctx.c);
    }
    // Uneven key blocks, one forward each, then the merge in key-block order.
    const std::vector<int64_t> cuts = {0, 5, 10, 20, 21, 37};
    const size_t nb = cuts.size() - 1;
    std::vector<std::vector<float>> ob(nb, std::vector<float>(no)), lb(nb, std::vector<float>(nl));
    std::vector<fattn_tensor> os, ls;
    for (size_t i = 0; i < nb; ++i) {
        const int64_t j0 = cuts[i], n = cuts[i + 1] - cuts[i];
        fattn_tensor k = kv(a.k, j0, n), v = kv(a.v, j0, n);
        p.bias = bias(j0, n);
        os.push_back(fattn_tensor_contiguous(ob[i].data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D));
        ls.push_back(fattn_tensor_contiguous(lb[i].data(), FATTN_F32, a.B, a.Hq, a.Sq, 1));
        ASSERT_EQ(fattn_attn_fwd(ctx.c, &p, &q, &k, &v, &os[i], &ls[i], nullptr, nullptr, 0), FATTN_OK)
            << fattn_ctx_last_error(ctx.c);
    }
    std::vector<float> o_m(no, 9.f), l_m(nl, 9.f);
    const fattn_tensor om = fattn_tensor_contiguous(o_m.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    const fattn_tensor lm = fattn_tensor_contiguous(l_m.data(), FATTN_F32, a.B, a.Hq, a.Sq, 1);
    ASSERT_EQ(fattn_attn_merge(ctx.c, int64_t(nb), os.data(), ls.data(), &om, &lm), FATTN_OK)
        << fattn_ctx_last_error(ctx.c);
    EXPECT_LE(rel(o_m, o_full), 1e-5);
    EXPECT_LE(rel(l_m, l_full), 1e-5);
    int neg_inf_rows = 0;
    for (size_t i = 0; i < nl; ++i) {
        EXPECT_EQ(std::isinf(l_m[i]), std::isinf(l_full[i])) << "row " << i;
        neg_inf_rows += l_m[i] == kNegInf;
    }
    EXPECT_EQ(neg_inf_rows, a.Hq);  // query 3 of batch 0, every head
}

TEST(AttnMerge, BackwardPerKeyBlockWithMergedLseSumsToFullBackward) {
    Attn a(81u);
    std::vector<float> dout(a.q.size());
    for (auto &x : dout) x = a.nd(a.rng);
    Ctx ctx(2);
    fattn_attn_params p = fattn_attn_params_default();
    p.prec = FATTN_PREC_F32;
    const fattn_tensor q = fattn_tensor_contiguous(a.q.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    const fattn_tensor g = fattn_tensor_contiguous(dout.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    auto kv = [&](float *x, int64_t j0, int64_t n) {
        return fattn_tensor_4d(x + j0 * a.Hkv * a.D, FATTN_F32, a.B, n, a.Hkv, a.D,
                               a.Skv * a.Hkv * a.D, a.Hkv * a.D, a.D, 1);
    };
    const size_t no = a.q.size(), nl = size_t(a.B * a.Hq * a.Sq), nk = a.k.size();
    std::vector<float> o(no), l(nl), dq(no), dk(nk), dv(nk);
    const fattn_tensor ot = fattn_tensor_contiguous(o.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    const fattn_tensor lt = fattn_tensor_contiguous(l.data(), FATTN_F32, a.B, a.Hq, a.Sq, 1);
    {
        fattn_tensor k = kv(a.k.data(), 0, a.Skv), v = kv(a.v.data(), 0, a.Skv);
        fattn_tensor tq = fattn_tensor_contiguous(dq.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
        fattn_tensor tk = kv(dk.data(), 0, a.Skv), tv = kv(dv.data(), 0, a.Skv);
        ASSERT_EQ(fattn_attn_fwd(ctx.c, &p, &q, &k, &v, &ot, &lt, nullptr, nullptr, 0), FATTN_OK);
        ASSERT_EQ(fattn_attn_bwd(ctx.c, &p, &q, &k, &v, &ot, &lt, nullptr, &g, &tq, &tk, &tv, nullptr, 0),
                  FATTN_OK) << fattn_ctx_last_error(ctx.c);
    }
    // Blocks: forward each, merge, then the backward per block with the merged o and lse.
    const std::vector<int64_t> cuts = {0, 12, 13, 30, 37};
    const size_t nb = cuts.size() - 1;
    std::vector<std::vector<float>> ob(nb, std::vector<float>(no)), lb(nb, std::vector<float>(nl));
    std::vector<fattn_tensor> os, ls;
    for (size_t i = 0; i < nb; ++i) {
        fattn_tensor k = kv(a.k.data(), cuts[i], cuts[i + 1] - cuts[i]);
        fattn_tensor v = kv(a.v.data(), cuts[i], cuts[i + 1] - cuts[i]);
        os.push_back(fattn_tensor_contiguous(ob[i].data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D));
        ls.push_back(fattn_tensor_contiguous(lb[i].data(), FATTN_F32, a.B, a.Hq, a.Sq, 1));
        ASSERT_EQ(fattn_attn_fwd(ctx.c, &p, &q, &k, &v, &os[i], &ls[i], nullptr, nullptr, 0), FATTN_OK);
    }
    std::vector<float> om(no), lm(nl);
    const fattn_tensor omt = fattn_tensor_contiguous(om.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
    const fattn_tensor lmt = fattn_tensor_contiguous(lm.data(), FATTN_F32, a.B, a.Hq, a.Sq, 1);
    ASSERT_EQ(fattn_attn_merge(ctx.c, int64_t(nb), os.data(), ls.data(), &omt, &lmt), FATTN_OK);
    std::vector<float> dq_sum(no, 0.f), dk_b(nk), dv_b(nk), dq_b(no);
    for (size_t i = 0; i < nb; ++i) {
        const int64_t j0 = cuts[i], n = cuts[i + 1] - cuts[i];
        fattn_tensor k = kv(a.k.data(), j0, n), v = kv(a.v.data(), j0, n);
        fattn_tensor tq = fattn_tensor_contiguous(dq_b.data(), FATTN_F32, a.B, a.Sq, a.Hq, a.D);
        fattn_tensor tk = kv(dk_b.data(), j0, n), tv = kv(dv_b.data(), j0, n);  // this block's rows
        ASSERT_EQ(fattn_attn_bwd(ctx.c, &p, &q, &k, &v, &omt, &lmt, nullptr, &g, &tq, &tk, &tv, nullptr, 0),
                  FATTN_OK) << fattn_ctx_last_error(ctx.c);
        for (size_t e = 0; e < no; ++e) dq_sum[e] += dq_b[e];
    }
    EXPECT_LE(rel(om, o), 1e-5);
    EXPECT_LE(rel(dq_sum, dq), 1e-5);
    EXPECT_LE(rel(dk_b, dk), 1e-5);  // every block wrote its own key rows
    EXPECT_LE(rel(dv_b, dv), 1e-5);
}

}  // namespace
