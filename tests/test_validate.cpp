// test_validate.cpp — one test per validation rule of the softmax-attention support surface
// (src/core/attn_validate.cpp): each asserts the status AND a substring of the message naming the
// argument. Rules are exercised through the public C API (they fail before any kernel runs); the
// "this is legal" cases call fattn::attn_validate directly, so no test depends on kernel results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/attn_validate.h"
#include "fattn/fattn.h"
#include "support/expect_fail.h"

namespace {

// A small valid problem (f32, GQA 4/2, cross Sq != Skv, Dv != D) with separate buffers.
struct Prob {
    int64_t B = 2, Sq = 5, Skv = 7, Hq = 4, Hkv = 2, D = 8, Dv = 6;
    std::vector<float> bq, bk, bv, bo, blse, bdo, bdq, bdk, bdv;
    fattn_tensor q, k, v, o, lse, dout, dq, dk, dv;
    fattn_attn_params p = fattn_attn_params_default();
    fattn_ctx_t *ctx = nullptr;

    Prob() { build(); fattn_ctx_init_cpu(2, &ctx); }
    ~Prob() { fattn_ctx_free(ctx); }
    Prob(const Prob &) = delete;
    Prob &operator=(const Prob &) = delete;

    static fattn_tensor make(std::vector<float> &buf, int64_t a, int64_t b, int64_t c, int64_t d) {
        buf.assign(size_t(std::max<int64_t>(a * b * c * d, 1)), 0.5f);
        return fattn_tensor_contiguous(buf.data(), FATTN_F32, a, b, c, d);
    }
    void build() {
        q = make(bq, B, Sq, Hq, D);
        k = make(bk, B, Skv, Hkv, D);
        v = make(bv, B, Skv, Hkv, Dv);
        o = make(bo, B, Sq, Hq, Dv);
        lse = make(blse, B, Hq, Sq, 1);
        dout = make(bdo, B, Sq, Hq, Dv);
        dq = make(bdq, B, Sq, Hq, D);
        dk = make(bdk, B, Skv, Hkv, D);
        dv = make(bdv, B, Skv, Hkv, Dv);
    }
    fattn_status fwd() { return fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, nullptr, nullptr, 0); }
    fattn_status bwd() {
        return fattn_attn_bwd(ctx, &p, &q, &k, &v, &o, &lse, nullptr, &dout, &dq, &dk, &dv, nullptr, 0);
    }
    fattn_status supports() { return fattn_attn_supports(ctx, &p, &q, &k, &v, nullptr, 0); }
    // Validation only (with the backend's selection), for cases that must be accepted.
    fattn_status check(fattn::AttnOp op, fattn::AttnResolved *r = nullptr, std::string *why = nullptr) {
        fattn::AttnViews vw;
        vw.q = &q; vw.k = &k; vw.v = &v; vw.o = &o; vw.lse = &lse;
        vw.dout = &dout; vw.dq = &dq; vw.dk = &dk; vw.dv = &dv;
        fattn::AttnResolved local;
        std::string w;
        fattn_status s = fattn::attn_validate(ctx, &p, op, vw, true, r ? r : &local, why ? why : &w);
        return s;
    }
    std::string err() const { return fattn_ctx_last_error(ctx); }
};

// Stores an out-of-range value in a C enum field as a C caller could, without forming it as a
// C++ enum value (which would be undefined behaviour in the test itself).
template <class E>
void set_raw(E &e, int v) {
    std::memcpy(&e, &v, sizeof e);
}

// One change to a valid problem and what the forward (or backward) must answer: `status` and a
// substring of the message naming the argument. Each change starts from a fresh problem.
struct Reject {
    void (*change)(Prob &);
    bool bwd;
    const char *msg;
};

void expect_rejected(fattn_status status, std::initializer_list<Reject> cases) {
    for (const Reject &r : cases) {
        SCOPED_TRACE(r.msg);
        Prob P;
        r.change(P);
        EXPECT_FAIL(r.bwd ? P.bwd() : P.fwd(), status, r.msg, P);
    }
}

// ------------------------------------------------------------------------- null pointers

