// test_robust.cpp — hostile inputs of issue 9 (§1 self-aliasing outputs, §2 crashes and wrapped
// sizes), one test per finding, through the public C API: each would crash, return OK, or report
// a wrapped size on the code before the fix. Both families are exercised where the rule is a
// shared one (src/core/view_check.cpp), and their statuses and messages must agree.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/view_check.h"
#include "fattn/fattn.h"
#include "support/expect_fail.h"

extern "C" int fattn_test_enum_abuse(fattn_ctx_t *ctx, int out[15]);  // robust_enums.c
extern "C" int fattn_test_bad_cuda_family(fattn_ctx_t *ctx);            // robust_enums.c

namespace {

constexpr int64_t kP62 = int64_t(1) << 62;

template <class E>
void set_raw(E &e, int v) {  // an out-of-range enum as a C caller stores it, without UB here
    std::memcpy(&e, &v, sizeof e);
}

struct Ctx {
    fattn_ctx_t *c = nullptr;
    explicit Ctx(int nthreads = 1) { EXPECT_EQ(fattn_ctx_init_cpu(nthreads, &c), FATTN_OK); }
    ~Ctx() { fattn_ctx_free(c); }
    std::string err() const { return fattn_ctx_last_error(c); }
};

// A small valid softmax problem (f32, GQA 4/2, Sq != Skv, Dv != D), separate buffers.
struct Attn : Ctx {
    int64_t B = 2, Sq = 5, Skv = 7, Hq = 4, Hkv = 2, D = 8, Dv = 16;
    std::vector<float> bq, bk, bv, bo, bl, bdo, bdq, bdk, bdv;
    fattn_tensor q, k, v, o, lse, dout, dq, dk, dv;
    fattn_attn_params p = fattn_attn_params_default();
    static fattn_tensor make(std::vector<float> &b, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
        b.assign(size_t(n0 * n1 * n2 * n3) + 64, 0.25f);
        return fattn_tensor_contiguous(b.data(), FATTN_F32, n0, n1, n2, n3);
    }
    Attn() { build(); }
    void build() {
        q = make(bq, B, Sq, Hq, D), k = make(bk, B, Skv, Hkv, D), v = make(bv, B, Skv, Hkv, Dv);
        o = make(bo, B, Sq, Hq, Dv), lse = make(bl, B, Hq, Sq, 1), dout = make(bdo, B, Sq, Hq, Dv);
        dq = make(bdq, B, Sq, Hq, D), dk = make(bdk, B, Skv, Hkv, D), dv = make(bdv, B, Skv, Hkv, Dv);
    }
    fattn_status fwd() { return fattn_attn_fwd(c, &p, &q, &k, &v, &o, &lse, nullptr, nullptr, 0); }
    fattn_status bwd() {
        return fattn_attn_bwd(c, &p, &q, &k, &v, &o, &lse, nullptr, &dout, &dq, &dk, &dv, nullptr, 0);
    }
};

// A small valid PaTH problem (f32, T = 70, GQA 4/2, K = 32, V = 16), no gate.
struct Path : Ctx {
    int64_t B = 1, T = 70, HQ = 4, H = 2, K = 32, V = 16;
    std::vector<float> bq, bk, bv, bw, bb, bo, bl, bdo, bdq, bdk, bdv, bdw, bdb;
    fattn_tensor q, k, v, w, beta, o, lse, dout, dq, dk, dv, dw, dbeta;
    fattn_path_params p = fattn_path_params_default();
    Path() {
        q = Attn::make(bq, B, T, HQ, K), k = Attn::make(bk, B, T, H, K), v = Attn::make(bv, B, T, H, V);
        w = Attn::make(bw, B, T, H, K), beta = Attn::make(bb, B, T, H, 1);
        for (float &x : bw) x = 0.f;
        for (int64_t i = 0; i < B * T * H; ++i) bw[size_t(i * K)] = 1.f;  // |w| = 1
        o = Attn::make(bo, B, T, HQ, V), lse = Attn::make(bl, B, HQ, T, 1);
        dout = Attn::make(bdo, B, T, HQ, V), dq = Attn::make(bdq, B, T, HQ, K);
        dk = Attn::make(bdk, B, T, H, K), dv = Attn::make(bdv, B, T, H, V);
        dw = Attn::make(bdw, B, T, H, K), dbeta = Attn::make(bdb, B, T, H, 1);
    }
    fattn_status fwd() { return fattn_path_fwd(c, &p, &q, &k, &v, &w, &beta, nullptr, &o, &lse, nullptr, 0); }
    fattn_status bwd() {
        return fattn_path_bwd(c, &p, &q, &k, &v, &w, &beta, nullptr, &o, &lse, &dout, &dq, &dk, &dv, &dw,
                              &dbeta, nullptr, nullptr, 0);
    }
    fattn_status supports() {
        return fattn_path_supports(c, &p, &q, &k, &v, &w, &beta, nullptr, nullptr, 0);
    }
};

// ---------------------------------------------------------------- §1 self-aliasing outputs

TEST(Robust, SelfAliasingOutputsRefused) {
    {  // o with nb[1] = 1 while Dv = 16: tokens overlap each other's head-dim rows
        Attn P;
        P.o.nb[1] = 1;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_STRIDE, "o: the view overlaps itself (nb[1] = 1", P);
    }
    {  // dk with nb[2] = 1
        Attn P;
        P.dk.nb[2] = 1;
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dk: the view overlaps itself (nb[2] = 1", P);
    }
    {  // lse with nb[1] = 1 (its innermost dim is the query index)
        Attn P;
        P.lse.nb[1] = 1;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_STRIDE, "lse: the view overlaps itself (nb[1] = 1", P);
    }
    {  // PaTH dq: the same rule, the same message
        Path P;
        P.dq.nb[1] = 1;
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_STRIDE, "dq: the view overlaps itself (nb[1] = 1", P);
    }
}

