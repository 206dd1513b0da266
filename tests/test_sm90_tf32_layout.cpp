// test_sm90_tf32_layout.cpp — the host-side arithmetic of the sm90 tf32 kernels' staged copies
// (src/cuda/attn/workspace.h), which the device kernels (sm90/stage_tf32.cu, fwd_kernel.cuh,
// bwd_dq_kernel.cuh) index with: per-sequence column ranges of the transposed copy, the gaps the
// pre-pass zero-fills between them, the 8-key order that makes the accumulator the tf32 A
// fragment, and the workspace regions per family and direction (plain C++: every build); in a
// CUDA build also the selection rule that the whole family must fit the shared memory.
// Run: fattn-unit --gtest_filter='Sm90Tf32Layout*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/attn/tiles.h"
#include "cuda/attn/workspace.h"
#ifdef FATTN_WITH_CUDA
#include "cuda/attn/attn_kernels.h"
#endif

namespace {

using fattn::cuda::attn::Choice;
using fattn::cuda::attn::Family;
using fattn::cuda::attn::sm90_vt_col0;
using fattn::cuda::attn::sm90_vt_cols;
using fattn::cuda::attn::tf32_key_order;
using fattn::cuda::attn::Workspace;

int64_t r8(int64_t x) { return (x + 7) / 8 * 8; }

// Sequences of these lengths, packed one after another (varlen) — or B equal lengths (dense):
// every sequence's 8-key groups lie inside [0, vt_cols), in order, never overlapping the next
// sequence's, and the groups plus the gaps the pre-pass fills ([end_s, col0_{s+1}), and up to
// vt_cols after the last) tile [col0_0, vt_cols) exactly.
void check_columns(const std::vector<int64_t> &lens) {
    int64_t rows = 0;
    for (int64_t l : lens) rows += l;
    const int64_t seqs = int64_t(lens.size()), cols = sm90_vt_cols(rows, seqs);
    EXPECT_EQ(cols % 8, 0);
    int64_t flat0 = 0, covered = sm90_vt_col0(0, 0);
    EXPECT_EQ(covered, 0);
    for (int64_t s = 0; s < seqs; ++s) {
        const int64_t c0 = sm90_vt_col0(flat0, s), end = c0 + r8(lens[s]);
        EXPECT_EQ(c0 % 8, 0) << "sequence " << s;
        EXPECT_EQ(c0, covered) << "sequence " << s << ": a column between sequences nobody writes";
        const int64_t stop = s + 1 < seqs ? sm90_vt_col0(flat0 + lens[s], s + 1) : cols;
        EXPECT_LE(end, stop) << "sequence " << s << " overlaps the next";
        covered = stop;
        flat0 += lens[s];
    }
    EXPECT_EQ(covered, cols);
}

TEST(Sm90Tf32Layout, SequenceColumnsTileTheCopy) {
    check_columns({1});
    check_columns({8});
    check_columns({7, 9, 1, 0, 0, 16, 3});
    check_columns({0, 0, 0, 5});
    check_columns(std::vector<int64_t>(4, 1025));  // dense B4 S1025
    std::mt19937 rng(7);
    for (int t = 0; t < 200; ++t) {
        std::vector<int64_t> lens(1 + rng() % 12);
        for (auto &l : lens) l = rng() % 5 == 0 ? 0 : int64_t(rng() % 300);
        check_columns(lens);
    }
}

// Column c of an 8-key group holds key order(c): a permutation, with thread t of a quad finding
// its accumulator keys 2t, 2t + 1 at the A fragment's k-columns t, t + 4.
TEST(Sm90Tf32Layout, KeyOrderIsTheFragmentMap) {
    bool seen[8] = {};
    for (int c = 0; c < 8; ++c) {
        ASSERT_GE(tf32_key_order(c), 0);
        ASSERT_LT(tf32_key_order(c), 8);
        EXPECT_FALSE(seen[tf32_key_order(c)]) << c;
        seen[tf32_key_order(c)] = true;
    }
    for (int t = 0; t < 4; ++t) {
        EXPECT_EQ(tf32_key_order(t), 2 * t);
        EXPECT_EQ(tf32_key_order(t + 4), 2 * t + 1);
    }
}

fattn::AttnFwdParams params(int64_t B, int64_t S, int64_t hq, int64_t hkv, int64_t d) {
    fattn::AttnFwdParams p{};
    p.batch = B, p.seqlen_q = p.seqlen_kv = p.total_q = p.total_kv = S;
    p.hq = hq, p.hkv = hkv, p.d = p.dim_v = d;
    p.dtype = FATTN_F32;
    p.prec = FATTN_PREC_TF32;
    return p;
}

// The staged copies exist only where their family runs (fwd: K rows + Vᵀ; bwd: Kᵀ, Qᵀ, dOᵀ), after
// every other region, 256-byte aligned, disjoint, and as large as the kernels index.
// Head dims below the bucket: the copies are the bucket's width (zeros past D).
TEST(Sm90Tf32Layout, WorkspaceRegions) {
    for (auto [d, db] : {std::pair<int64_t, int>{128, 128}, {96, 128}, {40, 64}}) {
        SCOPED_TRACE(d);
        const fattn::AttnFwdParams p = params(3, 1000, 8, 2, d);
        Choice portable;
        portable.family = portable.fwd_family = Family::MMA_TF32;
        portable.d_bucket = db;
        Choice sm90 = portable;
        sm90.family = sm90.fwd_family = Family::SM90_TF32;
        for (fattn_dir dir : {FATTN_DIR_FWD, FATTN_DIR_BWD}) {
            const Workspace a = Workspace::layout(p, portable, dir), w = Workspace::layout(p, sm90, dir);
            EXPECT_EQ(a.kr_bytes + a.tr_bytes, 0u);
            const int64_t rows = p.batch * p.total_kv, cols = sm90_vt_cols(rows, p.batch);
            EXPECT_EQ(w.kr_rows, rows);
            EXPECT_EQ(w.vt_cols, cols);
            // K rows: the forward's copy; the backward reads k and v in place
            if (dir == FATTN_DIR_FWD) EXPECT_GE(w.kr_bytes, size_t(p.hkv * rows * db * 4));
            else EXPECT_EQ(w.kr_bytes, 0u);
            EXPECT_GE(w.tr_bytes, size_t(p.hkv * db * cols * 4));
            EXPECT_GE(dir == FATTN_DIR_FWD ? w.kr_off : w.tr_off, a.total);  // the portable regions keep their offsets
            EXPECT_EQ(w.kr_off % 256, 0u);
            EXPECT_EQ(w.tr_off % 256, 0u);
            if (dir == FATTN_DIR_FWD) EXPECT_GE(w.tr_off, w.kr_off + w.kr_bytes);
            EXPECT_GE(w.total, w.tr_off + w.tr_bytes);
            if (dir == FATTN_DIR_BWD) {  // the dK/dV kernel's query side: Qᵀ, dOᵀ (its Q, dO rows: in place)
                const int64_t qrows = p.batch * p.total_q, qcols = sm90_vt_cols(qrows, p.batch);
                EXPECT_EQ(w.q_rows, qrows);
                EXPECT_EQ(w.q_cols, qcols);
                EXPECT_GE(w.q_t_bytes, size_t(p.hq * db * qcols * 4));
                EXPECT_GE(w.qt_off, w.tr_off + w.tr_bytes);
                EXPECT_GE(w.dot_off, w.qt_off + w.q_t_bytes);
                EXPECT_GE(w.total, w.dot_off + w.q_t_bytes);
                // nothing else: the staged regions are K, V rows, Kᵀ, Qᵀ and dOᵀ
                EXPECT_LE(w.total, a.total + 3 * 256 + w.tr_bytes + 2 * w.q_t_bytes);
                for (size_t off : {w.qt_off, w.dot_off}) EXPECT_EQ(off % 256, 0u);
            }
        }
        // The forward's family alone decides its copies; the backward's alone decides its own.
        Choice fwd_only = portable;
        fwd_only.fwd_family = Family::SM90_TF32;
        EXPECT_GT(Workspace::layout(p, fwd_only, FATTN_DIR_FWD).tr_bytes, 0u);
        EXPECT_EQ(Workspace::layout(p, fwd_only, FATTN_DIR_BWD).tr_bytes, 0u);
    }
}

// The backward's passes of kv heads (workspace.h: tf32_bwd_pass_kv_heads): one pass while all the
// copies fit within the cap or a smaller pass would leave the dK/dV grid under min_ctas; else
// equal passes of as many heads as the cap or the grid floor needs, never more than Hkv heads.
TEST(Sm90Tf32Layout, BackwardPassesOfKvHeads) {
    using fattn::cuda::attn::tf32_bwd_pass_kv_heads;
    // B2 H16 S4096 D128 (the TF32 row): a kv head's copies (Kᵀ, Qᵀ, dOᵀ) are 3/16 of |Q|'s
    // 64 MiB, the dK/dV grid 2 · 32 key tiles per kv head; two waves of 132 SMs need 5 heads ->
    // 4 passes of 4.
    const int64_t mib = 1 << 20, per = 3 * 4 * mib, cap = 64 * mib;
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, per, cap, 64, 264), 4);
    // Without the grid floor the cap alone: 5 heads (60 MiB) at most -> 4 passes of 4.
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, per, cap, 64, 0), 4);
    // Copies of 7/16 |Q| a head (K, V, Q, dO rows too): 2 heads (56 MiB) -> 8 passes of 2.
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, 7 * 4 * mib, cap, 64, 0), 2);
    // The HOT-Step sites (B1 H16 S625): 5 key tiles, one pass whatever the cap says.
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, per, cap, 5, 264), 16);
    // Everything fits the cap: one pass.
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, per, 16 * per, 1 << 20, 264), 16);
    // A head larger than the cap still runs, one per pass; one kv head (MQA) is one pass.
    EXPECT_EQ(tf32_bwd_pass_kv_heads(8, 10 * cap, cap, 1 << 20, 0), 1);
    EXPECT_EQ(tf32_bwd_pass_kv_heads(1, per, 1, 1 << 20, 0), 1);
    // Equal passes: 16 heads at most 5 per pass -> 4 passes of 4, not 5 + 5 + 5 + 1; 7 at most
    // 3 -> 3 passes of 3 (3 + 3 + 1).
    EXPECT_EQ(tf32_bwd_pass_kv_heads(16, per, 5 * per, 1 << 20, 0), 4);
    EXPECT_EQ(tf32_bwd_pass_kv_heads(7, per, 3 * per, 1 << 20, 0), 3);
    std::mt19937 rng(11);
    for (int t = 0; t < 2000; ++t) {
        const int64_t hkv = 1 + rng() % 64, per_h = 1 + rng() % 1000, cap_b = rng() % 20000, units = 1 + rng() % 600;
        const int64_t g = tf32_bwd_pass_kv_heads(hkv, per_h, cap_b, units, 264);
        ASSERT_GE(g, 1);
        ASSERT_LE(g, hkv);
        const int64_t passes = (hkv + g - 1) / g;
        const int64_t want = std::max(std::max<int64_t>(1, cap_b / per_h), (264 + units - 1) / units);
        EXPECT_EQ(g, (hkv + passes - 1) / passes) << t;  // equal passes
        if (want >= hkv) EXPECT_EQ(g, hkv) << t;           // one pass when either rule allows all
        else {
            EXPECT_LE(g, want) << t;                                   // no pass above what the rules allow
            EXPECT_GT((hkv + passes - 2) / (passes - 1), want) << t;  // and no more passes than needed
        }
    }
}