TEST(Validate, NullCtx) {
    Prob P;
    EXPECT_EQ(fattn_attn_fwd(nullptr, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, nullptr, nullptr, 0),
              FATTN_ERR_NULL_POINTER);
    EXPECT_NE(std::string(fattn_ctx_last_error(nullptr)).find("ctx: is NULL"), std::string::npos);
}

TEST(Validate, NullParams) {
    Prob P;
    EXPECT_FAIL(fattn_attn_fwd(P.ctx, nullptr, &P.q, &P.k, &P.v, &P.o, &P.lse, nullptr, nullptr, 0),
                FATTN_ERR_NULL_POINTER, "params: is NULL", P);
}

TEST(Validate, NullTensorPointer) {
    Prob P;
    EXPECT_FAIL(fattn_attn_fwd(P.ctx, &P.p, &P.q, nullptr, &P.v, &P.o, &P.lse, nullptr, nullptr, 0),
                FATTN_ERR_NULL_POINTER, "k: tensor pointer is NULL", P);
    EXPECT_FAIL(fattn_attn_bwd(P.ctx, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, nullptr, &P.dout, &P.dq,
                               nullptr, &P.dv, nullptr, 0),
                FATTN_ERR_NULL_POINTER, "dk: tensor pointer is NULL", P);
}

TEST(Validate, NullDataInNonEmptyTensor) {
    expect_rejected(FATTN_ERR_NULL_POINTER, {
        {[](Prob &P) { P.v.data = nullptr; }, false, "v: data is NULL"},
        {[](Prob &P) { P.dq.data = nullptr; }, true, "dq: data is NULL"},
    });
}

// ------------------------------------------------------------------------- dtypes and enums

// k against q; the outputs and gradients against q; lse is always f32.
TEST(Validate, DtypeMismatch) {
    expect_rejected(FATTN_ERR_DTYPE_MISMATCH, {
        {[](Prob &P) { P.k.dtype = FATTN_BF16; }, false, "k: dtype is bf16 but q is f32"},
        {[](Prob &P) { P.o.dtype = FATTN_F16; }, false, "o: dtype is f16 but q is f32"},
        {[](Prob &P) { P.dv.dtype = FATTN_BF16; }, true, "dv: dtype is bf16"},
        {[](Prob &P) { P.lse.dtype = FATTN_F16; }, false, "lse: dtype is f16, must be f32"},
    });
}

TEST(Validate, EnumOutOfRange) {
    expect_rejected(FATTN_ERR_BAD_VALUE, {
        {[](Prob &P) { set_raw(P.q.dtype, 7); }, false, "q: dtype 7 is not a fattn_dtype"},
        {[](Prob &P) { set_raw(P.p.prec, 9); }, false, "prec: 9"},
        {[](Prob &P) { set_raw(P.p.algo, 5); }, false, "algo: 5"},
        {[](Prob &P) { set_raw(P.p.causal, 3); }, false, "causal: 3"},
        {[](Prob &P) { set_raw(P.p.window_align, 2); }, false, "window_align: 2"},
    });
}

// ------------------------------------------------------------------------- shapes

TEST(Validate, HeadDimMismatchMessage) {
    Prob P;
    P.D = 64;
    P.build();
    P.k = Prob::make(P.bk, P.B, P.Skv, P.Hkv, 80);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_SHAPE_MISMATCH, "k: ne[3] (head dim) is 80 but q has 64", P);
}