// A layout that is not nested (a stride smaller than the span of the dims inside it) but still
// addresses every element once is legal: offsets 3·s + 2·h for s < 2, h < 3 are all distinct.
TEST(Robust, InterleavedDisjointOutputAccepted) {
    Attn P;
    P.B = 1, P.Sq = 2, P.Hq = 3, P.Hkv = 1, P.Dv = 1;
    P.build();
    P.o = fattn_tensor_4d(P.bo.data(), FATTN_F32, 1, 2, 3, 1, 0, 3, 2, 1);
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
    P.o.nb[1] = 2;  // 2·s + 2·h: (s 1, h 0) and (s 0, h 1) coincide
    EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_STRIDE, "o: the view overlaps itself", P);
}

// ---------------------------------------------------------------- §2 sizes

// numel() used to wrap: 2 × 2^62 × 16 elements "= 0", so a NULL o passed and the forward wrote
// through it; with B = 2, Sq = 1 the call returned OK having written nothing.
TEST(Robust, ElementCountOverflowRefused) {
    Ctx C;
    fattn_attn_params p = fattn_attn_params_default();
    std::vector<float> small(64, 0.5f);
    for (int64_t b : {1, 2}) {
        const int64_t sq = b == 1 ? 2 : 1;
        fattn_tensor q = fattn_tensor_4d(small.data(), FATTN_F32, b, sq, kP62, 16, 0, 0, 0, 1);
        fattn_tensor k = fattn_tensor_4d(small.data(), FATTN_F32, b, 3, 1, 16, 0, 0, 0, 1);
        fattn_tensor o = fattn_tensor_4d(nullptr, FATTN_F32, b, sq, kP62, 16, 0, 0, 0, 1);
        fattn_tensor lse = fattn_tensor_4d(nullptr, FATTN_F32, b, kP62, sq, 1, 0, 0, 1, 1);
        EXPECT_FAIL(fattn_attn_fwd(C.c, &p, &q, &k, &k, &o, &lse, nullptr, nullptr, 0), FATTN_ERR_BAD_VALUE,
                    "q: [", C);
        EXPECT_NE(C.err().find("more than 2^63 bytes"), std::string::npos) << C.err();
        size_t ws = 0;
        EXPECT_EQ(fattn_attn_workspace_size(C.c, &p, &q, &k, &k, FATTN_DIR_BWD, &ws), FATTN_ERR_BAD_VALUE);
    }
}

