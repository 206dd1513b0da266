// test_attn_emu.cpp — the fused CUDA softmax-attention kernels of the portable families
// (src/cuda/attn: mma.sync bf16 / f16 at prec NATIVE, tf32 at prec TF32, with the bias map,
// ceiling, δ and stats-mode pre-passes) run through the CPU emulation (src/emu) and the launch
// sequence the CUDA backend runs (sequence.h), and the strict-f32 scalar kernels (prec F32),
// against the float64 oracle: o, lse, dq, dk, dv
// for causal / window masks, GQA, cross lengths, varlen, D != Dv, head-dim buckets 64, 128, 256,
// additive biases broadcast every way, -inf tiles and a finfo.min padding row, strided views that
// rule out the 16-byte loads; the bias gradient (mma_dbias_kernel, sc_dbias_kernel) for every
// broadcast pattern.
// Also: results bitwise independent of the threads' order.
// Tolerance: rms(out - ref) / rms(ref) below 0.01 (bf16), 0.004 (f16), 0.002 (tf32), 2e-6 (strict
// f32 on f32 inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/ref/attn_ref.h"
#include "emu/attn_emu.h"
#include "emu/emu.h"

namespace {

using namespace fattn;

struct Case {
    const char *name;
    fattn_dtype dt = FATTN_BF16;
    int64_t B = 2, Sq = 130, Skv = 150, Hq = 4, Hkv = 2, D = 64, Dv = 64;
    int causal = 0;                 // 0 none, 1 top-left, 2 bottom-right
    int64_t wl = -1, wr = -1;       // window (with causal: wr is folded to 0)
    int bias = 0;                   // 0 none; 1 [B,Hq,Sq,Skv]; 2 [1,1,Sq,Skv]; 3 [B,1,1,Skv];
                                    // 4 [1,Hq,Sq,Skv]; 5 [B,Hq,1,Skv]
    bool dbias = false;             // the backward also computes the bias gradient
    bool strict = false;            // prec F32: the strict-f32 scalar kernels (any input dtype)
    fattn_dtype bias_dt = FATTN_F32;
    bool varlen = false;            // B = 1, three packed sequences
    bool pad = 0;                   // extra elements per token row: no 16-byte loads
    bool sm90 = false;              // on the sm_90 device: the sm90 families (wgmma, TMA, mbarriers)
    int64_t pass_heads = 0;         // sm90 tf32: the backward's kv heads per pass (0: selection's)
    bool d256 = false;              // the sm90 kernels at D 256 (not in a FATTN_SM90_D256=0 library)
    bool tf32pad = false;           // the sm90 tf32 kernels below their bucket (FATTN_SM90_TF32_PAD selects them)
};

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<uint8_t> pack(const std::vector<float> &x, fattn_dtype t) {
    std::vector<uint8_t> b(x.size() * fattn_dtype_size(t));
    for (size_t i = 0; i < x.size(); ++i) store_f32(b.data(), t, int64_t(i), x[i]);
    return b;
}

struct Problem {
    Case c;
    std::vector<uint8_t> q, k, v, o, dout, dq, dk, dv, bias;
    std::vector<float> lse, dbias;
    std::vector<int32_t> cu_q, cu_kv;
    int64_t nb = 1, nh = 1, ni = 1;  // the bias's (and dbias's) extents over B, Hq, Sq
    AttnBwdParams p{};