TEST(Validate, ShapeMismatchEachView) {
    expect_rejected(FATTN_ERR_SHAPE_MISMATCH, {
        {[](Prob &P) { P.k.ne[0] = 3; }, false, "k: ne[0] (batch) is 3 but q has 2"},
        {[](Prob &P) { P.v.ne[1] = 6; }, false, "v: ne[1] (seq) is 6 but k has 7"},
        {[](Prob &P) { P.v.ne[2] = 1; }, false, "v: ne[2] (heads) is 1 but k has 2"},
        {[](Prob &P) { P.o.ne[3] = 8; }, false, "o: ne[3] (head dim) is 8 but v has 6"},
        {[](Prob &P) { P.o.ne[1] = 4; }, false, "o: ne[1] (seq) is 4 but q has 5"},
        {[](Prob &P) { P.lse.ne[2] = 4; }, false, "lse: ne[2] (seq) is 4 but q has 5"},
        {[](Prob &P) { P.lse.ne[3] = 2; }, false, "lse: ne[3] (unit) is 2, must be 1"},
        {[](Prob &P) { P.dout.ne[2] = 2; }, true, "dout: ne[2] (heads) is 2 but q has 4"},
        {[](Prob &P) { P.dq.ne[3] = 6; }, true, "dq: ne[3] (head dim) is 6 but q has 8"},
        {[](Prob &P) { P.dk.ne[1] = 5; }, true, "dk: ne[1] (seq) is 5 but k has 7"},
        {[](Prob &P) { P.dv.ne[3] = 8; }, true, "dv: ne[3] (head dim) is 8 but v has 6"},
    });
}

TEST(Validate, NegativeDim) {
    expect_rejected(FATTN_ERR_SHAPE_MISMATCH, {
        {[](Prob &P) { P.q.ne[1] = -5; }, false, "q: ne[1] (seq) is -5, must not be negative"},
    });
}

TEST(Validate, GqaHeads) {
    expect_rejected(FATTN_ERR_GQA_HEADS, {
        {[](Prob &P) { P.Hkv = 3, P.build(); }, false, "not a multiple of k's 3 heads"},
        {[](Prob &P) { P.Hkv = 0, P.build(); }, false, "k: ne[2] (heads) is 0"},
    });
}

TEST(Validate, ZeroHeadDim) {
    expect_rejected(FATTN_ERR_BAD_HEAD_DIM, {
        {[](Prob &P) { P.D = 0, P.build(); }, false, "q: ne[3] (head dim) is 0"},
        {[](Prob &P) { P.Dv = 0, P.build(); }, false, "v: ne[3] (head dim) is 0"},
    });
}

// ------------------------------------------------------------------------- strides

TEST(Validate, InnermostStride) {
    expect_rejected(FATTN_ERR_BAD_STRIDE, {
        {[](Prob &P) { P.q.nb[3] = 2; }, false, "q: nb[3] (innermost stride) is 2, must be 1"},
        // lse's innermost dim is the query index
        {[](Prob &P) { P.lse.nb[2] = 4; }, false, "lse: nb[2] (innermost stride) is 4"},
        {[](Prob &P) { P.dk.nb[3] = 0; }, true, "dk: nb[3] (innermost stride) is 0"},
    });
}

TEST(Validate, NegativeStride) {
    expect_rejected(FATTN_ERR_BAD_STRIDE, {
        {[](Prob &P) { P.v.nb[1] = -P.v.nb[1]; }, false, "v: nb[1] is -"},
    });
}

TEST(Validate, OutputZeroStrideWrittenTwice) {
    Prob P;
    P.o.nb[0] = 0;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_STRIDE, "o: nb[0] is 0 on a dim of size 2", P);
    // The same broadcast stride on an input is legal (k shared across the batch).
    P.build();
    P.k.nb[0] = 0;
    EXPECT_EQ(P.check(fattn::AttnOp::BWD), FATTN_OK);
}

// ------------------------------------------------------------------------- overlap

TEST(Validate, OverlapOutputs) {
    Prob P;
    P.lse.data = P.bo.data();  // lse on top of o
    EXPECT_FAIL(P.fwd(), FATTN_ERR_OVERLAP, "overlaps output", P);
    P.build();
    P.dk = P.dq;  // same memory, shape still that of dk?  make dk a view into dq's buffer
    P.dk = fattn_tensor_contiguous(P.bdq.data() + 8, FATTN_F32, P.B, P.Skv, P.Hkv, P.D);
    P.bdq.resize(size_t(P.B * P.Skv * P.Hkv * P.D + 8));
    P.dq.data = P.bdq.data();
    P.dk.data = P.bdq.data() + 8;
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dq: overlaps output dk", P);
}