// Sq = Skv = 2^58 broadcast views (legal: 2^62 bytes of f16 dq) used to report 124,992 bytes of
// workspace. The sizes must cover at least the f32 dQ partial (one float per dq element) and the
// model's peaks at least the outputs: saturate, never wrap.
TEST(Robust, WorkspaceAndMemoryNeverWrap) {
    Ctx C;
    const int64_t S = int64_t(1) << 58;
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_4d(nullptr, FATTN_F16, 1, S, 1, 8, 0, 0, 0, 1);
    size_t ws = 0;
    ASSERT_EQ(fattn_attn_workspace_size(C.c, &p, &q, &q, &q, FATTN_DIR_BWD, &ws), FATTN_OK) << C.err();
    EXPECT_GE(ws, uint64_t(S) * 8 * 4);
    fattn_attn_memory_info m;
    ASSERT_EQ(fattn_attn_memory(C.c, &p, &q, &q, &q, &m), FATTN_OK) << C.err();
    EXPECT_GE(m.bwd_workspace_bytes, ws);
    EXPECT_GE(m.saved_bytes, uint64_t(S) * 8 * 2);  // o alone
    EXPECT_GE(m.bwd_peak_bytes, m.bwd_workspace_bytes);
    // With a broadcast bias the tile map (Sq/64 x Skv/64 bytes = 2^104) cannot be represented.
    p.bias = fattn_tensor_4d(nullptr, FATTN_F32, 1, 1, S, S, 0, 0, 0, 1);
    float one = 0.f;
    p.bias.data = &one;
    ASSERT_EQ(fattn_attn_workspace_size(C.c, &p, &q, &q, &q, FATTN_DIR_FWD, &ws), FATTN_OK) << C.err();
    EXPECT_EQ(ws, SIZE_MAX);
}

// cu_seqlens_q inside lse crashed the forward (it rewrote the offsets while reading them).
TEST(Robust, CuSeqlensInsideAnOutputRefused) {
    Attn P;
    P.B = 1, P.Sq = 8, P.Skv = 10;
    P.build();
    std::vector<int32_t> ckv{0, 4, 10};
    const int32_t cq[] = {0, 3, 8};
    std::memcpy(P.bl.data(), cq, sizeof cq);  // the offsets live in lse's first three floats
    P.p.cu_seqlens_q = reinterpret_cast<const int32_t *>(P.bl.data());
    P.p.cu_seqlens_kv = ckv.data();
    P.p.num_seqs = 2;
    EXPECT_FAIL(P.fwd(), FATTN_ERR_OVERLAP, "cu_seqlens_q: overlaps output lse", P);
    P.p.cu_seqlens_q = reinterpret_cast<const int32_t *>(P.bdq.data());  // a bwd output
    std::memcpy(P.bdq.data(), cq, sizeof cq);
    EXPECT_FAIL(P.bwd(), FATTN_ERR_OVERLAP, "cu_seqlens_q: overlaps output dq", P);
    {  // PaTH: the same rule
        Path Q;
        std::memcpy(Q.bo.data(), cq, sizeof cq);
        const int32_t cu[] = {0, 30, 70};
        std::memcpy(Q.bo.data(), cu, sizeof cu);
        Q.p.cu_seqlens = reinterpret_cast<const int32_t *>(Q.bo.data());
        Q.p.num_seqs = 2;
        EXPECT_FAIL(Q.fwd(), FATTN_ERR_OVERLAP, "cu_seqlens: overlaps output o", Q);
    }
}

TEST(Robust, PathNegativeHeadsRefused) {
    Path P;
    P.q.ne[2] = 0;
    P.k.ne[2] = P.v.ne[2] = P.w.ne[2] = P.beta.ne[2] = -5;
    EXPECT_FAIL(P.supports(), FATTN_ERR_SHAPE_MISMATCH, "k: ne[2] (heads) is -5, must not be negative", P);
    fattn_path_memory_info m;
    EXPECT_NE(fattn_path_memory(P.c, &P.p, &P.q, &P.k, &P.v, &P.w, &P.beta, nullptr, &m), FATTN_OK);
}