    explicit Problem(const Case &cs) : c(cs) {
        if (c.varlen) {
            c.B = 1;
            cu_q = {0, 40, 41, int32_t(c.Sq)};
            cu_kv = {0, 70, 100, int32_t(c.Skv)};
        }
        const int64_t pad = c.pad ? 3 : 0;
        const int64_t B = c.B, Sq = c.Sq, Skv = c.Skv, Hq = c.Hq, Hkv = c.Hkv, D = c.D, Dv = c.Dv;
        // token rows of width heads*dim + pad (pad > 0 breaks the 16-byte alignment of rows)
        const int64_t wq = Hq * D + pad, wk = Hkv * D + pad, wv = Hkv * Dv + pad, wo = Hq * Dv + pad;
        std::mt19937 rng(7);
        std::normal_distribution<float> nd;
        auto rnd = [&](size_t n) {
            std::vector<float> x(n);
            for (auto &e : x) e = round_to(c.dt, nd(rng));
            return x;
        };
        q = pack(rnd(size_t(B * Sq * wq)), c.dt), k = pack(rnd(size_t(B * Skv * wk)), c.dt);
        v = pack(rnd(size_t(B * Skv * wv)), c.dt), dout = pack(rnd(size_t(B * Sq * wo)), c.dt);
        const size_t es = fattn_dtype_size(c.dt);
        o.assign(size_t(B * Sq * wo) * es, 0xFF), dq.assign(size_t(B * Sq * wq) * es, 0xFF);
        dk.assign(size_t(B * Skv * wk) * es, 0xFF), dv.assign(size_t(B * Skv * wv) * es, 0xFF);
        lse.assign(size_t(B * Hq * Sq), NAN);

        p.batch = c.varlen ? int64_t(cu_q.size()) - 1 : B;
        p.total_q = Sq, p.total_kv = Skv;
        p.seqlen_q = p.seqlen_kv = 0;
        if (c.varlen) {
            for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
                p.seqlen_q = std::max<int64_t>(p.seqlen_q, cu_q[s + 1] - cu_q[s]);
                p.seqlen_kv = std::max<int64_t>(p.seqlen_kv, cu_kv[s + 1] - cu_kv[s]);
            }
            p.cu_seqlens_q = cu_q.data(), p.cu_seqlens_kv = cu_kv.data();
        } else {
            p.seqlen_q = Sq, p.seqlen_kv = Skv;
        }
        p.hq = Hq, p.hkv = Hkv, p.d = D, p.dim_v = Dv, p.dtype = c.dt;
        p.prec = c.strict ? FATTN_PREC_F32 : c.dt == FATTN_F32 ? FATTN_PREC_TF32 : FATTN_PREC_NATIVE;
        p.algo = FATTN_ALGO_FUSED;
        p.scale = float(1 / std::sqrt(double(D)));
        p.q = q.data(), p.q_sb = Sq * wq, p.q_ss = wq, p.q_sh = D;
        p.k = k.data(), p.k_sb = Skv * wk, p.k_ss = wk, p.k_sh = D;
        p.v = v.data(), p.v_sb = Skv * wv, p.v_ss = wv, p.v_sh = Dv;
        p.o = o.data(), p.o_sb = Sq * wo, p.o_ss = wo, p.o_sh = Dv;
        p.lse = lse.data(), p.lse_sb = Hq * Sq, p.lse_sh = Sq;
        p.dout = dout.data(), p.do_sb = p.o_sb, p.do_ss = p.o_ss, p.do_sh = p.o_sh;
        p.dq = dq.data(), p.dq_sb = p.q_sb, p.dq_ss = p.q_ss, p.dq_sh = p.q_sh;
        p.dk = dk.data(), p.dk_sb = p.k_sb, p.dk_ss = p.k_ss, p.dk_sh = p.k_sh;
        p.dv = dv.data(), p.dv_sb = p.v_sb, p.dv_ss = p.v_ss, p.dv_sh = p.v_sh;
        p.win_left = c.wl, p.win_right = c.causal ? 0 : c.wr;
        p.bottom_right = c.causal == 2;
        p.nthreads = 1;
        if (c.bias) make_bias();
    }