TEST(Validate, OverlapOutputWithInput) {
    Prob P;
    P.o = fattn_tensor_contiguous(P.bq.data(), FATTN_F32, P.B, P.Sq, P.Hq, P.Dv);  // o inside q
    EXPECT_FAIL(P.fwd(), FATTN_ERR_OVERLAP, "o: overlaps input q", P);
    P.build();
    P.dv.data = P.bdo.data();  // dv written over dout (sizes differ; extents intersect)
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dv: overlaps input dout", P);
}

TEST(Validate, OverlapByteMisalignedView) {
    // An f16 o shifted by 2 bytes into an f32 lse shares bytes with it even though no element
    // addresses coincide: must be reported. (Views of one dtype cannot be shifted by less than an
    // element any more: data must be aligned to the element size.)
    Prob P;
    P.B = P.Sq = P.Hq = P.Hkv = 1;  // lse [1,1,1,1] needs B = Hq = Sq = 1 to be shape-valid
    P.build();
    for (fattn_tensor *t : {&P.q, &P.k, &P.v, &P.o}) t->dtype = FATTN_F16;
    std::vector<float> buf(size_t(P.Dv) + 2);
    P.lse = fattn_tensor_contiguous(buf.data(), FATTN_F32, 1, 1, 1, 1);
    P.o = fattn_tensor_contiguous(reinterpret_cast<char *>(buf.data()) + 2, FATTN_F16, 1, 1, 1, P.Dv);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_OVERLAP, "overlaps output", P);
}

// q, k, v (and dq, dk, dv) as disjoint interleaved views of fused [B, S, 3, H, D] buffers: legal.
TEST(Validate, FusedQkvViewsAreNotOverlap) {
    Prob P;
    const int64_t B = 2, S = 6, H = 3, D = 8;
    P.B = B; P.Sq = P.Skv = S; P.Hq = P.Hkv = H; P.D = P.Dv = D;
    P.build();
    std::vector<float> qkv(size_t(B * S * 3 * H * D), 0.25f), dqkv(qkv.size(), 0.0f);
    const int64_t sb = S * 3 * H * D, ss = 3 * H * D, sh = D;
    auto view = [&](std::vector<float> &buf, int which) {
        return fattn_tensor_4d(buf.data() + which * H * D, FATTN_F32, B, S, H, D, sb, ss, sh, 1);
    };
    P.q = view(qkv, 0); P.k = view(qkv, 1); P.v = view(qkv, 2);
    P.dq = view(dqkv, 0); P.dk = view(dqkv, 1); P.dv = view(dqkv, 2);
    std::string why;
    EXPECT_EQ(P.check(fattn::AttnOp::FWD, nullptr, &why), FATTN_OK) << why;
    EXPECT_EQ(P.check(fattn::AttnOp::BWD, nullptr, &why), FATTN_OK) << why;
    // Shift dk by one head: it now lands on dq's last head of each token -> overlap.
    P.dk = fattn_tensor_4d(dqkv.data() + (H - 1) * D, FATTN_F32, B, S, H, D, sb, ss, sh, 1);
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dq: overlaps output dk", P);
    // Shift dk by half a head: same strides, no shared element address, but shared elements.
    P.dk = fattn_tensor_4d(dqkv.data() + H * D - D / 2, FATTN_F32, B, S, H, D, sb, ss, sh, 1);
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dq: overlaps output dk", P);
    // An o that is an interleaved neighbour of the inputs in a shared buffer is fine too.
    std::vector<float> big(size_t(B * S * 4 * H * D));
    const int64_t sb4 = S * 4 * H * D, ss4 = 4 * H * D;
    P.q = fattn_tensor_4d(big.data(), FATTN_F32, B, S, H, D, sb4, ss4, sh, 1);
    P.k = fattn_tensor_4d(big.data() + H * D, FATTN_F32, B, S, H, D, sb4, ss4, sh, 1);
    P.v = fattn_tensor_4d(big.data() + 2 * H * D, FATTN_F32, B, S, H, D, sb4, ss4, sh, 1);
    P.o = fattn_tensor_4d(big.data() + 3 * H * D, FATTN_F32, B, S, H, D, sb4, ss4, sh, 1);
    EXPECT_EQ(P.check(fattn::AttnOp::FWD, nullptr, &why), FATTN_OK) << why;
    P.o = fattn_tensor_4d(big.data() + 2 * H * D + 1, FATTN_F32, B, S, H, D, sb4, ss4, sh, 1);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_OVERLAP, "o: overlaps input v", P);
}