// The backward's regions hold one pass's heads; the forward's every head.
TEST(Sm90Tf32Layout, BackwardRegionsHoldOnePass) {
    const fattn::AttnFwdParams p = params(2, 1000, 8, 4, 64);
    Choice all;
    all.family = all.fwd_family = Family::SM90_TF32;
    all.d_bucket = 64;
    Choice two = all;
    two.tf32_pass_kv_heads = 2;
    const Workspace wa = Workspace::layout(p, all, FATTN_DIR_BWD), w2 = Workspace::layout(p, two, FATTN_DIR_BWD);
    EXPECT_EQ(wa.pass_kv_heads, 4);
    EXPECT_EQ(w2.pass_kv_heads, 2);
    EXPECT_EQ(w2.kr_bytes, 0u);  // the backward's K rows: in place
    EXPECT_EQ(w2.tr_bytes, size_t(2 * p.d * w2.vt_cols * 4));
    EXPECT_EQ(w2.q_t_bytes, size_t(2 * p.group() * p.d * w2.q_cols * 4));  // the pass's query heads
    EXPECT_EQ(wa.tr_bytes, 2 * w2.tr_bytes);
    EXPECT_LT(w2.total, wa.total);
    // A pass count above Hkv (or 0) is every head; the forward ignores the passes.
    Choice many = all;
    many.tf32_pass_kv_heads = 9;
    EXPECT_EQ(Workspace::layout(p, many, FATTN_DIR_BWD).total, wa.total);
    EXPECT_EQ(Workspace::layout(p, two, FATTN_DIR_FWD).total, Workspace::layout(p, all, FATTN_DIR_FWD).total);
}

}  // namespace

