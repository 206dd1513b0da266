// test_cpu_fwd_group.cpp — the CPU fused forward's q-tile groups (src/cpu/attn_fwd.cpp): a task
// holds fwd_q_group(p) consecutive q tiles (4, 2 or 1, set by the shapes and the thread count)
// and loads each kv tile once for all of them. The group size must never change a bit: o, lse
// (and, through the backward's stats forward under large bias ceilings, dq/dk/dv) are compared
// bitwise at the thread counts that give groups of 4, 2 and 1, under causal (both alignments),
// a window, a bias with −inf tiles and finfo.min padding rows, varlen, GQA, Skv != Sq and bf16.
// Run: fattn-unit --gtest_filter='CpuFwdGroup*'
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/attn_impl.h"
#include "fattn/fattn.h"

namespace {

// Hq·B·ceil(Sq/64) = 16 q tiles at D <= 64: fwd_q_group is 4 at 1 thread, 2 at 2, 1 at 4.
constexpr int64_t kB = 1, kSq = 512, kSkv = 448, kHq = 2, kHkv = 1, kD = 64;
const int kThreads[] = {1, 2, 4};

struct Case {
    std::string name;
    fattn_dtype dt = FATTN_F32;
    fattn_causal causal = FATTN_CAUSAL_NONE;
    int64_t wl = -1, wr = -1;
    bool bias = false, varlen = false;
};

uint16_t to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

struct Outputs {
    std::vector<uint8_t> o, lse, dq, dk, dv;
};

Outputs run(const Case &c, int nthreads) {
    const size_t es = c.dt == FATTN_F32 ? 4 : 2;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](int64_t n) {
        std::vector<uint8_t> b(size_t(n) * es);
        for (int64_t i = 0; i < n; ++i) {
            float x = u(rng);
            if (es == 4) std::memcpy(&b[size_t(i) * 4], &x, 4);
            else {
                uint16_t h = to_bf16(x);
                std::memcpy(&b[size_t(i) * 2], &h, 2);
            }
        }
        return b;
    };
    const int64_t nq = kB * kSq * kHq * kD, nk = kB * kSkv * kHkv * kD;
    std::vector<uint8_t> q = fill(nq), k = fill(nk), v = fill(nk), dout = fill(nq);
    Outputs r;
    r.o.assign(size_t(nq) * es, 0), r.dq.assign(size_t(nq) * es, 0);
    r.dk.assign(size_t(nk) * es, 0), r.dv.assign(size_t(nk) * es, 0);
    r.lse.assign(size_t(kB * kHq * kSq) * 4, 0);
    // varlen: the same buffers as three packed sequences (B = 1, S = total tokens)
    const std::vector<int32_t> cu_q = {0, 130, 200, int32_t(kSq)}, cu_kv = {0, 100, 260, int32_t(kSkv)};
    auto t4 = [&](void *d, int64_t s, int64_t h) { return fattn_tensor_contiguous(d, c.dt, kB, s, h, kD); };
    fattn_tensor tq = t4(q.data(), kSq, kHq), tk = t4(k.data(), kSkv, kHkv), tv = t4(v.data(), kSkv, kHkv);
    fattn_tensor to = t4(r.o.data(), kSq, kHq), tdo = t4(dout.data(), kSq, kHq), tdq = t4(r.dq.data(), kSq, kHq);
    fattn_tensor tdk = t4(r.dk.data(), kSkv, kHkv), tdv = t4(r.dv.data(), kSkv, kHkv);
    fattn_tensor tl = fattn_tensor_contiguous(r.lse.data(), FATTN_F32, kB, kHq, kSq, 1);
    fattn_attn_params p = fattn_attn_params_default();
    p.causal = c.causal;
    p.window_left = c.wl, p.window_right = c.wr;
    if (c.varlen) p.cu_seqlens_q = cu_q.data(), p.cu_seqlens_kv = cu_kv.data(), p.num_seqs = 3;
    // bias [1, 1, Sq, Skv] f32: a −inf block (whole tiles skipped), a −inf column band, and rows
    // at finfo.min everywhere (Hugging Face padding: ceiling −3.4e38, the stats forward's rows)
    std::vector<float> bias;
    if (c.bias) {
        bias.resize(size_t(kSq * kSkv));
        const float ninf = -std::numeric_limits<float>::infinity(), fmin = std::numeric_limits<float>::lowest();
        for (int64_t i = 0; i < kSq; ++i)
            for (int64_t j = 0; j < kSkv; ++j) {
                float x = 0.1f * u(rng);
                if (i >= 64 && i < 192 && j >= 128 && j < 320) x = ninf;
                if (j % 97 == 5) x = ninf;
                if (i % 61 == 3) x = fmin;
                bias[size_t(i * kSkv + j)] = x;
            }
        p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, 1, kSq, kSkv);
    }
    fattn_ctx_t *ctx = nullptr;
    EXPECT_EQ(fattn_ctx_init_cpu(nthreads, &ctx), FATTN_OK);
    EXPECT_EQ(fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0), FATTN_OK)
        << fattn_ctx_last_error(ctx);
    EXPECT_EQ(fattn_attn_bwd(ctx, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk, &tdv, nullptr, 0), FATTN_OK)
        << fattn_ctx_last_error(ctx);
    fattn_ctx_free(ctx);
    return r;
}