// Fused [B, S, H*(2D + Dv)] buffer with D != Dv: v's head stride differs from q's and k's, so the
// views have different layouts; they are still disjoint and must be accepted. A v shifted onto k's
// last head must not.
TEST(Validate, FusedQkvViewsDifferentHeadStrides) {
    Prob P;
    const int64_t B = 2, S = 5, H = 3, D = 8, Dv = 4;
    P.B = B; P.Sq = P.Skv = S; P.Hq = P.Hkv = H; P.D = D; P.Dv = Dv;
    P.build();
    const int64_t ss = H * (2 * D + Dv), sb = S * ss;
    std::vector<float> qkv(size_t(B * sb), 0.5f), dqkv(qkv.size(), 0.0f);
    auto views = [&](std::vector<float> &buf, fattn_tensor *q, fattn_tensor *k, fattn_tensor *v,
                     int64_t v_shift) {
        *q = fattn_tensor_4d(buf.data(), FATTN_F32, B, S, H, D, sb, ss, D, 1);
        *k = fattn_tensor_4d(buf.data() + H * D, FATTN_F32, B, S, H, D, sb, ss, D, 1);
        *v = fattn_tensor_4d(buf.data() + 2 * H * D + v_shift, FATTN_F32, B, S, H, Dv, sb, ss, Dv, 1);
    };
    views(qkv, &P.q, &P.k, &P.v, 0);
    views(dqkv, &P.dq, &P.dk, &P.dv, 0);
    std::string why;
    EXPECT_EQ(P.check(fattn::AttnOp::BWD, nullptr, &why), FATTN_OK) << why;
    views(dqkv, &P.dq, &P.dk, &P.dv, -1);  // dv's first element is dk's last of each token
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "overlaps output dv", P);
}

TEST(Validate, OverlapSavedAndWorkspace) {
    Prob P;
    P.p.algo = FATTN_ALGO_EXACT;
    size_t saved = 0, ws = 0;
    ASSERT_EQ(fattn_attn_saved_size(P.ctx, &P.p, &P.q, &P.k, &P.v, &saved), FATTN_OK);
    ASSERT_EQ(fattn_attn_workspace_size(P.ctx, &P.p, &P.q, &P.k, &P.v, FATTN_DIR_BWD, &ws), FATTN_OK);
    std::vector<char> sv(saved), w(ws + 64);
    // The forward writes `saved`: on top of an input it is an overlap.
    EXPECT_FAIL(fattn_attn_fwd(P.ctx, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, P.bk.data(), nullptr, 0),
                FATTN_ERR_OVERLAP, "saved: overlaps k", P);
    // A caller's workspace on top of an output (checked before its size).
    EXPECT_FAIL(fattn_attn_fwd(P.ctx, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, sv.data(), P.bo.data() + 1,
                               4),
                FATTN_ERR_OVERLAP, "workspace: overlaps o", P);
    EXPECT_FAIL(fattn_attn_bwd(P.ctx, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, sv.data(), &P.dout, &P.dq,
                               &P.dk, &P.dv, sv.data(), saved),
                FATTN_ERR_OVERLAP, "workspace: overlaps saved", P);
    // The backward only reads `saved`: sharing bytes with a gradient it writes is an overlap.
    std::vector<float> big(saved / 4 + P.bdq.size());
    P.dq.data = big.data();
    EXPECT_FAIL(fattn_attn_bwd(P.ctx, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, big.data(), &P.dout,
                               &P.dq, &P.dk, &P.dv, nullptr, 0),
                FATTN_ERR_OVERLAP, "saved: overlaps dq", P);
}

// ------------------------------------------------------------------------- bias