#ifdef FATTN_WITH_CUDA
// Selection takes SM90_TF32 only where every kernel of the family fits the device's shared memory:
// the dK/dV kernel (231.5 KB at D128) is the largest, above the dQ kernel (225 KB) that was
// checked alone before. A device between the two must get the portable family (AUTO) or a refusal
// (SM90 pinned), not a launch that fails. Needs a library with sm_90a code (FATTN_CUDA_ARCHS
// with 90a): skipped otherwise.
TEST(Sm90Tf32Layout, SelectionCountsTheLargestKernelsSharedMemory) {
    using fattn::cuda::attn::choose;
    fattn::AttnFwdParams p = params(2, 1000, 8, 2, 128);
    alignas(16) static float dummy[4];
    p.q = p.k = p.v = dummy;
    p.q_ss = p.k_ss = p.v_ss = 8 * 128, p.q_sh = p.k_sh = p.v_sh = 128;
    p.q_sb = p.k_sb = p.v_sb = 1000 * 8 * 128;
    fattn::cuda::DeviceInfo dev;
    dev.sm_major = 9, dev.sm_minor = 0, dev.num_sms = 132;
    dev.smem_optin = 232448;  // H100/H200: 227 KB
    Choice c;
    std::string why;
    ASSERT_EQ(choose(p, dev, &c, &why), FATTN_OK) << why;
    if (c.family != Family::SM90_TF32) GTEST_SKIP() << "this library has no sm_90a code";
    EXPECT_EQ(c.fwd_family, Family::SM90_TF32);
    EXPECT_EQ(c.tf32_pass_kv_heads, 2);  // small: one pass of both kv heads
    {  // B2 H16 S4096 D128 on 132 SMs: four passes of four kv heads (BackwardPassesOfKvHeads)
        fattn::AttnFwdParams big = params(2, 4096, 16, 16, 128);
        big.q = big.k = big.v = dummy;
        big.q_ss = big.k_ss = big.v_ss = 16 * 128, big.q_sh = big.k_sh = big.v_sh = 128;
        big.q_sb = big.k_sb = big.v_sb = 4096 * 16 * 128;
        Choice cb;
        ASSERT_EQ(choose(big, dev, &cb, &why), FATTN_OK) << why;
        EXPECT_EQ(cb.tf32_pass_kv_heads, FATTN_TF32_BWD_PASSES ? 4 : 16);  // on by default; built without them: one pass
    }

    {  // the backward reads k and v in place through TMA: an odd k (one float into its buffer, or a
       // token stride off the 16-byte grid) keeps the sm90 forward and takes the portable backward
       // under AUTO, and is refused with the reason under SM90
        alignas(16) static float buf[8];
        for (int odd = 0; odd < 2; ++odd) {
            fattn::AttnFwdParams o = p;
            if (odd == 0) o.k = buf + 1;
            else o.v_ss = 8 * 128 + 1;
            Choice co;
            ASSERT_EQ(choose(o, dev, &co, &why), FATTN_OK) << why;
            EXPECT_EQ(co.fwd_family, Family::SM90_TF32) << odd;
            EXPECT_EQ(co.family, Family::MMA_TF32) << odd;
            fattn::cuda::DeviceInfo pinned = dev;
            pinned.family = FATTN_CUDA_FAMILY_SM90;
            why.clear();
            EXPECT_EQ(choose(o, pinned, &co, &why), FATTN_ERR_UNSUPPORTED) << odd;
            EXPECT_NE(why.find("k and v must be 16-byte aligned"), std::string::npos) << why;
        }
    }

    const size_t dq = fattn::cuda::attn::sm90_dq_smem(128, 4), dkdv = fattn::cuda::attn::sm90_dkdv_smem(128, 4);
    ASSERT_LT(dq, dkdv);
    dev.smem_optin = (dq + dkdv) / 2;  // the dQ kernel fits, the dK/dV kernel does not
    c = Choice{};
    ASSERT_EQ(choose(p, dev, &c, &why), FATTN_OK) << why;
    EXPECT_EQ(c.family, Family::MMA_TF32);
    EXPECT_EQ(c.fwd_family, Family::MMA_TF32);

    dev.family = FATTN_CUDA_FAMILY_SM90;
    c = Choice{};
    why.clear();
    EXPECT_EQ(choose(p, dev, &c, &why), FATTN_ERR_UNSUPPORTED);
    EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
}
#endif

