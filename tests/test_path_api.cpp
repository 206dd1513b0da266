// test_path_api.cpp — validation of the PaTH C API: one test per rule, checking the status and
// that the message names the argument; plus defaults, the empty no-op, caller workspace size,
// the CUDA backend's own answers, and the memory model's terms.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fattn/fattn.h"

namespace {

// A small valid problem whose views each test then breaks one way.
struct Views {
    int64_t B = 1, T = 70, HQ = 4, H = 2, K = 32, V = 16;
    std::vector<float> q, k, v, w, beta, g, o, lse, dout, dq, dk, dv, dw, db, dg;
    fattn_tensor tq, tk, tv, tw, tb, tg, to, tl, tdo, tdq, tdk, tdv, tdw, tdb, tdg;
    std::vector<int32_t> cu = {0, 30, 70};
    fattn_path_params p = fattn_path_params_default();
    fattn_ctx_t *ctx = nullptr;
    Views() {
        auto mk = [&](std::vector<float> &buf, fattn_tensor &t, int64_t a, int64_t b, int64_t c, int64_t d, float fill) {
            buf.assign(size_t(a * b * c * d), fill);
            t = fattn_tensor_contiguous(buf.data(), FATTN_F32, a, b, c, d);
        };
        mk(q, tq, B, T, HQ, K, 0.1f);
        mk(k, tk, B, T, H, K, 0.2f);
        mk(v, tv, B, T, H, V, 0.3f);
        mk(w, tw, B, T, H, K, 0.f);
        for (size_t i = 0; i < w.size(); i += size_t(K)) w[i] = 1.f;  // unit w
        mk(beta, tb, B, T, H, 1, 1.5f);
        mk(g, tg, B, T, HQ, 1, -0.01f);
        mk(o, to, B, T, HQ, V, 0.f);
        mk(lse, tl, B, HQ, T, 1, 0.f);
        mk(dout, tdo, B, T, HQ, V, 1.f);
        mk(dq, tdq, B, T, HQ, K, 0.f);
        mk(dk, tdk, B, T, H, K, 0.f);
        mk(dv, tdv, B, T, H, V, 0.f);
        mk(dw, tdw, B, T, H, K, 0.f);
        mk(db, tdb, B, T, H, 1, 0.f);
        mk(dg, tdg, B, T, HQ, 1, 0.f);
        EXPECT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    }
    ~Views() { fattn_ctx_free(ctx); }
    fattn_status fwd() { return fattn_path_fwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, nullptr, 0); }
    fattn_status bwd() {
        return fattn_path_bwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb,
                              &tdg, nullptr, 0);
    }
    std::string err() const { return fattn_ctx_last_error(ctx); }
};

#define EXPECT_FAILS(call, status, prefix)                                        \
    do {                                                                          \
        EXPECT_EQ(call, status);                                                  \
        EXPECT_EQ(v.err().rfind(prefix, 0), 0u) << "message: " << v.err();        \
    } while (0)

TEST(PathApi, ValidProblemRuns) {
    Views v;
    EXPECT_EQ(v.fwd(), FATTN_OK) << v.err();
    EXPECT_EQ(v.bwd(), FATTN_OK) << v.err();
    v.p.cu_seqlens = v.cu.data(), v.p.num_seqs = 2;
    EXPECT_EQ(v.fwd(), FATTN_OK) << v.err();
    char why[256];
    EXPECT_EQ(fattn_path_supports(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, why, sizeof why), FATTN_OK);
    EXPECT_STREQ(why, "");
}

TEST(PathApi, Defaults) {
    fattn_path_params p = fattn_path_params_default();
    EXPECT_EQ(p.scale, 0.f);
    EXPECT_EQ(p.history, FATTN_PATH_HISTORY_PACKED);
    EXPECT_EQ(p.check, FATTN_PATH_CHECK_STRICT);
    EXPECT_EQ(p.cu_seqlens, nullptr);
}

TEST(PathApi, GqaHeads) {
    Views v;
    v.tq.ne[2] = v.tg.ne[2] = v.to.ne[2] = v.tl.ne[1] = 3;  // consistent query heads, 3 % 2 != 0
    EXPECT_FAILS(v.fwd(), FATTN_ERR_GQA_HEADS, "q: ");
}

// The CPU backend runs K and V from 1 to 256 (supports reads no data: views describe the shapes).
TEST(PathApi, HeadDims) {
    Views v;
    char why[256];
    for (int64_t K : {1, 24, 256, 257}) {
        v.tq = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 70, 4, K);
        v.tk = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 70, 2, K);
        v.tw = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 70, 2, K);
        const fattn_status s = fattn_path_supports(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, why, sizeof why);
        if (K <= 256) {
            EXPECT_EQ(s, FATTN_OK) << "K " << K << ": " << why;
        } else {
            EXPECT_EQ(s, FATTN_ERR_BAD_HEAD_DIM);
            EXPECT_NE(std::string(why).find("K = 257"), std::string::npos) << why;
        }
    }
}