// The same broken view gives the same status and message in both families.
TEST(Robust, FamiliesAgreeOnSharedRules) {
    Attn A;
    Path P;
    A.q.nb[1] = P.q.nb[1] = kP62;  // the view spans more than 2^63 bytes
    EXPECT_FAIL(fattn_attn_supports(A.c, &A.p, &A.q, &A.k, &A.v, nullptr, 0), FATTN_ERR_BAD_STRIDE,
                "q: the view spans more than 2^63 bytes", A);
    EXPECT_FAIL(P.supports(), FATTN_ERR_BAD_STRIDE, "q: the view spans more than 2^63 bytes", P);
    EXPECT_EQ(A.err(), P.err());
    Attn A2;
    Path P2;
    set_raw(A2.k.dtype, 7);
    set_raw(P2.k.dtype, 7);
    EXPECT_FAIL(A2.fwd(), FATTN_ERR_BAD_VALUE, "k: dtype 7 is not a fattn_dtype", A2);
    EXPECT_FAIL(P2.fwd(), FATTN_ERR_BAD_VALUE, "k: dtype 7 is not a fattn_dtype", P2);
    Attn A3;
    Path P3;
    A3.o.nb[2] = 0, P3.o.nb[2] = 0;
    EXPECT_FAIL(A3.fwd(), FATTN_ERR_BAD_STRIDE, "o: nb[2] is 0 on a dim of size 4", A3);
    EXPECT_FAIL(P3.fwd(), FATTN_ERR_BAD_STRIDE, "o: nb[2] is 0 on a dim of size 4", P3);
}

// T = 2^40 (a size query: no data) reported history bytes above the total; B = 2^40 tried to
// allocate 8 TiB of per-sequence bases. Both must answer, without wrapping or allocating.
TEST(Robust, PathSizeQueriesOfHugeShapes) {
    Ctx C;
    fattn_path_params p = fattn_path_params_default();
    for (int64_t big_b : {0, 1}) {
        const int64_t B = big_b ? int64_t(1) << 40 : 1, T = big_b ? 1 : int64_t(1) << 40;
        fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, B, T, 1, 16);
        fattn_tensor beta = fattn_tensor_contiguous(nullptr, FATTN_F32, B, T, 1, 1);
        fattn_path_workspace_info ws;
        ASSERT_EQ(fattn_path_workspace_size(C.c, &p, &q, &q, &q, &q, &beta, nullptr, FATTN_DIR_BWD, &ws),
                  FATTN_OK)
            << C.err();
        EXPECT_LE(ws.history_bytes, ws.total_bytes);
        EXPECT_GE(ws.total_bytes, uint64_t(B) * uint64_t(T) * 16 * 4);  // at least one [rows, H, K] f32
        fattn_path_memory_info m;
        ASSERT_EQ(fattn_path_memory(C.c, &p, &q, &q, &q, &q, &beta, nullptr, &m), FATTN_OK) << C.err();
        EXPECT_LE(m.history_packed_bytes, m.bwd_workspace_bytes);
        EXPECT_GE(m.bwd_peak_bytes, m.bwd_workspace_bytes);
        EXPECT_GE(m.inputs_bytes, uint64_t(B) * uint64_t(T) * 16 * 4 * 4);
    }
}

// ---------------------------------------------------------------- §2 enums, threads, alignment

// Out-of-range enum values are reported, never loaded as the enum type (the sanitizer build
// halts on such a load), and PaTH's bad dtype is BAD_VALUE as softmax attention's is.
TEST(Robust, EnumValuesOutOfRange) {
    Ctx C;
    int out[15];
    ASSERT_EQ(fattn_test_enum_abuse(C.c, out), 15);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], 1) << "value function " << i;
    const int want[] = {FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE,
                        FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE, FATTN_ERR_BAD_VALUE,
                        FATTN_ERR_BAD_VALUE};
    for (int i = 5; i < 14; ++i) EXPECT_EQ(out[i], want[i - 5]) << "status call " << i;
    EXPECT_EQ(out[14], 1);
}

