// attn_selftest.cpp — the softmax-attention family's grad mode (the oracle's backward vs central
// differences of its forward) and selftest (injected faults must be caught by the judges).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"  // injecting faults
#include "test/attn_judge.h"

namespace fattn_test {

// ---------------------------------------------------------------- grad mode (oracle vs FD)

namespace {

double fd_loss(const fattn::ref::Problem &p, const fattn::ref::Tensors &t) {
    fattn::ref::Outputs o;
    fattn::ref::attn_fwd(p, t, &o);
    double l = 0;  // L = Σ o ∘ W with W = dout: dL/do = dout seeds the backward
    for (size_t i = 0; i < o.o.size(); ++i) l += o.o[i] * t.dout[i];
    return l;
}

bool is_nan_elem(const Buf &b, int64_t e) { return std::isnan(fattn::ref::decode(b.host.data(), b.dt, e)); }

}  // namespace

bool grad_case(const Inst &in, std::string *msg) {
    fattn::ref::Problem prob;
    fattn::ref::Tensors t;
    fattn::ref::Outputs r;
    run_oracle(in, &r, &prob, &t);
    fattn::ref::attn_bwd(prob, t, &r, /*want_dbias=*/true);
    std::mt19937 rng(7);
    int64_t multi_key_rows = 0;
    for (int64_t nv : r.nvis) multi_key_rows += nv >= 2;
    std::string line;
    bool ok = true;
    auto check = [&](const char *name, std::vector<double> fattn::ref::Tensors::*which, const std::vector<double> &an) {
        std::vector<double> &x = t.*which;
        double amax = 0, err = 0;
        for (double e : an) amax = std::max(amax, std::fabs(e));
        if (amax == 0) {
            // Zero is the right answer only for dq/dk when no row sees two keys.
            bool may_be_zero = name[1] != 'v' && multi_key_rows == 0;
            if (!may_be_zero) ok = false;
            line += fmt("%s: reference gradient all zero%s; ", name, may_be_zero ? " (one key per row)" : "");
            return;
        }
        // 24 sampled elements (every element when fewer) plus the largest gradient,
        // central differences, step 1e-5.
        const size_t n = std::min<size_t>(24, x.size());
        size_t imax = size_t(std::max_element(an.begin(), an.end(), [](double a, double b) { return std::fabs(a) < std::fabs(b); }) - an.begin());
        for (size_t s = 0; s <= n; ++s) {
            size_t i = s == n ? imax : x.size() <= 24 ? s : size_t(rng() % x.size());
            if (std::isinf(x[i])) continue;
            double x0 = x[i], h = 1e-5;
            x[i] = x0 + h;
            double lp = fd_loss(prob, t);
            x[i] = x0 - h;
            double lm = fd_loss(prob, t);
            x[i] = x0;
            err = std::max(err, std::fabs((lp - lm) / (2 * h) - an[i]));
        }
        double rel = err / amax;
        line += fmt("%s %.1e ", name, rel);
        if (!(rel < 1e-6)) ok = false;
    };
    check("dq", &fattn::ref::Tensors::q, r.dq);
    check("dk", &fattn::ref::Tensors::k, r.dk);
    check("dv", &fattn::ref::Tensors::v, r.dv);
    if (prob.has_bias) check("dbias", &fattn::ref::Tensors::bias, r.dbias);
    *msg = line + "(max |fd - bwd| / max |bwd|, bar 1e-6)";
    return ok;
}

// ---------------------------------------------------------------- selftest

namespace {

// The sampled judge of the large cases, on a small case: the clean run must pass it, and with
// random rows and keys switched off (only the fixed ones) it must still catch a wrong o in the
// last row, a wrong dk in the last key, a wrong dq in the row just past a chosen element offset
// (the stand-in for 2^31), and an inf in a row it does not sample (the whole-buffer scan).
template <class Caught>
void selftest_sampled(Inst &in, double tol, double lse_tol, Caught &&expect_caught, Summary &s) {
    const AttnCase &c = *in.c;
    std::string jm;
    if (!judge_sampled(in, tol, lse_tol, &jm)) {
        record(s, Outcome::FAIL, "selftest/" + c.name + "/sampled_clean", "clean run does not pass the sampled judge: " + jm);
        return;
    }
    record(s, Outcome::PASS, "selftest/" + c.name + "/sampled_clean", jm.substr(0, 90));
    SampleOpts fixed;
    fixed.rows = fixed.keys = 0;
    // Adds 0.5 to one cell (a masked row's or unseen key's zero becomes non-zero: caught too).
    auto bump = [&](const View &v, int64_t a, int64_t b, int64_t cc, int64_t d) {
        Buf &bf = in.buf[v.buf];
        const int64_t e = v.at(a, b, cc, d);
        fattn::store_f32(bf.host.data(), bf.dt, e, float(fattn::ref::decode(bf.host.data(), bf.dt, e) + 0.5));
    };
    const int64_t bl = in.Bv - 1;
    bump(in.o, bl, in.Sq - 1, c.Hq - 1, c.Dv - 1);
    expect_caught("sampled_wrong_o_last_row", !judge_sampled(in, tol, lse_tol, &jm, fixed), jm);
    bump(in.dk, bl, in.Skv - 1, c.Hkv - 1, c.D - 1);
    expect_caught("sampled_wrong_dk_last_key", !judge_sampled(in, tol, lse_tol, &jm, fixed), jm);
    SampleOpts at_offset = fixed;
    at_offset.offsets = {in.dq.at(bl, in.Sq / 2, 0, 0)};
    bump(in.dq, bl, in.Sq / 2, 0, 0);
    expect_caught("sampled_wrong_dq_past_offset", !judge_sampled(in, tol, lse_tol, &jm, at_offset), jm);
    {
        Buf &bo = in.buf[in.o.buf];
        fattn::store_f32(bo.host.data(), bo.dt, in.o.at(0, in.Sq / 2, 0, 0), INFINITY);
        std::vector<std::string> errs;
        check_written(bo, &errs);
        SampleOpts none = fixed;
        none.offsets.clear();
        expect_caught("sampled_inf_unsampled_row", errs.empty() && !judge_sampled(in, tol, lse_tol, &jm, none), jm);
    }
}

}  // namespace

// The checks must be able to fail: run a case once, then inject one fault at a time into a copy
// of what came back (or into the inputs of the reference) and require the judge to catch it.
void selftest_case(fattn_ctx_t *ctx, BackendKind bk, const AttnCase &c, Summary &s) {
    Inst in;
    setup_inst(c, &in);
    bool unsupported = false;
    fattn_prec resolved = FATTN_PREC_AUTO;
    std::string msg;
    if (!run_lib(ctx, bk, in, FATTN_ALGO_FUSED, c.prec, &unsupported, &resolved, &msg)) {
        record(s, Outcome::FAIL, "selftest/" + c.name, "clean run failed: " + msg);
        return;
    }
    fattn::ref::Outputs ref;
    run_oracle(in, &ref);
    const double tol = tolerance(resolved, c.dtype);
    std::string m;
    if (!judge(in, ref, tol, lse_tolerance(resolved), &m)) {
        record(s, Outcome::FAIL, "selftest/" + c.name, "clean run does not pass: " + m);
        return;
    }
    HostBytes saved[NUM_BUFS];
    for (int i = 0; i < NUM_BUFS; ++i) saved[i] = in.buf[i].host;
    auto restore = [&] {
        for (int i = 0; i < NUM_BUFS; ++i) in.buf[i].host = saved[i], in.buf[i].n_inf = 0;
    };
    auto expect_caught = [&](const std::string &fault, bool caught, const std::string &how) {
        record(s, caught ? Outcome::PASS : Outcome::FAIL, "selftest/" + c.name + "/" + fault,
               caught ? "caught: " + how.substr(0, 90) : "NOT caught");
        restore();
    };
    // Which rows are masked / which keys are unseen, from the reference.
    int64_t masked_row = -1;  // index into lse layout
    for (size_t i = 0; i < ref.lse.size(); ++i)
        if (!std::isfinite(ref.lse[i])) { masked_row = int64_t(i); break; }
    int64_t unseen_key = -1;  // (b*Skv + j)*Hkv + h
    for (int64_t e = 0; e < int64_t(ref.dv.size() / size_t(c.Dv)); ++e) {
        bool z = true;
        for (int64_t d = 0; d < c.Dv; ++d) z &= ref.dv[size_t(e * c.Dv + d)] == 0.0;
        if (z) { unseen_key = e; break; }
    }
    auto set = [&](const View &v, int64_t a, int64_t b, int64_t cc, int64_t d, float x) {
        Buf &bf = in.buf[v.buf];
        fattn::store_f32(bf.host.data(), bf.dt, v.at(a, b, cc, d), x);
    };
    // 1. a wrong value in o (a live row)
    {
        int64_t b = 0, i = in.Sq - 1, h = 0;
        double x = fattn::ref::decode(in.buf[in.o.buf].host.data(), in.buf[in.o.buf].dt, in.o.at(b, i, h, 0));
        set(in.o, b, i, h, 0, float(x + 0.5));
        std::string jm;
        bool ok = judge(in, ref, tol, lse_tolerance(resolved), &jm);
        bool live = std::isfinite(ref.lse[size_t(h * in.Sq + i)]);
        if (live) expect_caught("wrong_o_value", !ok, jm);
        else restore();
    }
    // 2. an unwritten cell in dq, 3. a byte written past the end of lse (guard)
    {
        std::vector<std::string> errs;
        Buf &bq = in.buf[in.dq.buf];
        std::memset(bq.host.data() + size_t(in.dq.at(0, 0, 0, 1)) * bq.esz(), kPoisonByte, bq.esz());
        check_written(bq, &errs);
        expect_caught("unwritten_dq_cell", !errs.empty(), errs.empty() ? "" : errs[0]);
        errs.clear();
        Buf &bl = in.buf[BUF_LSE];
        bl.host[bl.bytes() + 3] = 0;
        check_written(bl, &errs);
        expect_caught("lse_guard_write", !errs.empty(), errs.empty() ? "" : errs[0]);
        if (c.layout == Layout::FUSED_QKV) {  // a write into the padding between o's tokens
            errs.clear();
            Buf &bo = in.buf[in.o.buf];
            bo.host[size_t(in.o.at(0, 0, c.Hq - 1, c.Dv - 1) + 1) * bo.esz()] = 0;
            check_written(bo, &errs);
            expect_caught("o_padding_write", !errs.empty(), errs.empty() ? "" : errs[0]);
        }
    }
    // 4. a fully-masked row with a non-zero o, 5. an unseen key with a non-zero dk
    if (masked_row >= 0) {
        int64_t i = masked_row % in.Sq, h = (masked_row / in.Sq) % c.Hq, b = masked_row / (in.Sq * c.Hq);
        set(in.o, b, i, h, 0, 1e-30f);
        std::string jm;
        expect_caught("masked_row_o_nonzero", !judge(in, ref, tol, lse_tolerance(resolved), &jm), jm);
    }
    if (unseen_key >= 0) {
        int64_t h = unseen_key % c.Hkv, j = (unseen_key / c.Hkv) % in.Skv, b = unseen_key / (c.Hkv * in.Skv);
        set(in.dk, b, j, h, 0, 1e-30f);
        std::string jm;
        expect_caught("unseen_key_dk_nonzero", !judge(in, ref, tol, lse_tolerance(resolved), &jm), jm);
    }
    // 6. the 0-vs-0 trap: a zero loss gradient makes every reference gradient zero
    {
        Buf &bd = in.buf[in.dout.buf];
        for (int64_t e = 0; e < bd.elems; ++e)
            if (!is_nan_elem(bd, e)) fattn::store_f32(bd.host.data(), bd.dt, e, 0.0f);
        fattn::ref::Outputs zref;
        run_oracle(in, &zref);
        for (const View *v : {&in.dq, &in.dk, &in.dv}) {
            Buf &bf = in.buf[v->buf];
            for (int64_t e = 0; e < bf.elems; ++e)
                if (bf.covered(e)) fattn::store_f32(bf.host.data(), bf.dt, e, 0.0f);
        }
        std::string jm;
        expect_caught("zero_loss_gradient", !judge(in, zref, tol, lse_tolerance(resolved), &jm), jm);
    }
    // 7. dbias: a wrong value in a cell with a live entry, a non-zero cell whose every entry
    // is masked or -inf
    if (in.wants_dbias()) {
        int64_t top = 0, dead_cell = -1;
        for (size_t i = 0; i < ref.dbias.size(); ++i) {
            if (std::fabs(ref.dbias[i]) > std::fabs(ref.dbias[size_t(top)])) top = int64_t(i);
            if (dead_cell < 0 && ref.dbias[i] == 0.0) dead_cell = int64_t(i);
        }
        const View &dv = in.dbias;
        auto cell = [&](int64_t i, float x) {
            const int64_t j = i % dv.ne[3], r = i / dv.ne[3];
            set(dv, r / (dv.ne[1] * dv.ne[2]), (r / dv.ne[2]) % dv.ne[1], r % dv.ne[2], j, x);
        };
        std::string jm;
        cell(top, float(ref.dbias[size_t(top)] * 1.5));
        expect_caught("wrong_dbias_value", !judge(in, ref, tol, lse_tolerance(resolved), &jm), jm);
        if (dead_cell >= 0) {
            cell(dead_cell, 1e-30f);
            expect_caught("dead_dbias_nonzero", !judge(in, ref, tol, lse_tolerance(resolved), &jm), jm);
        }
    }
    selftest_sampled(in, tol, lse_tolerance(resolved), expect_caught, s);
}

}  // namespace fattn_test