// The group size each thread count gets for these shapes (so the comparison is not vacuous).
int group_of(int nthreads, bool varlen) {
    fattn::AttnFwdParams p{};
    p.algo = FATTN_ALGO_FUSED;
    p.d = p.dim_v = kD;
    p.hq = kHq, p.batch = varlen ? 3 : kB, p.seqlen_q = kSq, p.total_q = kSq;
    static const int32_t cu[] = {0, 130, 200, int32_t(kSq)};
    p.cu_seqlens_q = varlen ? cu : nullptr;
    p.nthreads = nthreads;
    return fattn::cpu::detail::fwd_q_group(p);
}

TEST(CpuFwdGroup, SizesByThreadCount) {
    EXPECT_EQ(group_of(1, false), 4);
    EXPECT_EQ(group_of(2, false), 2);
    EXPECT_EQ(group_of(4, false), 1);
    EXPECT_GT(group_of(1, true), group_of(4, true));
}

TEST(CpuFwdGroup, BitwiseEqualAcrossGroupSizes) {
    std::vector<Case> cases;
    cases.push_back({"full"});
    cases.push_back({"causal-tl", FATTN_F32, FATTN_CAUSAL_TOP_LEFT});
    cases.push_back({"causal-br", FATTN_F32, FATTN_CAUSAL_BOTTOM_RIGHT});
    Case w{"window"};
    w.wl = 100, w.wr = 40;
    cases.push_back(w);
    Case b{"bias"};
    b.bias = true;
    cases.push_back(b);
    Case vl{"varlen-causal", FATTN_F32, FATTN_CAUSAL_BOTTOM_RIGHT};
    vl.varlen = true;
    cases.push_back(vl);
    cases.push_back({"bf16-causal", FATTN_BF16, FATTN_CAUSAL_TOP_LEFT});
    for (const Case &c : cases) {
        const Outputs ref = run(c, kThreads[0]);
        for (int nt : kThreads) {
            if (nt == kThreads[0]) continue;
            const Outputs r = run(c, nt);
            EXPECT_TRUE(r.o == ref.o) << c.name << ": o, threads " << nt;
            EXPECT_TRUE(r.lse == ref.lse) << c.name << ": lse, threads " << nt;
            EXPECT_TRUE(r.dq == ref.dq) << c.name << ": dq, threads " << nt;
            EXPECT_TRUE(r.dk == ref.dk) << c.name << ": dk, threads " << nt;
            EXPECT_TRUE(r.dv == ref.dv) << c.name << ": dv, threads " << nt;
        }
    }
}

}  // namespace
