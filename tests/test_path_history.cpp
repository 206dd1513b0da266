// test_path_history.cpp — the transformed-query history of the PaTH backward (PATH.md §6).
//
// 1. Bytes: fattn_path_workspace_size / fattn_path_memory report exactly
//    sum_seq sum_{r=1}^{N-1} (L - r*512) cells x Hq x K x elem for PACKED (counted here by brute
//    force over tokens, independent of the library's closed form) and T x max N cells for
//    RECTANGULAR, at the two shapes of the issue (240 vs 512 MiB; 74 vs 256 MiB) and odd lengths.
// 2. Layout: the packed cell index is a bijection from the needed (seq, t, r) onto [0, cells).
// 3. Producer: the history is NaN-poisoned, the producer runs, and afterwards no packed cell is NaN
//    (every cell written); in RECTANGULAR exactly the never-needed cells are still NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "core/path_params.h"
#include "cpu/path/path_cpu.h"
#include "fattn/fattn.h"
#include "test/path_data.h"

namespace {

constexpr uint64_t MiB = 1024 * 1024;

// Needed cells by brute force: token t of a sequence needs columns 1..floor(t/512).
uint64_t brute_cells(const std::vector<int64_t> &lens) {
    uint64_t n = 0;
    for (int64_t L : lens)
        for (int64_t t = 0; t < L; ++t) n += uint64_t(t / 512);
    return n;
}

struct Shape {
    int64_t B, T, Hq, H, K;
    std::vector<int32_t> cu;
    fattn_dtype dt;
};

// History bytes reported by the API (views with NULL data: a size query needs no memory).
void history_bytes(const Shape &s, uint64_t *packed, uint64_t *rect, uint64_t *mem_packed,
                   uint64_t *mem_rect) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    fattn_tensor q = fattn_tensor_contiguous(nullptr, s.dt, s.B, s.T, s.Hq, s.K);
    fattn_tensor k = fattn_tensor_contiguous(nullptr, s.dt, s.B, s.T, s.H, s.K);
    fattn_tensor v = k;
    fattn_tensor w = fattn_tensor_contiguous(nullptr, FATTN_F32, s.B, s.T, s.H, s.K);
    fattn_tensor beta = fattn_tensor_contiguous(nullptr, FATTN_F32, s.B, s.T, s.H, 1);
    fattn_tensor g = fattn_tensor_none();
    fattn_path_params p = fattn_path_params_default();
    if (!s.cu.empty()) p.cu_seqlens = s.cu.data(), p.num_seqs = int64_t(s.cu.size()) - 1;
    fattn_path_workspace_info info;
    ASSERT_EQ(fattn_path_workspace_size(ctx, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_BWD, &info), FATTN_OK)
        << fattn_ctx_last_error(ctx);
    *packed = info.history_bytes;
    EXPECT_GT(info.total_bytes, info.history_bytes);
    fattn_path_memory_info mem;
    ASSERT_EQ(fattn_path_memory(ctx, &p, &q, &k, &v, &w, &beta, &g, &mem), FATTN_OK);
    *mem_packed = mem.history_packed_bytes;
    *mem_rect = mem.history_rectangular_bytes;
    // The model's workspace is the caller-visible workspace plus the call's small host heap.
    EXPECT_GE(mem.bwd_workspace_bytes, info.total_bytes);
    EXPECT_LE(mem.bwd_workspace_bytes, info.total_bytes + 64 * 1024);
    p.history = FATTN_PATH_HISTORY_RECTANGULAR;
    ASSERT_EQ(fattn_path_workspace_size(ctx, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_BWD, &info), FATTN_OK);
    *rect = info.history_bytes;
    ASSERT_EQ(fattn_path_workspace_size(ctx, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_FWD, &info), FATTN_OK);
    EXPECT_EQ(info.history_bytes, 0u);
    fattn_ctx_free(ctx);
}