    // Values in [-2, 2], a -inf block covering whole 64×64 tiles, scattered -inf entries, and
    // (full bias) a padding row at -1e30 on every key: its ceiling needs the stats-mode forward.
    void make_bias() {
        nb = c.bias == 2 || c.bias == 4 ? 1 : c.B;
        nh = c.bias == 1 || c.bias == 4 || c.bias == 5 ? c.Hq : 1;
        ni = c.bias == 3 || c.bias == 5 ? 1 : c.Sq;
        std::vector<float> b(size_t(nb * nh * ni * c.Skv));
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-2.f, 2.f);
        for (int64_t x = 0; x < nb * nh; ++x)
            for (int64_t i = 0; i < ni; ++i)
                for (int64_t j = 0; j < c.Skv; ++j) {
                    float &e = b[size_t((x * ni + i) * c.Skv + j)];
                    e = u(rng);
                    if ((i * 7 + j * 3 + x) % 11 == 0) e = -kInf;
                    if (ni > 1 && i < 64 && j >= 64 && j < 128) e = -kInf;
                    if (c.bias == 1 && i == 70) e = -1e30f;
                }
        bias = pack(b, c.bias_dt);
        p.bias = bias.data(), p.bias_dtype = c.bias_dt;
        p.bias_si = ni > 1 ? c.Skv : 0;
        p.bias_sh = nh > 1 ? ni * c.Skv : 0;
        p.bias_sb = nb > 1 ? nh * ni * c.Skv : 0;
        if (c.dbias) {
            dbias.assign(b.size(), NAN);
            p.dbias = dbias.data(), p.want_dbias = true;
            p.dbias_si = p.bias_si, p.dbias_sh = p.bias_sh, p.dbias_sb = p.bias_sb;
        }
    }

    cuda::attn::Choice ch;  // what selection chose (run)
    fattn_status run(std::string *err, bool reverse = false) {
        if (fattn_status s = emu::attn_choose(p, &ch, err, c.sm90); s != FATTN_OK) return s;
        if (c.pass_heads) ch.tf32_pass_kv_heads = c.pass_heads;
        // The selection is libfattn's where it has CUDA, whose switches may differ from this
        // emulation's: where it does not take these kernels, take them by hand (the check of the
        // family below then holds by construction; where it takes them, it tests the selection).
        if (c.d256 && !cuda::attn::selects_sm90_d256()) ch.fwd_family = ch.family = cuda::attn::Family::SM90_NATIVE;
        if (c.tf32pad && !cuda::attn::selects_sm90_tf32_pad()) ch.fwd_family = ch.family = cuda::attn::Family::SM90_TF32;
        std::vector<uint8_t> ws(emu::attn_workspace_bytes(p, ch, FATTN_DIR_FWD) + 1, 0xFF);
        if (fattn_status s = emu::attn_fwd(p, ch, ws.data(), err, reverse); s != FATTN_OK) return s;
        ws.assign(emu::attn_workspace_bytes(p, ch, FATTN_DIR_BWD) + 1, 0xFF);
        return emu::attn_bwd(p, ch, ws.data(), err, reverse);
    }
};

// rms(x − ref) / rms(ref) over the elements ref holds (dense [.., heads, dim] views of the
// problem's padded rows: ref index e of row r maps to r·width + e % (heads·dim)).
double ratio(const std::vector<double> &ref, const std::vector<uint8_t> &buf, fattn_dtype t, int64_t row,
             int64_t width, bool *finite) {
    double se = 0, sr = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
        const int64_t r = int64_t(e) / row, c = int64_t(e) % row;
        const double x = load_f32(buf.data(), t, r * width + c);
        *finite = *finite && std::isfinite(x);
        se += (x - ref[e]) * (x - ref[e]);
        sr += ref[e] * ref[e];
    }
    return std::sqrt(se / (sr > 0 ? sr : 1e-300));
}

