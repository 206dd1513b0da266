// test_dbias_views.cpp — hostile dbias views through the public C API (fattn_attn_bwd_ex and
// the _ex queries): each is refused with the status of the broken rule and a message that names
// dbias (and the other view when two collide), never a crash, a write outside the view or OK.
// Run: fattn-unit --gtest_filter='DbiasViews*'
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fattn/fattn.h"
#include "support/expect_fail.h"

namespace {

// A small valid problem (f32, GQA 4/2, Sq != Skv) with a [1, Hq, Sq, Skv] bias (dbias
// [1, Hq, Sq, Skv]), forward already run; every buffer with room after its view.
struct Prob {
    int64_t B = 2, Sq = 5, Skv = 7, Hq = 4, Hkv = 2, D = 8, Dv = 16;
    fattn_ctx_t *c = nullptr;
    std::vector<float> bq, bk, bv, bo, bl, bdo, bdq, bdk, bdv, bb, bdb;
    fattn_tensor q, k, v, o, lse, dout, dq, dk, dv, dbias;
    fattn_attn_params p = fattn_attn_params_default();
    static fattn_tensor make(std::vector<float> &b, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
        b.assign(size_t(n0 * n1 * n2 * n3) + 256, 0.25f);  // room for dbias laid over it
        return fattn_tensor_contiguous(b.data(), FATTN_F32, n0, n1, n2, n3);
    }
    Prob() {
        EXPECT_EQ(fattn_ctx_init_cpu(1, &c), FATTN_OK);
        q = make(bq, B, Sq, Hq, D), k = make(bk, B, Skv, Hkv, D), v = make(bv, B, Skv, Hkv, Dv);
        o = make(bo, B, Sq, Hq, Dv), lse = make(bl, B, Hq, Sq, 1), dout = make(bdo, B, Sq, Hq, Dv);
        dq = make(bdq, B, Sq, Hq, D), dk = make(bdk, B, Skv, Hkv, D), dv = make(bdv, B, Skv, Hkv, Dv);
        p.bias = make(bb, 1, Hq, Sq, Skv);
        dbias = make(bdb, 1, Hq, Sq, Skv);
        EXPECT_EQ(fattn_attn_fwd(c, &p, &q, &k, &v, &o, &lse, nullptr, nullptr, 0), FATTN_OK) << err();
    }
    ~Prob() { fattn_ctx_free(c); }
    std::string err() const { return fattn_ctx_last_error(c); }
    fattn_status bwd() {
        return fattn_attn_bwd_ex(c, &p, &q, &k, &v, &o, &lse, nullptr, &dout, &dq, &dk, &dv, &dbias, nullptr, 0);
    }
    // dbias placed over another view's first element (its shape unchanged)
    void over(const fattn_tensor &t) { dbias.data = t.data; }
};

TEST(DbiasViews, ValidBaselineRuns) {
    Prob P;
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
}

TEST(DbiasViews, AliasingAnInputRefused) {
    // dbias written in place of the bias (a caller reusing the bias's memory for its gradient)
    {
        Prob P;
        P.over(P.p.bias);
        EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dbias", P);
    }
    const char *names[] = {"q", "k", "v", "o", "lse", "dout"};
    for (int i = 0; i < 6; ++i) {
        Prob P;
        const fattn_tensor *in[] = {&P.q, &P.k, &P.v, &P.o, &P.lse, &P.dout};
        P.over(*in[i]);
        EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dbias", P);
        EXPECT_NE(P.err().find(names[i]), std::string::npos) << names[i] << ": " << P.err();
    }
}

TEST(DbiasViews, AliasingAnotherOutputRefused) {
    const char *names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
        Prob P;
        const fattn_tensor *out[] = {&P.dq, &P.dk, &P.dv};
        P.over(*out[i]);
        EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "dbias", P);
        EXPECT_NE(P.err().find(names[i]), std::string::npos) << names[i] << ": " << P.err();
    }
}

TEST(DbiasViews, SelfOverlapRefused) {
    Prob P;
    P.dbias.nb[2] = 1;  // rows overlap each other's keys
    EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dbias: the view overlaps itself", P);
    Prob Q;
    Q.dbias.nb[1] = 0;  // heads share one slice
    EXPECT_FAIL(Q.bwd(), FATTN_ERR_BAD_STRIDE, "dbias", Q);
}

TEST(DbiasViews, WrongShapeNamesTheDim) {
    Prob P;
    P.dbias.ne[1] = 1;  // the bias does not broadcast heads
    EXPECT_FAIL(P.bwd(), FATTN_ERR_SHAPE_MISMATCH, "dbias: ne[1] (heads) is 1, must be 4", P);
    Prob Q;
    Q.dbias = fattn_tensor_contiguous(Q.bdb.data(), FATTN_F32, 1, Q.Hq, 1, Q.Skv);  // query rows summed: no
    EXPECT_FAIL(Q.bwd(), FATTN_ERR_SHAPE_MISMATCH, "dbias: ne[2] (query rows) is 1, must be 5", Q);
    Prob R;
    R.dbias.ne[0] = -1;
    EXPECT_FAIL(R.bwd(), FATTN_ERR_SHAPE_MISMATCH, "dbias", R);
    Prob S;  // a bias broadcasting query rows by stride 0: dbias must sum them
    S.p.bias.nb[2] = 0;
    EXPECT_FAIL(S.bwd(), FATTN_ERR_SHAPE_MISMATCH, "dbias: ne[2] (query rows) is 5, must be 1", S);
}