// A fresh Views changed by edit: its forward fails with status and a message starting with prefix.
template <class Edit>
void expect_fwd_fails(Edit edit, fattn_status status, const char *prefix) {
    Views v;
    edit(v);
    EXPECT_EQ(v.fwd(), status);
    EXPECT_EQ(v.err().rfind(prefix, 0), 0u) << "message: " << v.err();
}

TEST(PathApi, ShapeMismatch) {
    expect_fwd_fails([](Views &v) { v.tk.ne[3] = 64; }, FATTN_ERR_SHAPE_MISMATCH, "k: ne[3]");
    expect_fwd_fails([](Views &v) { v.tb.ne[2] = 4; }, FATTN_ERR_SHAPE_MISMATCH, "beta: ne[2]");
    expect_fwd_fails([](Views &v) { v.tl.ne[2] = 69; }, FATTN_ERR_SHAPE_MISMATCH, "lse: ");
}

TEST(PathApi, Dtypes) {
    expect_fwd_fails([](Views &v) { v.tw.dtype = FATTN_F16; }, FATTN_ERR_DTYPE_MISMATCH, "w: dtype");
    expect_fwd_fails([](Views &v) { v.tk.dtype = FATTN_BF16; }, FATTN_ERR_DTYPE_MISMATCH, "k: dtype");
}

TEST(PathApi, Strides) {
    expect_fwd_fails([](Views &v) { v.tq.nb[3] = 2; }, FATTN_ERR_BAD_STRIDE, "q: nb[3]");
    expect_fwd_fails([](Views &v) { v.to.nb[1] = 0; }, FATTN_ERR_BAD_STRIDE, "o: nb[1]");
}

TEST(PathApi, NullPointers) {
    Views v;
    EXPECT_EQ(fattn_path_fwd(v.ctx, &v.p, &v.tq, nullptr, &v.tv, &v.tw, &v.tb, &v.tg, &v.to, &v.tl, nullptr, 0),
              FATTN_ERR_NULL_POINTER);
    EXPECT_EQ(v.err().rfind("k: ", 0), 0u) << v.err();
    v.tdg.data = nullptr;  // g given, dg missing
    EXPECT_FAILS(v.bwd(), FATTN_ERR_NULL_POINTER, "dg: ");
    EXPECT_EQ(fattn_path_fwd(nullptr, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &v.to, &v.tl, nullptr, 0),
              FATTN_ERR_NULL_POINTER);
}