#ifdef FATTN_WITH_CUDA
// The 16-bit sm90 kernels take every D = Dv that is a multiple of 8 up to 128 (on the kernels of
// bucket 64 or 128), and above 128 those of bucket 256 (FATTN_SM90_D256, else the portable
// bucket 256); tf32 64 and 128, every multiple of 4 up to 128 with FATTN_SM90_TF32_PAD. Needs a
// library with sm_90a code: skipped otherwise.
TEST(Sm90Selection, HeadDimsOfTheSm90Family) {
    using fattn::cuda::attn::choose;
    fattn::cuda::DeviceInfo dev;
    dev.sm_major = 9, dev.sm_minor = 0, dev.num_sms = 132, dev.smem_optin = 232448;
    alignas(16) static float dummy[4];
    auto pick = [&](fattn_dtype dt, fattn_prec prec, int64_t d) {
        fattn::AttnFwdParams p = params(2, 256, 4, 2, d);
        p.dtype = dt, p.prec = prec;
        p.q = p.k = p.v = dummy;
        // rows padded to whole 16-byte chunks, so that only the head-dim rule can refuse
        const int64_t unit = dt == FATTN_F32 ? 4 : 8, w = (d + unit - 1) / unit * unit;
        p.q_ss = 4 * w, p.k_ss = p.v_ss = 2 * w, p.q_sh = p.k_sh = p.v_sh = w;
        p.q_sb = 256 * 4 * w, p.k_sb = p.v_sb = 256 * 2 * w;
        Choice c;
        std::string why;
        EXPECT_EQ(choose(p, dev, &c, &why), FATTN_OK) << why;
        return c;
    };
    if (pick(FATTN_BF16, FATTN_PREC_NATIVE, 64).family != Family::SM90_NATIVE) GTEST_SKIP() << "no sm_90a code";
    for (int64_t d : {8, 32, 40, 72, 96, 120, 128}) {
        const Choice c = pick(FATTN_BF16, FATTN_PREC_NATIVE, d);
        EXPECT_EQ(c.family, Family::SM90_NATIVE) << d;
        EXPECT_EQ(c.fwd_family, Family::SM90_NATIVE) << d;
        EXPECT_EQ(c.d_bucket, d <= 64 ? 64 : 128) << d;
    }
    EXPECT_EQ(pick(FATTN_F16, FATTN_PREC_NATIVE, 100).family, Family::MMA_NATIVE);  // not a multiple of 8
    for (int64_t d : {4, 40, 64, 96, 124, 128}) {  // tf32: 64, 128, or (FATTN_SM90_TF32_PAD) multiples of 4 up to 128
        const Choice c = pick(FATTN_F32, FATTN_PREC_TF32, d);
        const Family want = FATTN_SM90_TF32_PAD || d == 64 || d == 128 ? Family::SM90_TF32 : Family::MMA_TF32;
        EXPECT_EQ(c.family, want) << d;
        EXPECT_EQ(c.fwd_family, want) << d;
        EXPECT_EQ(c.d_bucket, d <= 64 ? 64 : 128) << d;
    }
    EXPECT_EQ(pick(FATTN_F32, FATTN_PREC_TF32, 59).family, Family::MMA_TF32);  // not a multiple of 4
    for (int64_t d : {136, 160, 192, 256}) {  // bucket 256: sm90 (FATTN_SM90_D256) or portable
        const Choice c = pick(FATTN_BF16, FATTN_PREC_NATIVE, d);
        const Family want = FATTN_SM90_D256 ? Family::SM90_NATIVE : Family::MMA_NATIVE;
        EXPECT_EQ(c.fwd_family, want) << d;
        EXPECT_EQ(c.family, want) << d;
        EXPECT_EQ(c.d_bucket, 256) << d;
    }
    EXPECT_EQ(pick(FATTN_F32, FATTN_PREC_TF32, 192).family, Family::MMA_TF32);  // tf32: 64 and 128 only
}
#endif