// Which dbias entries some logit reaches: a (batch, head, row) summing into it whose row sees the key
// (mask, same sequence, finite bias) and sees any key at all. Every other entry must be exactly 0.
std::vector<bool> live_entries(const Problem &pr, const ref::Problem &rp, const ref::Tensors &rt) {
    const int64_t B = rp.B, H = rp.Hq, Sq = rp.Sq, Skv = rp.Skv;
    std::vector<bool> live(pr.dbias.size(), false);
    for (int64_t s = 0; s < rp.num_seqs(); ++s) {
        const int64_t b = rp.cu_q.empty() ? s : 0, q0 = rp.cu_q.empty() ? 0 : rp.cu_q[size_t(s)];
        const int64_t k0 = rp.cu_kv.empty() ? 0 : rp.cu_kv[size_t(s)];
        const int64_t lq = rp.cu_q.empty() ? Sq : rp.cu_q[size_t(s) + 1] - q0;
        const int64_t lk = rp.cu_kv.empty() ? Skv : rp.cu_kv[size_t(s) + 1] - k0;
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < lq; ++i) {
                std::vector<int64_t> seen;
                for (int64_t j = 0; j < lk; ++j) {
                    const double bv = rt.bias[size_t(((b * H + h) * Sq + q0 + i) * Skv + k0 + j)];
                    if (ref::key_allowed(rp.mask, i, j, lq, lk) && bv != -INFINITY) seen.push_back(j);
                }
                for (int64_t j : seen) {
                    const int64_t rb = pr.nb > 1 ? b : 0, rh = pr.nh > 1 ? h : 0, ri = pr.ni > 1 ? q0 + i : 0;
                    live[size_t(((rb * pr.nh + rh) * pr.ni + ri) * Skv + k0 + j)] = true;
                }
            }
    }
    return live;
}

class AttnEmu : public ::testing::TestWithParam<Case> {};

// o, dq, dk, dv (and dbias) of pr (run) against the float64 oracle: rms ratios under tol (dbias
// 2 tol, exactly 0 where nothing sums in), lse within lse_tol (-inf where the oracle's is).
void expect_oracle(Problem &pr, double tol, double lse_tol) {
    ref::Problem rp;
    ref::Tensors rt;
    ref::gather(pr.p, &rp, &rt);
    ref::Outputs ro;
    ref::attn_fwd(rp, rt, &ro);
    ref::attn_bwd(rp, rt, &ro, pr.c.dbias);
    const Case &c = pr.c;
    std::string line;
    auto check = [&](const char *n, const std::vector<double> &ref, const std::vector<uint8_t> &buf, int64_t heads,
                     int64_t dim, int64_t stride) {
        bool fin = true;
        const double r = ratio(ref, buf, c.dt, heads * dim, stride, &fin);
        line += std::string(" ") + n + " " + std::to_string(r);
        EXPECT_TRUE(fin) << n << " has a non-finite element";
        EXPECT_LT(r, tol) << n;
    };
    check("o", ro.o, pr.o, c.Hq, c.Dv, pr.p.o_ss);
    check("dq", ro.dq, pr.dq, c.Hq, c.D, pr.p.dq_ss);
    check("dk", ro.dk, pr.dk, c.Hkv, c.D, pr.p.dk_ss);
    check("dv", ro.dv, pr.dv, c.Hkv, c.Dv, pr.p.dv_ss);
    // lse: -inf exactly where the oracle's row sees no key, else within 1e-3 (natural log units)
    double lmax = 0;
    for (size_t i = 0; i < ro.lse.size(); ++i) {
        if (std::isinf(ro.lse[i])) {
            EXPECT_EQ(pr.lse[i], -kInf) << "lse row " << i;
            continue;
        }
        lmax = std::max(lmax, std::fabs(double(pr.lse[i]) - ro.lse[i]));
    }
    EXPECT_LT(lmax, lse_tol);
    line += " lse " + std::to_string(lmax);
    if (c.dbias) {
        // against the oracle's dS summed over the broadcast dims; exactly 0 where nothing sums in
        // (a -inf bias, a masked key, another sequence's key, a fully masked row)
        std::vector<double> rd;
        ref::reduce_dbias(rp, ro.dbias, pr.nb == 1 && c.B > 1, pr.nh == 1 && c.Hq > 1, pr.ni == 1 && c.Sq > 1, &rd);
        ASSERT_EQ(rd.size(), pr.dbias.size());
        double se = 0, sr = 0;
        int64_t zeros = 0, nonzero_where_zero = 0;
        for (size_t i = 0; i < rd.size(); ++i) {
            se += (pr.dbias[i] - rd[i]) * (pr.dbias[i] - rd[i]);
            sr += rd[i] * rd[i];
        }
        const std::vector<bool> live = live_entries(pr, rp, rt);
        for (size_t i = 0; i < rd.size(); ++i) {
            if (!live[i]) zeros++, nonzero_where_zero += pr.dbias[i] != 0.f;
        }
        const double r = std::sqrt(se / sr);
        EXPECT_LT(r, 2 * tol) << "dbias";
        EXPECT_EQ(nonzero_where_zero, 0) << "dbias entries with no contribution must be exactly 0 (" << zeros << " such)";
        line += " dbias " + std::to_string(r) + " (" + std::to_string(zeros) + " exact zeros)";
    }
    ::testing::Test::RecordProperty("err", line);
    if (getenv("FATTN_EMU_VERBOSE")) {
        // FNV-1a over the outputs' bytes: a refactor meant to keep the arithmetic shows the same value
        uint64_t hsh = 1469598103934665603ull;
        for (const std::vector<uint8_t> *b : {&pr.o, &pr.dq, &pr.dk, &pr.dv})
            for (uint8_t x : *b) hsh = (hsh ^ x) * 1099511628211ull;
        printf("%s:%s bits %016llx\n", c.name, line.c_str(), (unsigned long long)hsh);
    }
}