TEST(PathHistory, BytesT8192Hq32K64Bf16) {
    uint64_t pk, rc, mp, mr;
    history_bytes({1, 8192, 32, 32, 64, {}, FATTN_BF16}, &pk, &rc, &mp, &mr);
    EXPECT_EQ(pk, 240 * MiB);
    EXPECT_EQ(rc, 512 * MiB);
    EXPECT_EQ(mp, pk);
    EXPECT_EQ(mr, rc);
    EXPECT_EQ(pk, brute_cells({8192}) * 32 * 64 * 2);
}

TEST(PathHistory, BytesVarlenPack) {
    uint64_t pk, rc, mp, mr;
    history_bytes({1, 8192, 32, 8, 64, {0, 512, 2048, 4096, 8192}, FATTN_BF16}, &pk, &rc, &mp, &mr);
    EXPECT_EQ(pk, 18944u * 4096u);  // 74 MiB
    EXPECT_EQ(pk, 74 * MiB);
    EXPECT_EQ(rc, 256 * MiB);
    EXPECT_EQ(pk, brute_cells({512, 1536, 2048, 4096}) * 4096);
}

TEST(PathHistory, BytesOddLengths) {
    const std::vector<std::vector<int64_t>> packs = {{1}, {511}, {512}, {513}, {1023}, {1024},
                                                     {1025}, {1537}, {3001}, {5, 1030, 512, 2049}};
    for (const auto &lens : packs) {
        Shape s{1, 0, 3, 1, 32, {0}, FATTN_F16};
        for (int64_t L : lens) s.cu.push_back(int32_t(s.cu.back() + L));
        s.T = s.cu.back();
        int64_t maxn = 0;
        for (int64_t L : lens) maxn = std::max(maxn, (L + 511) / 512);
        uint64_t pk, rc, mp, mr;
        history_bytes(s, &pk, &rc, &mp, &mr);
        EXPECT_EQ(pk, brute_cells(lens) * 3 * 32 * 2) << "T " << s.T;
        EXPECT_EQ(rc, uint64_t(s.T * maxn) * 3 * 32 * 2) << "T " << s.T;
        // dense B = 2 of the first length: twice one sequence
        Shape d{2, lens[0], 3, 1, 32, {}, FATTN_F32};
        history_bytes(d, &pk, &rc, &mp, &mr);
        EXPECT_EQ(pk, 2 * brute_cells({lens[0]}) * 3 * 32 * 4);
    }
}

TEST(PathHistory, PackedLayoutIsABijection) {
    std::vector<int32_t> cu = {0, 700, 701, 2300, 2300, 4000};
    fattn::PathFwdParams p{};
    p.B = 1, p.T = cu.back(), p.hq = 1, p.h = 1, p.dk = 16, p.dv = 16, p.dtype = FATTN_F32;
    p.history = FATTN_PATH_HISTORY_PACKED;
    p.cu_seqlens = cu.data(), p.num_seqs = int64_t(cu.size()) - 1;
    fattn::PathLayout lay = fattn::path_layout(p);
    std::vector<int> hits(size_t(lay.hist_cells), 0);
    for (int64_t s = 0; s < p.num_seqs; ++s) {
        fattn::PathSeq sq = fattn::path_seq(p, s);
        for (int64_t t = 0; t < sq.len; ++t)
            for (int64_t r = 1; r <= t / 512; ++r) {
                int64_t c = fattn::path_hist_cell(p, lay, s, sq, t, r);
                ASSERT_GE(c, 0);
                ASSERT_LT(c, lay.hist_cells);
                hits[size_t(c)]++;
            }
    }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "cell " << i;
}