TEST(PathApi, Seqlens) {
    Views v;
    v.p.cu_seqlens = v.cu.data(), v.p.num_seqs = 2;
    v.cu[2] = 69;
    EXPECT_FAILS(v.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens[2] (last) is 69 but q has");
    v.cu = {0, 40, 30};
    v.p.cu_seqlens = v.cu.data();
    EXPECT_FAILS(v.fwd(), FATTN_ERR_BAD_SEQLENS, "cu_seqlens[2] is 30 < cu_seqlens[1] = 40");
}

TEST(PathApi, BadValues) {
    Views v;
    v.p.scale = NAN;
    EXPECT_FAILS(v.fwd(), FATTN_ERR_BAD_VALUE, "scale: ");
    Views v2;
    v2.p.history = fattn_path_history(7);
    EXPECT_EQ(v2.fwd(), FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(v2.err().rfind("history: ", 0), 0u);
}

TEST(PathApi, Overlap) {
    Views v;
    v.tdk.data = v.tdq.data;
    EXPECT_EQ(v.bwd(), FATTN_ERR_OVERLAP);
}

// Overlap is decided on byte extents, not base pointers: views into one buffer with distinct bases.
TEST(PathApi, OverlapByExtent) {
    {  // two outputs, dk starting inside dq's extent
        Views v;
        std::vector<float> big(v.dq.size() + v.dk.size() + 64, 0.f);
        v.tdq.data = big.data();
        v.tdk.data = big.data() + 8;
        EXPECT_FAILS(v.bwd(), FATTN_ERR_OVERLAP, "dq: overlaps output dk");
    }
    {  // the backward's dg ending inside the input dout
        Views v;
        std::vector<float> big(v.dout.size() + v.dg.size(), 0.f);
        v.tdo.data = big.data() + v.dg.size() - 1;
        v.tdg.data = big.data();
        EXPECT_FAILS(v.bwd(), FATTN_ERR_OVERLAP, "dg: overlaps input dout");
    }
    {  // the forward checks g too (it used to check q, k, v, w, beta only)
        Views v;
        std::vector<float> big(v.o.size() + v.g.size(), -0.01f);
        v.to.data = big.data();
        v.tg.data = big.data() + v.o.size() - 1;
        EXPECT_FAILS(v.fwd(), FATTN_ERR_OVERLAP, "o: overlaps input g");
    }
    {  // lse overlapping the last element of o
        Views v;
        std::vector<float> big(v.o.size() + v.lse.size(), 0.f);
        v.to.data = big.data();
        v.tl.data = big.data() + v.o.size() - 1;
        EXPECT_FAILS(v.fwd(), FATTN_ERR_OVERLAP, "o: overlaps output lse");
    }
    {  // adjacent, disjoint outputs in one buffer are fine
        Views v;
        std::vector<float> big(v.dq.size() + v.dk.size(), 0.f);
        v.tdq.data = big.data();
        v.tdk.data = big.data() + v.dq.size();
        ASSERT_EQ(v.fwd(), FATTN_OK) << v.err();
        EXPECT_EQ(v.bwd(), FATTN_OK) << v.err();
    }    {  // dk and dv as interleaved, disjoint views of one fused [B, T, H*(K+V)] buffer: legal (exact
       // test); shifted by one element into dk's last column of each token: refused
        Views v;
        const int64_t ss = v.H * (v.K + v.V), sb = v.T * ss;
        std::vector<float> fused(size_t(v.B * sb), 0.f);
        v.tdk = fattn_tensor_4d(fused.data(), FATTN_F32, v.B, v.T, v.H, v.K, sb, ss, v.K, 1);
        v.tdv = fattn_tensor_4d(fused.data() + v.H * v.K, FATTN_F32, v.B, v.T, v.H, v.V, sb, ss, v.V, 1);
        ASSERT_EQ(v.fwd(), FATTN_OK) << v.err();
        EXPECT_EQ(v.bwd(), FATTN_OK) << v.err();
        v.tdv.data = fused.data() + v.H * v.K - 1;
        EXPECT_FAILS(v.bwd(), FATTN_ERR_OVERLAP, "dk: overlaps output dv");
    }
}

// A caller's workspace at any address: the library aligns the base inside the slack it sizes, and
// the results are bitwise those of a run with a context-allocated workspace.
TEST(PathApi, MisalignedCallerWorkspace) {
    Views v;
    fattn_ctx_set_nthreads(v.ctx, 3);
    ASSERT_EQ(v.fwd(), FATTN_OK) << v.err();
    ASSERT_EQ(v.bwd(), FATTN_OK) << v.err();
    const std::vector<float> o0 = v.o, lse0 = v.lse, dq0 = v.dq, dk0 = v.dk, dv0 = v.dv, dw0 = v.dw,
                             db0 = v.db, dg0 = v.dg;
    for (fattn_dir dir : {FATTN_DIR_FWD, FATTN_DIR_BWD}) {
        fattn_path_workspace_info info;
        ASSERT_EQ(fattn_path_workspace_size(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, dir, &info), FATTN_OK);
        for (size_t off : {size_t(1), size_t(3), size_t(62)}) {
            std::vector<uint8_t> ws(info.total_bytes + off, 0xFF);
            fattn_status s = dir == FATTN_DIR_FWD
                                 ? fattn_path_fwd(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &v.to,
                                                  &v.tl, ws.data() + off, info.total_bytes)
                                 : fattn_path_bwd(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &v.to,
                                                  &v.tl, &v.tdo, &v.tdq, &v.tdk, &v.tdv, &v.tdw, &v.tdb, &v.tdg,
                                                  ws.data() + off, info.total_bytes);
            ASSERT_EQ(s, FATTN_OK) << v.err();
            EXPECT_TRUE(v.o == o0 && v.lse == lse0) << "offset " << off;
            EXPECT_TRUE(v.dq == dq0 && v.dk == dk0 && v.dv == dv0 && v.dw == dw0 && v.db == db0 && v.dg == dg0)
                << "offset " << off;
        }
    }
}

TEST(PathApi, WorkspaceTooSmall) {
    Views v;
    fattn_path_workspace_info info;
    ASSERT_EQ(fattn_path_workspace_size(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, FATTN_DIR_FWD, &info),
              FATTN_OK);
    std::vector<uint8_t> ws(info.total_bytes);
    EXPECT_EQ(fattn_path_fwd(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &v.to, &v.tl, ws.data(),
                             ws.size() - 1),
              FATTN_ERR_WORKSPACE_TOO_SMALL);
    EXPECT_EQ(fattn_path_fwd(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &v.to, &v.tl, ws.data(),
                             ws.size()),
              FATTN_OK);
}

TEST(PathApi, EmptyIsANoOp) {
    Views v;
    v.tq.ne[1] = v.tk.ne[1] = v.tv.ne[1] = v.tw.ne[1] = v.tb.ne[1] = v.tg.ne[1] = v.to.ne[1] = v.tl.ne[2] = 0;
    EXPECT_EQ(v.fwd(), FATTN_OK) << v.err();
}

// A CUDA context answers from the CUDA backend's own selection (never the CPU's): these shapes
// are supported, a head dim of 80 is refused naming the CUDA backend, and the workspace is the
// GPU layout's (the history part equal on both backends: the same formula).
TEST(PathApi, CudaContextAnswersFromTheCudaBackend) {
    fattn_ctx_t *cuda = nullptr;
    if (fattn_ctx_init_cuda(0, nullptr, &cuda) != FATTN_OK) GTEST_SKIP() << "no CUDA backend/device";
    Views v;  // supports and sizes read no data: host views describe the shapes
    char why[256];
    EXPECT_EQ(fattn_path_supports(cuda, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, why, sizeof why), FATTN_OK) << why;
    Views big;
    fattn_path_workspace_info wc{}, wh{};
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 4, 32), k = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 2, 32),
                 vv = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 2, 16), w = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1300, 2, 32),
                 b = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1300, 2, 1), g = fattn_tensor_none();
    ASSERT_EQ(fattn_path_workspace_size(cuda, &big.p, &q, &k, &vv, &w, &b, &g, FATTN_DIR_BWD, &wc), FATTN_OK)
        << fattn_ctx_last_error(cuda);
    ASSERT_EQ(fattn_path_workspace_size(big.ctx, &big.p, &q, &k, &vv, &w, &b, &g, FATTN_DIR_BWD, &wh), FATTN_OK);
    EXPECT_EQ(wc.history_bytes, wh.history_bytes);
    EXPECT_EQ(wc.history_bytes, uint64_t(1300 - 512 + 1300 - 1024) * 4 * 32 * 2);
    // K 80 runs (on the kernels of 128), K 136 only on the CPU
    fattn_tensor q80 = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 4, 80), k80 = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 2, 80),
                 w80 = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1300, 2, 80);
    EXPECT_EQ(fattn_path_supports(cuda, &big.p, &q80, &k80, &vv, &w80, &b, &g, why, sizeof why), FATTN_OK) << why;
    fattn_tensor q136 = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 4, 136), k136 = fattn_tensor_contiguous(nullptr, FATTN_BF16, 1, 1300, 2, 136),
                 w136 = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1300, 2, 136);
    EXPECT_EQ(fattn_path_supports(cuda, &big.p, &q136, &k136, &vv, &w136, &b, &g, why, sizeof why), FATTN_ERR_BAD_HEAD_DIM);
    EXPECT_NE(std::string(why).find("PaTH CUDA backend"), std::string::npos) << why;
    EXPECT_EQ(fattn_path_supports(big.ctx, &big.p, &q136, &k136, &vv, &w136, &b, &g, why, sizeof why), FATTN_OK) << why;
    fattn_ctx_free(cuda);
}

TEST(PathApi, MemoryModelTerms) {
    Views v;
    fattn_path_memory_info m;
    ASSERT_EQ(fattn_path_memory(v.ctx, &v.p, &v.tq, &v.tk, &v.tv, &v.tw, &v.tb, &v.tg, &m), FATTN_OK);
    const uint64_t f = 4, R = 70;
    EXPECT_EQ(m.inputs_bytes, R * (4 * 32 + 2 * 32 + 2 * 16 + 2 * 32 + 2 + 4) * f);
    EXPECT_EQ(m.saved_bytes, R * (4 * 16 + 4) * f);
    EXPECT_EQ(m.history_packed_bytes, 0u);  // T = 70 < 512: no history at all
    EXPECT_EQ(m.history_rectangular_bytes, 0u + R * 1 * 4 * 32 * f);
    EXPECT_EQ(m.fwd_peak_bytes, m.inputs_bytes + m.saved_bytes + m.fwd_workspace_bytes);
    EXPECT_EQ(m.bwd_peak_bytes, m.inputs_bytes + m.saved_bytes + m.grads_bytes + m.bwd_workspace_bytes);
    EXPECT_GT(m.bwd_workspace_bytes, m.fwd_workspace_bytes);
}

}  // namespace