TEST_P(AttnEmu, MatchesOracle) {
    if (GetParam().d256 && !emu::attn_sm90_d256_built()) GTEST_SKIP() << "the sm90 kernels at D 256 are not built here";
    Problem pr(GetParam());
    std::string err;
    ASSERT_EQ(pr.run(&err), FATTN_OK) << err;
    if (pr.c.sm90) {  // the case runs the family it is for
        const auto want = pr.c.dt == FATTN_F32 ? cuda::attn::Family::SM90_TF32 : cuda::attn::Family::SM90_NATIVE;
        EXPECT_EQ(int(pr.ch.fwd_family), int(want));
        EXPECT_EQ(int(pr.ch.family), int(want));
        if (pr.c.d256) EXPECT_EQ(pr.ch.d_bucket, 256);
        // the fused dQ (its accumulator in the workspace) exactly where this library has it: 16-bit, no bias
        const bool fused = emu::attn_sm90_dq_fused_built() && pr.c.dt != FATTN_F32 && !pr.c.bias && !pr.c.d256;
        EXPECT_EQ(pr.ch.dq_fused, fused);
    }
    // strict f32 on f32 inputs: fp32 rounding only; 16-bit inputs: the outputs' rounding
    const fattn_dtype dt = pr.c.dt;
    const bool strict32 = pr.c.strict && dt == FATTN_F32;
    expect_oracle(pr, dt == FATTN_BF16 ? 0.01 : dt == FATTN_F16 ? 0.004 : pr.c.strict ? 2e-6 : 0.002,
                  dt == FATTN_BF16 ? 2e-2 : strict32 ? 1e-5 : 4e-3);
}

// The tf32 cases (f32 inputs at prec TF32: the portable and sm90 tf32 kernels, the pre-pass's
// rounded copies) with the emulation's tf32 products exact (emu::set_exact_tf32): the kernels then
// compute in f32 and meet the oracle at the strict f32 kernels' bars, far below the tf32 rounding
// MatchesOracle must allow.
class AttnEmuExact : public ::testing::TestWithParam<Case> {};
TEST_P(AttnEmuExact, ExactTf32MeetsOracle) {
    if (GetParam().d256 && !emu::attn_sm90_d256_built()) GTEST_SKIP() << "the sm90 kernels at D 256 are not built here";
    Problem pr(GetParam());
    std::string err;
    emu::set_exact_tf32(true);
    const fattn_status s = pr.run(&err);
    emu::set_exact_tf32(false);
    ASSERT_EQ(s, FATTN_OK) << err;
    expect_oracle(pr, 2e-6, 1e-5);
}

TEST_P(AttnEmu, Determinism) {
    if (GetParam().d256 && !emu::attn_sm90_d256_built()) GTEST_SKIP() << "the sm90 kernels at D 256 are not built here";
    Problem a(GetParam()), b(GetParam());
    std::string err;
    ASSERT_EQ(a.run(&err), FATTN_OK) << err;
    ASSERT_EQ(b.run(&err, /*reverse=*/true), FATTN_OK) << err;
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4));
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(0, std::memcmp(a.dbias.data(), b.dbias.data(), a.dbias.size() * 4));
}