TEST(Robust, AbsurdThreadCountsRefused) {
    fattn_ctx_t *ctx = reinterpret_cast<fattn_ctx_t *>(&ctx);
    EXPECT_EQ(fattn_ctx_init_cpu(INT_MAX, &ctx), FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(fattn_ctx_last_error(nullptr)).find("nthreads: 2147483647"), std::string::npos)
        << fattn_ctx_last_error(nullptr);
    Ctx C(2);
    EXPECT_EQ(fattn_ctx_set_nthreads(C.c, INT_MAX), FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(fattn_ctx_nthreads(C.c), 2);
    // The most a context takes: per-thread scratch of a small call is capped by its task count.
    Ctx many(1024);
    Attn P;
    size_t ws1 = 0, wsn = 0;
    for (fattn_dir dir : {FATTN_DIR_FWD, FATTN_DIR_BWD}) {
        ASSERT_EQ(fattn_attn_workspace_size(P.c, &P.p, &P.q, &P.k, &P.v, dir, &ws1), FATTN_OK);
        ASSERT_EQ(fattn_attn_workspace_size(many.c, &P.p, &P.q, &P.k, &P.v, dir, &wsn), FATTN_OK);
        EXPECT_LE(wsn, 16 * ws1) << "dir " << dir;  // a few tasks, not 1024 slots
    }
    std::swap(P.c, many.c);  // run the small problem on the 1024-thread context
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
    EXPECT_EQ(P.bwd(), FATTN_OK) << P.err();
    std::swap(P.c, many.c);
}

// Last errors are per thread: a thread reads its own failure on a shared context, never
// another's (one string per context was a data race under TSan).
TEST(Robust, LastErrorIsPerThread) {
    Attn P;
    Attn bad_q, bad_k;
    bad_q.q.nb[3] = 2;
    bad_k.k.nb[3] = 3;
    std::string mine, theirs;
    EXPECT_EQ(fattn_attn_supports(P.c, &P.p, &bad_q.q, &P.k, &P.v, nullptr, 0), FATTN_ERR_BAD_STRIDE);
    std::thread([&] {
        EXPECT_EQ(fattn_attn_supports(P.c, &P.p, &P.q, &bad_k.k, &P.v, nullptr, 0), FATTN_ERR_BAD_STRIDE);
        theirs = fattn_ctx_last_error(P.c);
    }).join();
    mine = fattn_ctx_last_error(P.c);
    EXPECT_EQ(mine.rfind("q: nb[3]", 0), 0u) << mine;
    EXPECT_EQ(theirs.rfind("k: nb[3]", 0), 0u) << theirs;
    // Concurrent failing calls on one context: each thread always reads its own message.
    std::vector<std::thread> ts;
    std::vector<int> wrong(4, 0);
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            Attn mine_view;
            mine_view.q.nb[3] = 2 + t;
            const std::string want = "q: nb[3] (innermost stride) is " + std::to_string(2 + t);
            for (int i = 0; i < 200; ++i) {
                fattn_attn_supports(P.c, &P.p, &mine_view.q, &P.k, &P.v, nullptr, 0);
                if (std::string(fattn_ctx_last_error(P.c)).rfind(want, 0) != 0) ++wrong[size_t(t)];
            }
        });
    for (auto &t : ts) t.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[size_t(t)], 0) << "thread " << t;
}