TEST(Validate, BiasShape) {
    Prob P;
    std::vector<float> bias(size_t(P.B * P.Hq * P.Sq * P.Skv));
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, P.B, P.Hq, P.Sq + 1, P.Skv);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: ne[2] (query rows) is 6 but q has 5", P);
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 3, P.Hq, P.Sq, P.Skv);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: ne[0] (batch) is 3, must be 1 or q's 2", P);
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 2, P.Sq, P.Skv);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: ne[1] (heads) is 2, must be 1 or q's 4", P);
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 1, P.Sq, P.Skv - 1);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: ne[3] (keys) is 6 but k has 7", P);
}

TEST(Validate, BiasDtype) {
    Prob P;
    std::vector<float> bias(size_t(P.Sq * P.Skv));
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 1, P.Sq, P.Skv);
    set_raw(P.p.bias.dtype, 5);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: dtype 5 is not f32, f16 or bf16", P);
}

TEST(Validate, BiasBroadcastAccepted) {
    Prob P;
    // A key-padding style bias: one row per batch, broadcast over heads and query rows.
    std::vector<uint16_t> bias(size_t(P.B * P.Skv));
    P.p.bias = fattn_tensor_4d(bias.data(), FATTN_BF16, P.B, 1, P.Sq, P.Skv, P.Skv, 12345, 0, 1);
    fattn::AttnResolved r;
    std::string why;
    ASSERT_EQ(P.check(fattn::AttnOp::BWD, &r, &why), FATTN_OK) << why;
    EXPECT_EQ(r.p.bias, bias.data());
    EXPECT_EQ(r.p.bias_dtype, FATTN_BF16);
    EXPECT_EQ(r.p.bias_sb, P.Skv);
    EXPECT_EQ(r.p.bias_sh, 0);  // size-1 dim normalized to stride 0
    EXPECT_EQ(r.p.bias_si, 0);
    P.p.bias.nb[3] = 2;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_STRIDE, "bias: nb[3] (innermost stride) is 2", P);
}

// ------------------------------------------------------------------------- masks

TEST(Validate, WindowBelowMinusOne) {
    expect_rejected(FATTN_ERR_BAD_MASK, {
        {[](Prob &P) { P.p.window_left = -2; }, false, "window_left: is -2, must be >= -1"},
        {[](Prob &P) { P.p.window_right = -7; }, false, "window_right: is -7"},
    });
}

TEST(Validate, CausalWithRightWindow) {
    expect_rejected(FATTN_ERR_BAD_MASK, {
        {[](Prob &P) { P.p.causal = FATTN_CAUSAL_TOP_LEFT, P.p.window_right = 3; }, false,
         "window_right: is 3 with causal set"},
    });
}

TEST(Validate, CausalWindowAlignMismatch) {
    Prob P;
    P.p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
    P.p.window_left = 2;
    P.p.window_align = FATTN_ALIGN_TOP_LEFT;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_MASK, "window_align: is TOP_LEFT but causal is BOTTOM_RIGHT", P);
    // Without an active window the alignment field is irrelevant.
    P.p.window_left = -1;
    EXPECT_EQ(P.check(fattn::AttnOp::FWD), FATTN_OK);
}

TEST(Validate, MasksNormalized) {
    Prob P;
    P.p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
    P.p.window_left = 3;
    P.p.window_right = 0;
    P.p.window_align = FATTN_ALIGN_BOTTOM_RIGHT;
    fattn::AttnResolved r;
    std::string why;
    ASSERT_EQ(P.check(fattn::AttnOp::FWD, &r, &why), FATTN_OK) << why;
    EXPECT_EQ(r.p.win_left, 3);
    EXPECT_EQ(r.p.win_right, 0);  // causal folds into win_right = 0
    EXPECT_TRUE(r.p.bottom_right);
    P.p = fattn_attn_params_default();
    P.p.window_left = 4;
    P.p.window_right = 1;
    ASSERT_EQ(P.check(fattn::AttnOp::FWD, &r, &why), FATTN_OK) << why;
    EXPECT_EQ(r.p.win_left, 4);
    EXPECT_EQ(r.p.win_right, 1);
    EXPECT_FALSE(r.p.bottom_right);
    P.p = fattn_attn_params_default();
    ASSERT_EQ(P.check(fattn::AttnOp::FWD, &r, &why), FATTN_OK) << why;
    EXPECT_FALSE(r.p.has_mask());
}