Case mk(const char *n, fattn_dtype dt) {
    Case c;
    c.name = n, c.dt = dt;
    return c;
}

std::vector<Case> cases() {
    std::vector<Case> v;
    Case c = mk("bf16_gqa_causal", FATTN_BF16);
    c.causal = 1;
    v.push_back(c);
    c.name = "bf16_gqa_causal_strided", c.pad = true;
    v.push_back(c);
    c = mk("f16_D128_window_bias_b11", FATTN_F16);
    c.D = c.Dv = 128, c.Hq = c.Hkv = 2, c.B = 1, c.wl = 40, c.wr = 20, c.bias = 2;
    v.push_back(c);
    c = mk("tf32_varlen_causal_br", FATTN_F32);
    c.varlen = true, c.causal = 2;
    v.push_back(c);
    c = mk("bf16_full_bias_pad_row", FATTN_BF16);
    c.bias = 1, c.bias_dt = FATTN_BF16, c.Hq = 2, c.Hkv = 1;
    v.push_back(c);
    c = mk("f16_D32_Dv16_keybias_strided", FATTN_F16);
    c.D = 32, c.Dv = 16, c.bias = 3, c.bias_dt = FATTN_F16, c.pad = true, c.Sq = 70, c.Skv = 200;
    v.push_back(c);
    c = mk("tf32_D128_mqa_bias", FATTN_F32);
    c.D = c.Dv = 128, c.Hq = 2, c.Hkv = 1, c.B = 1, c.bias = 1, c.Sq = 100, c.Skv = 90;
    v.push_back(c);
    // head-dim bucket 256 (head dims 129-256: D160 with Dv 256, D256; the dK/dV column split)
    c = mk("bf16_D256_gqa_causal", FATTN_BF16);
    c.D = c.Dv = 256, c.Sq = 100, c.Skv = 120, c.causal = 1;
    v.push_back(c);
    c = mk("f16_D160_Dv256_bias_strided", FATTN_F16);
    c.D = 160, c.Dv = 256, c.B = 1, c.Hq = c.Hkv = 2, c.Sq = 90, c.Skv = 70, c.bias = 1, c.pad = true;
    v.push_back(c);
    c = mk("tf32_D192_varlen_window", FATTN_F32);
    c.D = c.Dv = 192, c.varlen = true, c.wl = 20, c.wr = 10;
    v.push_back(c);
    // prec F32: the strict-f32 scalar kernels (f32 and bf16 inputs), every bucket
    c = mk("strict_f32_gqa_causal_bias_pad_row", FATTN_F32);
    c.strict = true, c.causal = 1, c.bias = 1, c.Hq = 2, c.Hkv = 1;
    v.push_back(c);
    c = mk("strict_bf16_D200_varlen_window", FATTN_BF16);
    c.strict = true, c.D = c.Dv = 200, c.varlen = true, c.wl = 16, c.wr = 8;
    v.push_back(c);
    c = mk("strict_f16_D96_keybias_strided", FATTN_F16);
    c.strict = true, c.D = c.Dv = 96, c.bias = 3, c.bias_dt = FATTN_F16, c.pad = true, c.Sq = 50;
    v.push_back(c);
    // the bias gradient, every broadcast pattern
    c = mk("dbias_bf16_full_causal_pad_row", FATTN_BF16);
    c.bias = 1, c.dbias = true, c.causal = 1, c.Hq = 2, c.Hkv = 1;
    v.push_back(c);
    c = mk("dbias_f16_shared_11SS_gqa_window", FATTN_F16);
    c.bias = 2, c.dbias = true, c.bias_dt = FATTN_F16, c.wl = 30, c.wr = 50;
    v.push_back(c);
    c = mk("dbias_tf32_keybias_B11S", FATTN_F32);
    c.bias = 3, c.dbias = true, c.causal = 2;
    v.push_back(c);
    c = mk("dbias_bf16_1HSS_D128_strided", FATTN_BF16);
    c.bias = 4, c.dbias = true, c.D = c.Dv = 128, c.pad = true, c.Sq = 70;
    v.push_back(c);
    c = mk("dbias_f16_BH1S_varlen", FATTN_F16);
    c.bias = 5, c.dbias = true, c.varlen = true, c.causal = 1;
    v.push_back(c);
    c = mk("dbias_tf32_full_varlen_D32", FATTN_F32);
    c.bias = 1, c.dbias = true, c.varlen = true, c.D = 32, c.Dv = 48;
    v.push_back(c);
    c = mk("dbias_strict_f32_full_causal_pad_row", FATTN_F32);  // sc_dbias_kernel
    c.strict = true, c.bias = 1, c.dbias = true, c.causal = 1, c.Hq = 2, c.Hkv = 1;
    v.push_back(c);
    c = mk("dbias_strict_bf16_BH1S_varlen_D160", FATTN_BF16);
    c.strict = true, c.bias = 5, c.dbias = true, c.varlen = true, c.D = c.Dv = 160;
    v.push_back(c);
    c = mk("dbias_strict_f32_shared_gqa_window", FATTN_F32);
    c.strict = true, c.bias = 2, c.dbias = true, c.wl = 30, c.wr = 50;
    v.push_back(c);
    c = mk("dbias_tf32_D256_shared", FATTN_F32);
    c.bias = 2, c.dbias = true, c.D = c.Dv = 256, c.B = 1, c.Hq = 2, c.Hkv = 1, c.Sq = 70, c.Skv = 80;
    v.push_back(c);
    // the sm90 families on the sm_90 device: bf16/f16 (SM90_NATIVE) and f32 (SM90_TF32), D 64 and
    // 128, masks, GQA, varlen; the tf32 backward in passes of kv heads; dbias after the sm90 backward
    c = mk("sm90_bf16_D128_gqa_causal", FATTN_BF16);
    c.sm90 = true, c.D = c.Dv = 128, c.causal = 1;
    v.push_back(c);
    c = mk("sm90_f16_D64_window_bias", FATTN_F16);
    c.sm90 = true, c.wl = 40, c.wr = 20, c.bias = 2;
    v.push_back(c);
    c = mk("sm90_bf16_D64_varlen_causal_br", FATTN_BF16);
    c.sm90 = true, c.varlen = true, c.causal = 2;
    v.push_back(c);
    c = mk("sm90_tf32_D128_gqa", FATTN_F32);
    c.sm90 = true, c.D = c.Dv = 128, c.B = 1;
    v.push_back(c);
    c = mk("sm90_tf32_D64_varlen_window", FATTN_F32);
    c.sm90 = true, c.varlen = true, c.wl = 30, c.wr = 10;
    v.push_back(c);
    c = mk("sm90_tf32_D64_head_passes_gqa", FATTN_F32);
    c.sm90 = true, c.Hq = 8, c.Hkv = 4, c.pass_heads = 1, c.causal = 1;
    v.push_back(c);
    c = mk("sm90_tf32_D128_head_passes_of_3_bias", FATTN_F32);
    c.sm90 = true, c.D = c.Dv = 128, c.B = 1, c.Hq = c.Hkv = 5, c.pass_heads = 3, c.bias = 1, c.Sq = 70, c.Skv = 90;
    v.push_back(c);
    c = mk("sm90_dbias_bf16_full_causal", FATTN_BF16);
    c.sm90 = true, c.bias = 1, c.dbias = true, c.causal = 1, c.Hq = 2, c.Hkv = 1;
    v.push_back(c);
    // 16-bit head dims below the bucket on the sm90 kernels (TMA reads zeros past D; stores stop at it)
    c = mk("sm90_bf16_D96_gqa_causal_bias", FATTN_BF16);
    c.sm90 = true, c.D = c.Dv = 96, c.causal = 1, c.bias = 3;
    v.push_back(c);
    c = mk("sm90_f16_D40_varlen_window", FATTN_F16);
    c.sm90 = true, c.D = c.Dv = 40, c.varlen = true, c.wl = 20, c.wr = 30;
    v.push_back(c);
    // tf32 head dims below the bucket (TMA reads zeros past D, the pre-pass's copies hold zeros
    // there; taken by hand: selection takes them with FATTN_SM90_TF32_PAD)
    c = mk("sm90_tf32_D96_gqa_causal_bias", FATTN_F32);
    c.sm90 = true, c.tf32pad = true, c.D = c.Dv = 96, c.causal = 1, c.bias = 3;
    v.push_back(c);
    c = mk("sm90_tf32_D36_varlen_window_head_passes", FATTN_F32);
    c.sm90 = true, c.tf32pad = true, c.D = c.Dv = 36, c.varlen = true, c.wl = 20, c.wr = 30, c.Hq = 4, c.Hkv = 2;
    c.pass_heads = 1;
    v.push_back(c);
    // the 16-bit sm90 kernels at D 256 (FATTN_SM90_D256): the dK/dV kernel's column halves, dQ's 32-key steps
    c = mk("sm90_d256_bf16_D256_gqa_causal", FATTN_BF16);
    c.sm90 = true, c.d256 = true, c.D = c.Dv = 256, c.Sq = 100, c.Skv = 150, c.causal = 2;
    v.push_back(c);
    c = mk("sm90_d256_f16_D200_varlen_bias", FATTN_F16);
    c.sm90 = true, c.d256 = true, c.D = c.Dv = 200, c.varlen = true, c.bias = 1, c.Hq = c.Hkv = 2;
    v.push_back(c);
    c = mk("sm90_dbias_tf32_keybias_head_passes", FATTN_F32);
    c.sm90 = true, c.bias = 3, c.dbias = true, c.pass_heads = 1, c.causal = 2;
    v.push_back(c);
    c = mk("sm90_f16_D128_full_bias_pad_row_gqa", FATTN_F16);
    c.sm90 = true, c.D = c.Dv = 128, c.bias = 1, c.bias_dt = FATTN_F16, c.Hq = 4, c.Hkv = 1, c.B = 1;
    v.push_back(c);
    // several key tiles per query tile (the fused dQ's order across CTAs, FATTN_SM90_DQ_FUSED):
    // no mask; a band; top-left causal with keys no row sees (key tiles without items); bottom-right
    // causal with rows that see no key (query tiles no CTA adds to: dq 0)
    c = mk("sm90_bf16_D64_long_full_gqa", FATTN_BF16);
    c.sm90 = true, c.B = 1, c.Sq = 200, c.Skv = 530;
    v.push_back(c);
    c = mk("sm90_f16_D128_long_window", FATTN_F16);
    c.sm90 = true, c.D = c.Dv = 128, c.B = 1, c.Hq = c.Hkv = 1, c.Sq = c.Skv = 450, c.wl = 100, c.wr = 60;
    v.push_back(c);
    c = mk("sm90_bf16_D80_causal_tl_idle_keys", FATTN_BF16);
    c.sm90 = true, c.D = c.Dv = 80, c.B = 1, c.Hq = 2, c.Hkv = 1, c.Sq = 150, c.Skv = 420, c.causal = 1;
    v.push_back(c);
    c = mk("sm90_f16_D64_causal_br_rows_without_keys", FATTN_F16);
    c.sm90 = true, c.B = 1, c.Hq = c.Hkv = 2, c.Sq = 330, c.Skv = 140, c.causal = 2;
    v.push_back(c);
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnEmu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &i) { return std::string(i.param.name); });
std::vector<Case> tf32_cases() {
    std::vector<Case> v;
    for (const Case &c : cases())
        if (c.dt == FATTN_F32 && !c.strict) v.push_back(c);
    return v;
}
INSTANTIATE_TEST_SUITE_P(Tf32Cases, AttnEmuExact, ::testing::ValuesIn(tf32_cases()),
                         [](const ::testing::TestParamInfo<Case> &i) { return std::string(i.param.name); });

}  // namespace