// Poison the history with NaN, run only the phases up to the producer, count NaN cells left.
int64_t nan_cells_after_producer(fattn_path_history hist, fattn_dtype dt, int64_t *total_cells) {
    std::vector<int32_t> cu = {0, 40, 600, 1700, 2900};
    const int64_t T = cu.back(), HQ = 2, H = 1, K = 16, V = 16;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const size_t es = fattn_dtype_size(dt);
    std::vector<uint8_t> q(size_t(T * HQ * K) * es), k(size_t(T * H * K) * es), v(size_t(T * H * V) * es),
        o(size_t(T * HQ * V) * es), dout(o.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> w(size_t(T * H * K)), beta(size_t(T * H), 1.9f), lse(size_t(HQ * T), 0.f),
        dw(w.size()), db(beta.size());
    fattn_test::fill_normal(q.data(), dt, T * HQ * K, rng, nd);
    fattn_test::fill_normal(k.data(), dt, T * H * K, rng, nd);
    for (int64_t i = 0; i < T * H; ++i) fattn_test::unit_row(w.data() + i * K, K, rng, nd);
    fattn::PathBwdParams p{};
    p.B = 1, p.T = T, p.hq = HQ, p.h = H, p.dk = K, p.dv = V, p.dtype = dt, p.scale = 0.25f, p.history = hist;
    p.q = q.data(), p.q_ss = HQ * K, p.q_sh = K, p.q_sb = T * HQ * K;
    p.k = k.data(), p.k_ss = H * K, p.k_sh = K, p.k_sb = T * H * K;
    p.v = v.data(), p.v_ss = H * V, p.v_sh = V, p.v_sb = T * H * V;
    p.w = w.data(), p.w_ss = H * K, p.w_sh = K, p.w_sb = T * H * K;
    p.beta = beta.data(), p.beta_ss = H, p.beta_sh = 1, p.beta_sb = T * H;
    p.o = o.data(), p.o_ss = HQ * V, p.o_sh = V, p.o_sb = T * HQ * V;
    p.lse = lse.data(), p.lse_sh = T, p.lse_sb = HQ * T;
    p.dout = dout.data(), p.do_ss = HQ * V, p.do_sh = V, p.do_sb = T * HQ * V;
    p.cu_seqlens = cu.data(), p.num_seqs = int64_t(cu.size()) - 1, p.nthreads = 2;
    fattn::PathLayout lay = fattn::path_layout(p);
    fattn::PathWorkspace wl = fattn::path_workspace(p, lay, FATTN_DIR_BWD);
    std::vector<uint8_t> ws(wl.total, 0);  // zero: only the producer's own poisoning matters
    std::string err;
    EXPECT_EQ(fattn::cpu::path_bwd_history_only(p, ws.data(), &err), FATTN_OK);
    const uint8_t *h = reinterpret_cast<const uint8_t *>(fattn::path_ws_base(ws.data())) + wl.history;
    *total_cells = lay.hist_cells;
    int64_t nan_cells = 0;
    for (int64_t c = 0; c < lay.hist_cells; ++c) {
        int64_t nans = 0;
        for (int64_t e = 0; e < HQ * K; ++e) nans += std::isnan(fattn::load_f32(h, dt, c * HQ * K + e));
        EXPECT_TRUE(nans == 0 || nans == HQ * K) << "cell " << c << " partly written";
        nan_cells += nans == HQ * K;
    }
    return nan_cells;
}

TEST(PathHistory, ProducerWritesEveryPackedCell) {
    for (fattn_dtype dt : {FATTN_F32, FATTN_BF16, FATTN_F16}) {
        int64_t cells = 0;
        EXPECT_EQ(nan_cells_after_producer(FATTN_PATH_HISTORY_PACKED, dt, &cells), 0);
        EXPECT_EQ(uint64_t(cells), brute_cells({40, 560, 1100, 1200}));
    }
}

TEST(PathHistory, RectangularLeavesExactlyTheUnneededCellsUnwritten) {
    int64_t cells = 0;
    const int64_t nan_cells = nan_cells_after_producer(FATTN_PATH_HISTORY_RECTANGULAR, FATTN_F32, &cells);
    EXPECT_EQ(cells, 2900 * 3);  // T x max N (N = 3 for 1100 and 1200)
    EXPECT_EQ(uint64_t(cells - nan_cells), brute_cells({40, 560, 1100, 1200}));
}

}  // namespace