TEST(DbiasViews, WrongDtypeRefused) {
    for (fattn_dtype dt : {FATTN_F16, FATTN_BF16}) {
        Prob P;
        P.dbias.dtype = dt;
        EXPECT_FAIL(P.bwd(), FATTN_ERR_DTYPE_MISMATCH, "dbias: dtype is", P);
        EXPECT_NE(P.err().find("must be f32"), std::string::npos) << P.err();
    }
    Prob P;
    const int raw = 77;  // out of the enum's range, as a C caller may store it
    std::memcpy(&P.dbias.dtype, &raw, sizeof raw);
    EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_VALUE, "dbias: dtype", P);
}

TEST(DbiasViews, BadStridesAndPointersRefused) {
    {
        Prob P;
        P.dbias.nb[3] = 2;  // keys not unit-stride
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dbias", P);
    }
    {
        Prob P;
        P.dbias.nb[0] = int64_t(1) << 62, P.dbias.ne[0] = 1;  // extent 1: any stride is fine
        EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
        P.dbias.nb[1] = INT64_MAX;  // the span overflows
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dbias", P);
    }
    {
        Prob P;
        P.dbias.nb[2] = -P.Skv;  // negative strides address memory before data
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dbias", P);
    }
    {
        Prob P;
        P.dbias.data = reinterpret_cast<char *>(P.bdb.data()) + 2;
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_VALUE, "dbias: data pointer is not aligned", P);
    }
}

// dbias NULL (or data NULL) means "not requested" (fattn.h): exactly the plain backward, never
// a write through it. The request bit without a bias is refused by every query naming dbias.
TEST(DbiasViews, NullAndFlagWithoutBias) {
    Prob P;
    P.dbias.data = nullptr;
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
    EXPECT_EQ(fattn_attn_bwd_ex(P.c, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, nullptr, &P.dout, &P.dq, &P.dk, &P.dv,
                                nullptr, nullptr, 0),
              FATTN_OK)
        << P.err();
    P.p.bias = fattn_tensor_none();
    size_t w = 0;
    fattn_attn_memory_info m{};
    char why[256] = {0};
    EXPECT_FAIL(fattn_attn_supports_ex(P.c, &P.p, &P.q, &P.k, &P.v, FATTN_ATTN_WANT_DBIAS, why, sizeof why),
                FATTN_ERR_BAD_BIAS, "dbias", P);
    EXPECT_NE(std::string(why).find("dbias"), std::string::npos) << why;
    EXPECT_FAIL(fattn_attn_workspace_size_ex(P.c, &P.p, &P.q, &P.k, &P.v, FATTN_ATTN_WANT_DBIAS, FATTN_DIR_BWD, &w),
                FATTN_ERR_BAD_BIAS, "dbias", P);
    EXPECT_FAIL(fattn_attn_memory_ex(P.c, &P.p, &P.q, &P.k, &P.v, FATTN_ATTN_WANT_DBIAS, &m), FATTN_ERR_BAD_BIAS,
                "dbias", P);
    // and a dbias with data but no bias, through the backward
    P.dbias.data = P.bdb.data();
    EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_BIAS, "dbias", P);
}

// cu_seqlens living inside dbias: the offsets would be overwritten while being read.
TEST(DbiasViews, CuSeqlensInsideDbiasRefused) {
    Prob P;
    std::vector<int32_t> ckv{0, 3, 7};
    const int32_t cq[] = {0, 2, 5};
    P.B = 1;
    P.q = Prob::make(P.bq, 1, P.Sq, P.Hq, P.D), P.k = Prob::make(P.bk, 1, P.Skv, P.Hkv, P.D);
    P.v = Prob::make(P.bv, 1, P.Skv, P.Hkv, P.Dv), P.o = Prob::make(P.bo, 1, P.Sq, P.Hq, P.Dv);
    P.lse = Prob::make(P.bl, 1, P.Hq, P.Sq, 1), P.dout = Prob::make(P.bdo, 1, P.Sq, P.Hq, P.Dv);
    P.dq = Prob::make(P.bdq, 1, P.Sq, P.Hq, P.D), P.dk = Prob::make(P.bdk, 1, P.Skv, P.Hkv, P.D);
    P.dv = Prob::make(P.bdv, 1, P.Skv, P.Hkv, P.Dv);
    P.p.cu_seqlens_kv = ckv.data();
    P.p.cu_seqlens_q = cq;
    P.p.num_seqs = 2;
    ASSERT_EQ(fattn_attn_fwd(P.c, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse, nullptr, nullptr, 0), FATTN_OK) << P.err();
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
    std::memcpy(P.bdb.data(), cq, sizeof cq);
    P.p.cu_seqlens_q = reinterpret_cast<const int32_t *>(P.bdb.data());
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "cu_seqlens_q: overlaps output dbias", P);
}

}  // namespace