// Data must be aligned to its element size (UBSan flagged misaligned loads on the CPU path).
TEST(Robust, MisalignedDataRefused) {
    {
        Attn P;
        P.q.data = reinterpret_cast<char *>(P.bq.data()) + 2;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "q: data pointer is not aligned to its 4-byte f32", P);
    }
    {  // f16 needs 2 bytes: an odd address is refused, a 2-byte-aligned one is fine
        Attn P;
        for (fattn_tensor *t : {&P.q, &P.k, &P.v, &P.o}) t->dtype = FATTN_F16;
        P.v.data = reinterpret_cast<char *>(P.bv.data()) + 2;
        EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
        P.v.data = reinterpret_cast<char *>(P.bv.data()) + 1;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "v: data pointer is not aligned to its 2-byte f16", P);
    }
    {  // the bias, the cu_seqlens and EXACT's saved buffer too
        Attn P;
        std::vector<float> bias(size_t(P.B * P.Hq * P.Sq * P.Skv) + 1, 0.f);
        P.p.bias = fattn_tensor_4d(reinterpret_cast<char *>(bias.data()) + 1, FATTN_F32, P.B, P.Hq, P.Sq,
                                   P.Skv, P.Hq * P.Sq * P.Skv, P.Sq * P.Skv, P.Skv, 1);
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "bias: data pointer is not aligned", P);
        P.p = fattn_attn_params_default();
        P.B = 1;
        P.build();
        std::vector<int32_t> cu(8, 0);
        const int32_t cq[] = {0, 5}, ckv[] = {0, 7};
        std::memcpy(reinterpret_cast<char *>(cu.data()) + 2, cq, sizeof cq);
        P.p.cu_seqlens_q = reinterpret_cast<const int32_t *>(reinterpret_cast<char *>(cu.data()) + 2);
        P.p.cu_seqlens_kv = ckv;
        P.p.num_seqs = 1;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "cu_seqlens_q: pointer is not 4-byte aligned", P);
        P.p = fattn_attn_params_default();
        P.p.algo = FATTN_ALGO_EXACT;
        size_t saved_bytes = 0;
        ASSERT_EQ(fattn_attn_saved_size(P.c, &P.p, &P.q, &P.k, &P.v, &saved_bytes), FATTN_OK);
        std::vector<float> saved(saved_bytes / 4 + 2);
        EXPECT_FAIL(fattn_attn_fwd(P.c, &P.p, &P.q, &P.k, &P.v, &P.o, &P.lse,
                                   reinterpret_cast<char *>(saved.data()) + 2, nullptr, 0),
                    FATTN_ERR_BAD_VALUE, "saved: pointer is not 4-byte aligned", P);
    }
    {  // PaTH: the same rule and message
        Path P;
        P.w.data = reinterpret_cast<char *>(P.bw.data()) + 2;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "w: data pointer is not aligned to its 4-byte f32", P);
    }
}

// §1: scale = FLT_MAX made every score of a row NaN or ±inf and the forward returned a fully
// masked row's o = 0, lse = -inf. The kernels fold log2(e) into the scale, so a scale past 2^126
// is refused by name (overflowing scores of finite inputs are the nonfinite_* cases of fattn-test).
TEST(Robust, HugeScaleRefused) {
    Attn P;
    for (float s : {3.4028235e38f, -1e38f, 0x1.000002p126f}) {
        P.p.scale = s;
        EXPECT_FAIL(P.fwd(), FATTN_ERR_BAD_VALUE, "scale: |scale|", P);
        EXPECT_FAIL(P.bwd(), FATTN_ERR_BAD_VALUE, "scale: |scale|", P);
    }
    P.p.scale = 0x1p126f;  // the largest accepted
    EXPECT_EQ(P.fwd(), FATTN_OK) << P.err();
}

}  // namespace

namespace {

// The size search built a dense bias of B·Hq·S·S elements with int64 strides that overflowed
// (found by the fuzz replay under UBSan): a geometry no budget holds answers 0, never UB.
TEST(Robust, MaxSeqlenHugeGeometry) {
    Ctx C;
    fattn_attn_params p = fattn_attn_params_default();
    float b = 0.f;
    p.bias = fattn_tensor_4d(&b, FATTN_F32, 2, 2, 1, 1, 4, 2, 1, 1);  // per-batch, per-head bias
    int64_t s = -1;
    const fattn_status st = fattn_attn_max_seqlen(C.c, &p, FATTN_F32, INT64_MAX / 4, INT64_MAX / 4, 1, 16, 16,
                                                  UINT64_MAX, &s);
    EXPECT_TRUE(st == FATTN_OK || st == FATTN_ERR_BAD_VALUE) << fattn_status_string(st) << ": " << C.err();
    EXPECT_EQ(s, 0);
}

// An empty view (no heads) may carry any sequence length; Sq + Skv used to overflow while
// clamping a window (found by fattn-fuzz; UBSan: signed overflow in attn_validate).
TEST(Robust, WindowClampWithHugeEmptyDims) {
    Ctx C;
    fattn_attn_params p = fattn_attn_params_default();
    p.window_left = 3;
    fattn_tensor q = fattn_tensor_4d(nullptr, FATTN_F32, 1, int64_t(1) << 58, 0, 8, 0, 0, 0, 1);
    fattn_tensor k = fattn_tensor_4d(nullptr, FATTN_F32, 1, INT64_MAX, 0, 8, 0, 0, 0, 1);
    EXPECT_EQ(fattn_attn_supports(C.c, &p, &q, &k, &k, nullptr, 0), FATTN_OK) << C.err();
}

// The self-overlap search (nested fast path + exact search) against brute force: every small
// output layout with strides 0..9 is refused exactly when two indices share an element.
TEST(Robust, SelfOverlapMatchesBruteForce) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> ne(1, 4), nb(0, 9);
    float buf[1];
    int refused = 0, accepted = 0;
    for (int it = 0; it < 20000; ++it) {
        fattn_tensor t = fattn_tensor_4d(buf, FATTN_F32, ne(rng), ne(rng), ne(rng), ne(rng), nb(rng), nb(rng),
                                         nb(rng), 1);
        std::set<int64_t> offs;
        bool dup = false;
        for (int64_t a = 0; a < t.ne[0]; ++a)
            for (int64_t b = 0; b < t.ne[1]; ++b)
                for (int64_t c = 0; c < t.ne[2]; ++c)
                    for (int64_t d = 0; d < t.ne[3]; ++d)
                        dup |= !offs.insert(a * t.nb[0] + b * t.nb[1] + c * t.nb[2] + d).second;
        std::string why;
        const fattn_status s = fattn::vc::check_strides(fattn::vc::View{"o", &t, true}, &why);
        ASSERT_EQ(s == FATTN_ERR_BAD_STRIDE, dup) << why << " ne " << t.ne[0] << t.ne[1] << t.ne[2] << t.ne[3]
                                                  << " nb " << t.nb[0] << "," << t.nb[1] << "," << t.nb[2];
        (dup ? refused : accepted) += 1;
    }
    EXPECT_GT(refused, 1000);
    EXPECT_GT(accepted, 1000);
}