// ------------------------------------------------------------------------- varlen

struct Varlen : Prob {
    std::vector<int32_t> cq{0, 3, 3, 8}, ckv{0, 4, 6, 10};
    Varlen() {
        B = 1; Sq = 8; Skv = 10;
        build();
        p.cu_seqlens_q = cq.data();
        p.cu_seqlens_kv = ckv.data();
        p.num_seqs = 3;
    }
};

TEST(Validate, VarlenAccepted) {
    Varlen P;
    fattn::AttnResolved r;
    std::string why;
    ASSERT_EQ(P.check(fattn::AttnOp::BWD, &r, &why), FATTN_OK) << why;
    EXPECT_EQ(r.p.batch, 3);
    EXPECT_EQ(r.p.seqlen_q, 5);   // longest query sequence
    EXPECT_EQ(r.p.seqlen_kv, 4);
    EXPECT_EQ(r.p.total_q, 8);
    EXPECT_EQ(r.p.total_kv, 10);
}

TEST(Validate, VarlenOnlyOneSide) {
    Varlen P;
    P.p.cu_seqlens_kv = nullptr;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens_kv: is NULL but cu_seqlens_q is given", P);
    P.p.cu_seqlens_kv = P.ckv.data();
    P.p.cu_seqlens_q = nullptr;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens_q: is NULL", P);
}

TEST(Validate, VarlenNumSeqs) {
    Varlen P;
    P.p.num_seqs = 0;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "num_seqs: is 0, must be >= 1", P);
}

TEST(Validate, VarlenBatchMustBeOne) {
    Varlen P;
    P.B = 2;
    P.build();
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "q: ne[0] (batch) is 2 but varlen", P);
}

TEST(Validate, VarlenContents) {
    Varlen P;
    P.cq[0] = 1;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens_q[0] is 1, must be 0", P);
    P.cq = {0, 5, 3, 8};
    P.p.cu_seqlens_q = P.cq.data();
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens_q[2] is 3 < cu_seqlens_q[1] = 5", P);
    P.cq = {0, 3, 3, 8};
    P.p.cu_seqlens_q = P.cq.data();
    P.ckv[3] = 9;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens_kv[3] (last) is 9 but k has ne[1] = 10", P);
    P.ckv[3] = 10;
    P.p.max_seqlen_q = 4;  // the longest query sequence is 5
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_SEQLENS, "max_seqlen_q: is 4", P);
}

TEST(Validate, VarlenBiasIsPacked) {
    Varlen P;
    std::vector<float> bias(size_t(P.Sq * P.Skv));
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 1, P.Sq, P.Skv);
    EXPECT_EQ(P.check(fattn::AttnOp::FWD), FATTN_OK);
    P.p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 1, 5, 4);  // per-sequence: wrong
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_BIAS, "bias: ne[2] (query rows) is 5 but q has 8", P);
}

// ------------------------------------------------------------------------- zero size, scale

TEST(Validate, ZeroSizeIsNoOp) {
    Prob P;
    P.B = 0;
    P.build();
    for (fattn_tensor *t : {&P.q, &P.k, &P.v, &P.o, &P.lse, &P.dout, &P.dq, &P.dk, &P.dv})
        t->data = nullptr;  // nothing may be touched
    EXPECT_EQ(P.supports(), FATTN_OK) << P.err();
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
    size_t ws = 123;
    EXPECT_EQ(fattn_attn_workspace_size(P.ctx, &P.p, &P.q, &P.k, &P.v, FATTN_DIR_BWD, &ws), FATTN_OK);
    EXPECT_EQ(ws, 0u);
    // No heads at all, and no query rows in the forward: also no-ops.
    P.B = 2;
    P.Hq = P.Hkv = 0;
    P.build();
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
    P.Hq = 4;
    P.Hkv = 2;
    P.Sq = 0;
    P.build();
    P.o.data = P.lse.data = nullptr;
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
}