// The same for the overlap of two views of one buffer (equal element size: exact).
TEST(Robust, ViewOverlapMatchesBruteForce) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> ne(1, 3), nb(0, 7), base(0, 30);
    static float buf[64];
    auto offsets = [](const fattn_tensor &t, std::set<int64_t> *o) {
        const int64_t b0 = static_cast<float *>(t.data) - buf;
        for (int64_t a = 0; a < t.ne[0]; ++a)
            for (int64_t b = 0; b < t.ne[1]; ++b)
                for (int64_t c = 0; c < t.ne[2]; ++c)
                    for (int64_t d = 0; d < t.ne[3]; ++d) o->insert(b0 + a * t.nb[0] + b * t.nb[1] + c * t.nb[2] + d);
    };
    int hits = 0;
    for (int it = 0; it < 20000; ++it) {
        fattn_tensor t[2];
        for (auto &x : t)
            x = fattn_tensor_4d(buf + base(rng), FATTN_F32, ne(rng), ne(rng), ne(rng), ne(rng), nb(rng), nb(rng),
                                nb(rng), 1);
        std::set<int64_t> a, b;
        offsets(t[0], &a);
        offsets(t[1], &b);
        bool shared = false;
        for (int64_t x : a) shared |= b.count(x) > 0;
        ASSERT_EQ(fattn::vc::views_overlap(fattn::vc::View{"a", &t[0], true}, fattn::vc::View{"b", &t[1], false}),
                  shared)
            << "iteration " << it;
        hits += shared;
    }
    EXPECT_GT(hits, 1000);
    EXPECT_LT(hits, 19000);
}

}  // namespace

// fattn_ctx_set_cuda_family: a CPU context takes AUTO only; NULL and out-of-range values are named
// errors (the value is read as raw bytes, never loaded as the enum: the UBSan build checks it).
TEST(Robust, CudaFamilyRules) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    EXPECT_EQ(fattn_ctx_set_cuda_family(ctx, FATTN_CUDA_FAMILY_AUTO), FATTN_OK);
    EXPECT_EQ(fattn_ctx_set_cuda_family(ctx, FATTN_CUDA_FAMILY_PORTABLE), FATTN_ERR_BAD_VALUE);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("family: only a CUDA context"), std::string::npos);
    EXPECT_EQ(fattn_test_bad_cuda_family(ctx), FATTN_ERR_BAD_VALUE);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("family: 7 is not a fattn_cuda_family"), std::string::npos);
    EXPECT_EQ(fattn_ctx_set_cuda_family(nullptr, FATTN_CUDA_FAMILY_AUTO), FATTN_ERR_NULL_POINTER);
    fattn_ctx_free(ctx);
}