// Sq > 0 with Skv = 0: every row is fully masked, so o = 0, lse = -inf, dq = 0 (defined, not
// left untouched). Sq = 0 with Skv > 0: no query sees any key, so dk = dv = 0.
TEST(Validate, EmptySideOutputsDefined) {
    Prob P;
    P.Skv = 0;
    P.build();
    std::fill(P.bo.begin(), P.bo.end(), NAN);
    std::fill(P.blse.begin(), P.blse.end(), NAN);
    std::fill(P.bdq.begin(), P.bdq.end(), NAN);
    ASSERT_EQ(P.fwd(), FATTN_OK) << P.err();
    for (float x : P.bo) EXPECT_EQ(x, 0.0f);
    for (float x : P.blse) EXPECT_TRUE(std::isinf(x) && x < 0);
    ASSERT_EQ(P.bwd(), FATTN_OK) << P.err();
    for (float x : P.bdq) EXPECT_EQ(x, 0.0f);
    P.Skv = 7;
    P.Sq = 0;
    P.build();
    std::fill(P.bdk.begin(), P.bdk.end(), NAN);
    std::fill(P.bdv.begin(), P.bdv.end(), NAN);
    ASSERT_EQ(P.bwd(), FATTN_OK) << P.err();
    for (float x : P.bdk) EXPECT_EQ(x, 0.0f);
    for (float x : P.bdv) EXPECT_EQ(x, 0.0f);
}

TEST(Validate, ScaleNotFinite) {
    expect_rejected(FATTN_ERR_BAD_VALUE, {
        {[](Prob &P) { P.p.scale = NAN; }, false, "scale: is nan"},
        {[](Prob &P) { P.p.scale = INFINITY; }, false, "scale: is inf"},
    });
}

TEST(Validate, ScaleAndPrecResolved) {
    Prob P;
    fattn::AttnResolved r;
    std::string why;
    ASSERT_EQ(P.check(fattn::AttnOp::FWD, &r, &why), FATTN_OK) << why;
    EXPECT_FLOAT_EQ(r.p.scale, 1.0f / std::sqrt(8.0f));
    EXPECT_EQ(r.p.prec, FATTN_PREC_F32);  // AUTO on a CPU context
    EXPECT_EQ(r.p.nthreads, 2);
    P.p.scale = -0.5f;
    ASSERT_EQ(P.check(fattn::AttnOp::FWD, &r, &why), FATTN_OK) << why;
    EXPECT_EQ(r.p.scale, -0.5f);
}

// ------------------------------------------------------------------------- backend selection

TEST(Validate, BackendRejectsTf32OnCpu) {
    Prob P;
    P.p.prec = FATTN_PREC_TF32;
    char why[256];
    EXPECT_EQ(fattn_attn_supports(P.ctx, &P.p, &P.q, &P.k, &P.v, why, sizeof why),
              FATTN_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(why).find("tf32"), std::string::npos) << why;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_UNSUPPORTED, "tf32", P);
}

TEST(Validate, BackendHeadDimLimit) {
    Prob P;
    P.D = 4096;
    P.build();
    char why[256];
    EXPECT_EQ(fattn_attn_supports(P.ctx, &P.p, &P.q, &P.k, &P.v, why, sizeof why),
              FATTN_ERR_BAD_HEAD_DIM);
    EXPECT_NE(std::string(why).find("cpu"), std::string::npos) << why;
}

TEST(Validate, SavedRequiredForExact) {
    Prob P;
    P.p.algo = FATTN_ALGO_EXACT;
    size_t saved = 0;
    ASSERT_EQ(fattn_attn_saved_size(P.ctx, &P.p, &P.q, &P.k, &P.v, &saved), FATTN_OK);
    ASSERT_GT(saved, 0u);
    EXPECT_FAIL(P.fwd(), FATTN_ERR_NULL_POINTER, "saved: is NULL", P);
    EXPECT_FAIL(P.bwd(), FATTN_ERR_NULL_POINTER, "saved: is NULL", P);
}

}  // namespace
