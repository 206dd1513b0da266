// attn_run.cpp — running softmax-attention cases through the public C API and judging them.
//
// test:        fwd + bwd on the backend vs the float64 oracle, per output
//              rms(out - ref) / rms(ref) over rows that see at least one key, with a tolerance
//              by resolved precision and dtype; fully-masked rows checked directly (o = 0,
//              lse = -inf, dq = 0), key columns nobody sees checked directly (dk = dv = 0);
//              reference gradients must be non-zero; NaN poison + guard regions + unchanged
//              inputs checked after every call.
// grad:        the oracle's backward vs central differences of its forward (double core).
// determinism: fwd + bwd twice, bitwise equal; on the CPU also nthreads 1 vs 2 vs 3.
// support:     fattn_attn_supports per case.
// perf:        median time of fwd and of bwd per case.
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "core/dtype.h"  // injecting faults in selftest
#include "test/attn_setup.h"

namespace fattn_test {

namespace {

constexpr size_t kGuardBytes = 256;  // after every output, workspace and saved buffer

// Tolerance on rms(out - ref) / rms(ref). F32: the CPU backend's worst over the table with
// --extra measured 1.4e-6 (extra_s2048_causal dk; S = 1025 cases ~1e-6), error grows ~sqrt(S),
// so 1e-5 leaves room up to S ~ 16k. TF32/NATIVE per DESIGN §4. Outputs stored in f16/bf16
// carry their own rounding whatever the arithmetic (measured worst at F32: f16 2.4e-4,
// bf16 2.0e-3), so those dtypes get 5e-3 / 1e-2.
double tolerance(fattn_prec resolved, fattn_dtype dt) {
    double t = resolved == FATTN_PREC_TF32 ? 2e-3 : resolved == FATTN_PREC_NATIVE ? 0.0 : 1e-5;
    if (dt == FATTN_F16) t = std::max(t, 5e-3);
    if (dt == FATTN_BF16) t = std::max(t, 1e-2);
    return t;
}

// lse is f32 whatever the input dtype and is computed from the same rounded inputs as the
// oracle's, so only the arithmetic separates them (measured <= 6e-8 on CPU F32 and CUDA NATIVE).
double lse_tolerance(fattn_prec resolved) { return resolved == FATTN_PREC_TF32 ? 2e-3 : 1e-5; }

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...) {
    char b[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

fattn_tensor tensor_of(Inst &in, const View &v) {
    Buf &b = in.buf[v.buf];
    char *base = static_cast<char *>(b.dev.ptr()) + size_t(v.off) * b.esz();
    return fattn_tensor_4d(base, b.dt, v.ne[0], v.ne[1], v.ne[2], v.ne[3], v.nb[0], v.nb[1], v.nb[2], v.nb[3]);
}

bool is_nan_elem(const Buf &b, int64_t e) {
    return std::isnan(fattn::ref::decode(b.host.data(), b.dt, e));
}

// After a call wrote into b: every covered cell must be written (no NaN), every other cell up
// to the end of the guard must still hold the poison byte.
void check_written(const Buf &b, std::vector<std::string> *errs) {
    int64_t unwritten = 0, oob = 0;
    for (int64_t e = 0; e < b.elems; ++e) {
        if (b.cover[size_t(e)]) {
            unwritten += is_nan_elem(b, e);
        } else {
            for (size_t k = 0; k < b.esz(); ++k) oob += b.host[size_t(e) * b.esz() + k] != kPoisonByte;
        }
    }
    for (size_t k = b.bytes(); k < b.host.size(); ++k) oob += b.host[k] != kPoisonByte;
    if (unwritten) errs->push_back(fmt("%s: %lld cells NaN/unwritten", b.name, (long long)unwritten));
    if (oob) errs->push_back(fmt("%s: %lld bytes written outside its views (guard/gap)", b.name, (long long)oob));
}

bool guard_intact(const DevBuf &d, size_t used) {
    std::vector<unsigned char> g(kGuardBytes);
    if (!d.download(g.data(), kGuardBytes, used)) return false;
    return std::all_of(g.begin(), g.end(), [](unsigned char x) { return x == kPoisonByte; });
}

struct RunTimes {
    double fwd_ms = 0, bwd_ms = 0;
};

// One fwd + bwd through the C API. Returns false with *msg when the library refused or a
// memory check failed; *unsupported is set when fattn_attn_supports said no (msg = reason).
bool run_lib(fattn_ctx_t *ctx, BackendKind bk, Inst &in, fattn_algo algo, fattn_prec prec, bool *unsupported,
             fattn_prec *resolved, std::string *msg, RunTimes *times = nullptr, bool query_only = false) {
    *unsupported = false;
    std::vector<std::string> errs;
    // Device buffers: inputs uploaded, everything else (and every guard) poisoned.
    for (auto &b : in.buf) {
        if (b.elems == 0 && b.host.empty()) continue;
        if (!b.dev.alloc(bk, b.bytes() + kGuardBytes) || !b.dev.poison()) return *msg = fmt("%s: device alloc failed", b.name), false;
        if (!b.output && !b.dev.upload(b.host.data(), b.bytes())) return *msg = "upload failed", false;
    }
    DevBuf cuq, cukv;
    fattn_attn_params p = fattn_attn_params_default();
    const AttnCase &c = *in.c;
    p.scale = c.scale;
    p.causal = c.causal;
    p.window_left = c.win_left;
    p.window_right = c.win_right;
    p.window_align = c.win_align;
    p.prec = prec;
    p.algo = algo;
    if (in.has_bias()) p.bias = tensor_of(in, in.bias);
    if (c.is_varlen()) {
        size_t nb = in.cu_q.size() * sizeof(int32_t);
        if (!cuq.alloc(bk, nb) || !cukv.alloc(bk, nb) || !cuq.upload(in.cu_q.data(), nb) || !cukv.upload(in.cu_kv.data(), nb))
            return *msg = "cu_seqlens upload failed", false;
        p.cu_seqlens_q = static_cast<const int32_t *>(cuq.ptr());
        p.cu_seqlens_kv = static_cast<const int32_t *>(cukv.ptr());
        p.num_seqs = in.nseq;
        p.max_seqlen_q = in.max_q;
        p.max_seqlen_kv = in.max_kv;
    }
    fattn_tensor q = tensor_of(in, in.q), k = tensor_of(in, in.k), v = tensor_of(in, in.v);
    fattn_tensor o = tensor_of(in, in.o), lse = tensor_of(in, in.lse), dout = tensor_of(in, in.dout);
    fattn_tensor dq = tensor_of(in, in.dq), dk = tensor_of(in, in.dk), dv = tensor_of(in, in.dv);
    char why[512] = {0};
    fattn_status st = fattn_attn_supports(ctx, &p, &q, &k, &v, why, sizeof why);
    if (st != FATTN_OK) {
        *unsupported = true;
        *msg = fmt("%s: %s", fattn_status_string(st), why);
        return false;
    }
    *resolved = fattn_resolve_prec(ctx, &p, &q);
    if (query_only) return true;
    size_t ws_f = 0, ws_b = 0, saved_n = 0;
    if ((st = fattn_attn_workspace_size(ctx, &p, &q, &k, &v, FATTN_DIR_FWD, &ws_f)) != FATTN_OK ||
        (st = fattn_attn_workspace_size(ctx, &p, &q, &k, &v, FATTN_DIR_BWD, &ws_b)) != FATTN_OK ||
        (st = fattn_attn_saved_size(ctx, &p, &q, &k, &v, &saved_n)) != FATTN_OK)
        return *msg = fmt("size query: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    DevBuf wsf, wsb, saved;
    if (!wsf.alloc(bk, ws_f + kGuardBytes) || !wsb.alloc(bk, ws_b + kGuardBytes) || !saved.alloc(bk, saved_n + kGuardBytes) ||
        !wsf.poison() || !wsb.poison() || !saved.poison())
        return *msg = "workspace alloc failed", false;

    auto now = [] { return std::chrono::steady_clock::now(); };
    auto t0 = now();
    st = fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, saved_n ? saved.ptr() : nullptr, ws_f ? wsf.ptr() : nullptr, ws_f);
    backend_sync(bk);
    auto t1 = now();
    if (st != FATTN_OK) return *msg = fmt("fwd: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    for (int id : {BUF_O, BUF_LSE}) {
        Buf &b = in.buf[id];
        b.host.resize(b.bytes() + kGuardBytes);
        b.dev.download(b.host.data(), b.host.size());
        check_written(b, &errs);
    }
    if (!guard_intact(wsf, ws_f)) errs.push_back("fwd workspace: guard overwritten");
    if (!guard_intact(saved, saved_n)) errs.push_back("saved: guard overwritten");
    std::vector<unsigned char> saved_after_fwd(saved_n);
    saved.download(saved_after_fwd.data(), saved_n);
    std::vector<unsigned char> o_after_fwd = in.buf[BUF_O].host, lse_after_fwd = in.buf[BUF_LSE].host;

    auto t2 = now();
    st = fattn_attn_bwd(ctx, &p, &q, &k, &v, &o, &lse, saved_n ? saved.ptr() : nullptr, &dout, &dq, &dk, &dv,
                        ws_b ? wsb.ptr() : nullptr, ws_b);
    backend_sync(bk);
    auto t3 = now();
    if (st != FATTN_OK) return *msg = fmt("bwd: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    for (int id : {BUF_DQ, BUF_DK, BUF_DV}) {
        Buf &b = in.buf[id];
        if (b.elems == 0) continue;
        b.host.resize(b.bytes() + kGuardBytes);
        b.dev.download(b.host.data(), b.host.size());
        check_written(b, &errs);
    }
    if (!guard_intact(wsb, ws_b)) errs.push_back("bwd workspace: guard overwritten");
    // Nothing the backward only reads may change: inputs, o, lse, saved.
    for (int id : {BUF_Q, BUF_K, BUF_V, BUF_DO, BUF_BIAS}) {
        Buf &b = in.buf[id];
        if (b.elems == 0) continue;
        std::vector<unsigned char> now_(b.bytes());
        b.dev.download(now_.data(), b.bytes());
        if (std::memcmp(now_.data(), b.host.data(), b.bytes()) != 0) errs.push_back(fmt("input %s was modified", b.name));
    }
    for (int id : {BUF_O, BUF_LSE}) {
        Buf &b = in.buf[id];
        std::vector<unsigned char> now_(b.host.size());
        b.dev.download(now_.data(), now_.size());
        if (now_ != (id == BUF_O ? o_after_fwd : lse_after_fwd)) errs.push_back(fmt("bwd modified %s", b.name));
    }
    std::vector<unsigned char> saved_now(saved_n);
    saved.download(saved_now.data(), saved_n);
    if (saved_now != saved_after_fwd) errs.push_back("bwd modified the saved buffer");
    if (times) {
        times->fwd_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        times->bwd_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
    }
    for (auto &b : in.buf) b.dev.release();
    if (!errs.empty()) {
        std::string m;
        for (auto &e : errs) m += (m.empty() ? "" : "; ") + e;
        *msg = m;
        return false;
    }
    return true;
}

// rms(out - ref) / rms(ref) over the cells with use[i] (all when use is empty). When the
// reference is identically zero there (every row sees one key: dq = dk = 0 by the math, while
// f32 leaves a rounding residue), the error is taken relative to `fallback_rms` instead.
double rel_rms(const std::vector<double> &out, const std::vector<double> &ref, const std::vector<char> &use,
               double fallback_rms = 0) {
    double num = 0, den = 0;
    size_t n = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!use.empty() && !use[i]) continue;
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        ++n;
    }
    if (den == 0) den = fallback_rms * fallback_rms * double(n);
    if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
    return std::sqrt(num / den);
}

// Compares the library's outputs (already downloaded into in.buf) with the oracle's.
bool judge(const Inst &in, const fattn::ref::Outputs &r, double tol, double lse_tol, std::string *msg) {
    const AttnCase &c = *in.c;
    std::vector<std::string> errs;
    const int64_t B = in.Bv, Sq = in.Sq, Skv = in.Skv, Hq = c.Hq, Hkv = c.Hkv, D = c.D, Dv = c.Dv;
    std::vector<double> o = read_view4(in, in.o), lse = read_lse(in);
    std::vector<double> dq = read_view4(in, in.dq), dk = read_view4(in, in.dk), dv = read_view4(in, in.dv);
    // Row masks in each tensor's layout: a row is "live" if the oracle's lse is finite.
    std::vector<char> live_o(o.size()), live_dq(dq.size()), live_lse(lse.size());
    int64_t masked_rows = 0, multi_key_rows = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Sq; ++i) {
                size_t li = size_t((b * Hq + h) * Sq + i);
                bool live = std::isfinite(r.lse[li]);
                multi_key_rows += r.nvis[li] >= 2;
                live_lse[li] = live;
                for (int64_t d = 0; d < Dv; ++d) live_o[size_t(((b * Sq + i) * Hq + h) * Dv + d)] = live;
                for (int64_t d = 0; d < D; ++d) live_dq[size_t(((b * Sq + i) * Hq + h) * D + d)] = live;
                if (live) continue;
                ++masked_rows;
                if (lse[li] != -std::numeric_limits<double>::infinity()) {
                    errs.push_back(fmt("masked row (b%lld h%lld i%lld): lse %g, want -inf", (long long)b, (long long)h, (long long)i, lse[li]));
                    break;
                }
                for (int64_t d = 0; d < Dv; ++d)
                    if (o[size_t(((b * Sq + i) * Hq + h) * Dv + d)] != 0.0) {
                        errs.push_back(fmt("masked row (b%lld h%lld i%lld): o != 0", (long long)b, (long long)h, (long long)i));
                        break;
                    }
                for (int64_t d = 0; d < D; ++d)
                    if (dq[size_t(((b * Sq + i) * Hq + h) * D + d)] != 0.0) {
                        errs.push_back(fmt("masked row (b%lld h%lld i%lld): dq != 0", (long long)b, (long long)h, (long long)i));
                        break;
                    }
            }
    // Key columns no query sees (their reference dv row is exactly 0): dk = dv = 0 exactly.
    int64_t unseen = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < Skv; ++j)
            for (int64_t h = 0; h < Hkv; ++h) {
                const size_t kv0 = size_t(((b * Skv + j) * Hkv + h) * Dv), kk0 = size_t(((b * Skv + j) * Hkv + h) * D);
                bool zero = true;
                for (int64_t d = 0; d < Dv && zero; ++d) zero = r.dv[kv0 + size_t(d)] == 0.0;
                for (int64_t d = 0; d < D && zero; ++d) zero = r.dk[kk0 + size_t(d)] == 0.0;
                if (!zero) continue;
                ++unseen;
                bool ok = true;
                for (int64_t d = 0; d < Dv; ++d) ok &= dv[kv0 + size_t(d)] == 0.0;
                for (int64_t d = 0; d < D; ++d) ok &= dk[kk0 + size_t(d)] == 0.0;
                if (!ok && errs.size() < 8)
                    errs.push_back(fmt("unseen key (b%lld j%lld hk%lld): dk/dv != 0", (long long)b, (long long)j, (long long)h));
            }
    // Non-zero reference gradients: 0 vs 0 would pass anything.
    auto all_zero = [](const std::vector<double> &x) { return std::all_of(x.begin(), x.end(), [](double e) { return e == 0.0; }); };
    bool any_live = std::any_of(r.lse.begin(), r.lse.end(), [](double e) { return std::isfinite(e); });
    if (any_live && all_zero(r.dv)) errs.push_back("reference dv is all zero");
    if (multi_key_rows > 0 && all_zero(r.dq)) errs.push_back("reference dq is all zero");
    if (multi_key_rows > 0 && all_zero(r.dk)) errs.push_back("reference dk is all zero");
    // Finite everywhere (masked lse aside).
    for (const auto *x : {&o, &dq, &dk, &dv})
        if (!std::all_of(x->begin(), x->end(), [](double e) { return std::isfinite(e); })) {
            errs.push_back("non-finite value in an output");
            break;
        }
    double e_o = rel_rms(o, r.o, live_o), e_lse = rel_rms(lse, r.lse, live_lse);
    double dv_rms = 0;
    for (double e : r.dv) dv_rms += e * e;
    dv_rms = r.dv.empty() ? 0 : std::sqrt(dv_rms / double(r.dv.size()));
    double e_dq = rel_rms(dq, r.dq, live_dq, dv_rms), e_dk = rel_rms(dk, r.dk, {}, dv_rms), e_dv = rel_rms(dv, r.dv, {});
    struct {
        const char *n;
        double e;
    } es[] = {{"o", e_o}, {"lse", e_lse}, {"dq", e_dq}, {"dk", e_dk}, {"dv", e_dv}};
    std::string line;
    // lse: judged by the arithmetic's tolerance, not by the storage dtype's (lse_tolerance).
    for (auto &x : es) {
        const double t = std::strcmp(x.n, "lse") == 0 ? std::min(tol, lse_tol) : tol;
        line += fmt("%s %.1e ", x.n, x.e);
        if (!(x.e <= t)) errs.push_back(fmt("%s error %.2e > tol %.0e", x.n, x.e, t));
    }
    line += fmt("(tol %.0e", tol);
    if (masked_rows) line += fmt(", %lld masked rows", (long long)masked_rows);
    if (unseen) line += fmt(", %lld unseen keys", (long long)unseen);
    line += ")";
    if (!errs.empty()) {
        std::string m;
        for (size_t i = 0; i < errs.size() && i < 6; ++i) m += (i ? "; " : "") + errs[i];
        *msg = m + " | " + line;
        return false;
    }
    *msg = line;
    return true;
}

// Large cases: the oracle's sampled layer on 48 query rows and up to 16 keys (those whose
// exact dk/dv is estimated at most ~4e9 multiply-adds, within 30 s), same tolerances and
// direct checks.
bool judge_sampled(const Inst &in, double tol, double lse_tol, std::string *msg) {
    const AttnCase &c = *in.c;
    const fattn::AttnBwdParams a = ref_params(in);
    const Buf &bo = in.buf[in.o.buf], &bl = in.buf[in.lse.buf], &bq = in.buf[in.dq.buf];
    const Buf &bk = in.buf[in.dk.buf], &bv = in.buf[in.dv.buf];
    auto lib = [](const Buf &b, int64_t e) { return fattn::ref::decode(b.host.data(), b.dt, e); };
    auto seq = [&](int64_t s, int64_t *b, int64_t *q0, int64_t *lq, int64_t *k0, int64_t *lk) {
        if (c.is_varlen()) *b = 0, *q0 = in.cu_q[size_t(s)], *lq = in.cu_q[size_t(s) + 1] - *q0, *k0 = in.cu_kv[size_t(s)], *lk = in.cu_kv[size_t(s) + 1] - *k0;
        else *b = s, *q0 = 0, *lq = in.Sq, *k0 = 0, *lk = in.Skv;
    };
    std::vector<std::string> errs;
    std::mt19937_64 rng(11);
    double n_o = 0, d_o = 0, n_l = 0, d_l = 0, n_q = 0, d_q = 0, n_k = 0, d_k = 0, n_v = 0, d_v = 0;
    int64_t rows = 0, masked = 0, multi = 0, keys = 0, unseen = 0;
    for (int t = 0; t < 48; ++t) {
        int64_t s = int64_t(rng() % uint64_t(in.nseq)), b, q0, lq, k0, lk;
        seq(s, &b, &q0, &lq, &k0, &lk);
        if (lq == 0) continue;
        int64_t h = int64_t(rng() % uint64_t(c.Hq));
        int64_t i = t == 0 ? 0 : t == 1 ? lq - 1 : int64_t(rng() % uint64_t(lq));
        fattn::ref::RowRef r;
        fattn::ref::attn_row(a, s, h, i, &r);
        ++rows;
        multi += r.nvis >= 2;
        const double lse = lib(bl, in.lse.at(b, h, q0 + i, 0));
        if (!std::isfinite(r.lse)) {
            ++masked;
            bool zero = lse == -std::numeric_limits<double>::infinity();
            for (int64_t d = 0; d < c.Dv; ++d) zero &= lib(bo, in.o.at(b, q0 + i, h, d)) == 0.0;
            for (int64_t d = 0; d < c.D; ++d) zero &= lib(bq, in.dq.at(b, q0 + i, h, d)) == 0.0;
            if (!zero) errs.push_back(fmt("masked row (s%lld h%lld i%lld): o/dq != 0 or lse != -inf", (long long)s, (long long)h, (long long)i));
            continue;
        }
        n_l += (lse - r.lse) * (lse - r.lse), d_l += r.lse * r.lse;
        for (int64_t d = 0; d < c.Dv; ++d) {
            double x = lib(bo, in.o.at(b, q0 + i, h, d));
            n_o += (x - r.o[size_t(d)]) * (x - r.o[size_t(d)]), d_o += r.o[size_t(d)] * r.o[size_t(d)];
        }
        for (int64_t d = 0; d < c.D; ++d) {
            double x = lib(bq, in.dq.at(b, q0 + i, h, d));
            n_q += (x - r.dq[size_t(d)]) * (x - r.dq[size_t(d)]), d_q += r.dq[size_t(d)] * r.dq[size_t(d)];
        }
    }
    const int64_t group = c.Hq / c.Hkv;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // key sampling budget
    for (int t = 0; t < 400 && keys < 16; ++t) {
        int64_t s = int64_t(rng() % uint64_t(in.nseq)), b, q0, lq, k0, lk;
        seq(s, &b, &q0, &lq, &k0, &lk);
        if (lk == 0) continue;
        // Half the tries near the end of the sequence, where causal keys are seen by few rows.
        int64_t j = (t % 2) ? lk - 1 - int64_t(rng() % uint64_t(std::min<int64_t>(lk, 64))) : int64_t(rng() % uint64_t(lk));
        int64_t hk = int64_t(rng() % uint64_t(c.Hkv));
        double cost = double(fattn::ref::rows_seeing_key(a, s, hk * group, j)) * double(group) *
                      double(c.win_left >= 0 ? std::min<int64_t>(lk, c.win_left + 2) : lk) * double(c.D + c.Dv);
        if (cost > 4e9 || std::chrono::steady_clock::now() > deadline) continue;
        std::vector<double> rk, rv;
        fattn::ref::attn_key(a, s, hk, j, &rk, &rv);
        ++keys;
        bool zero_ref = std::all_of(rv.begin(), rv.end(), [](double e) { return e == 0.0; });
        unseen += zero_ref;
        for (int64_t d = 0; d < c.D; ++d) {
            double x = lib(bk, in.dk.at(b, k0 + j, hk, d));
            if (zero_ref && x != 0.0) errs.push_back("unseen key: dk != 0");
            n_k += (x - rk[size_t(d)]) * (x - rk[size_t(d)]), d_k += rk[size_t(d)] * rk[size_t(d)];
        }
        for (int64_t d = 0; d < c.Dv; ++d) {
            double x = lib(bv, in.dv.at(b, k0 + j, hk, d));
            if (zero_ref && x != 0.0) errs.push_back("unseen key: dv != 0");
            n_v += (x - rv[size_t(d)]) * (x - rv[size_t(d)]), d_v += rv[size_t(d)] * rv[size_t(d)];
        }
    }
    if (rows > masked && d_o == 0) errs.push_back("sampled reference o is all zero");
    if (multi > 0 && d_q == 0) errs.push_back("sampled reference dq is all zero");
    if (keys > unseen && d_v == 0) errs.push_back("sampled reference dv is all zero");
    auto rel = [](double n, double d) { return d > 0 ? std::sqrt(n / d) : (n > 0 ? INFINITY : 0.0); };
    struct {
        const char *n;
        double e;
    } es[] = {{"o", rel(n_o, d_o)}, {"lse", rel(n_l, d_l)}, {"dq", rel(n_q, d_q)}, {"dk", rel(n_k, d_k)}, {"dv", rel(n_v, d_v)}};
    std::string line;
    // lse: judged by the arithmetic's tolerance, not by the storage dtype's (lse_tolerance).
    for (auto &x : es) {
        const double t = std::strcmp(x.n, "lse") == 0 ? std::min(tol, lse_tol) : tol;
        line += fmt("%s %.1e ", x.n, x.e);
        if (!(x.e <= t)) errs.push_back(fmt("%s error %.2e > tol %.0e", x.n, x.e, t));
    }
    line += fmt("(tol %.0e; sampled %lld rows, %lld masked; %lld keys, %lld unseen)", tol, (long long)rows, (long long)masked,
                (long long)keys, (long long)unseen);
    if (keys == 0) line += " [no key cheap enough: dk/dv only checked for NaN/guards]";
    if (!errs.empty()) {
        std::string m;
        for (size_t i = 0; i < errs.size() && i < 6; ++i) m += (i ? "; " : "") + errs[i];
        *msg = m + " | " + line;
        return false;
    }
    *msg = line;
    return true;
}

// ---------------------------------------------------------------- grad mode (oracle vs FD)

double fd_loss(const fattn::ref::Problem &p, const fattn::ref::Tensors &t) {
    fattn::ref::Outputs o;
    fattn::ref::attn_fwd(p, t, &o);
    double l = 0;  // L = Σ o ∘ W with W = dout: dL/do = dout seeds the backward
    for (size_t i = 0; i < o.o.size(); ++i) l += o.o[i] * t.dout[i];
    return l;
}

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
    Buf saved[NUM_BUFS];
    for (int i = 0; i < NUM_BUFS; ++i) saved[i].host = in.buf[i].host;
    auto restore = [&] {
        for (int i = 0; i < NUM_BUFS; ++i) in.buf[i].host = saved[i].host;
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
                if (bf.cover[size_t(e)]) fattn::store_f32(bf.host.data(), bf.dt, e, 0.0f);
        }
        std::string jm;
        expect_caught("zero_loss_gradient", !judge(in, zref, tol, lse_tolerance(resolved), &jm), jm);
    }
}

// ---------------------------------------------------------------- the family

std::vector<fattn_algo> algos_of(const Options &o, const AttnCase &c) {
    std::vector<fattn_algo> a;
    if (o.algo_fused && c.algo != AlgoSel::EXACT) a.push_back(FATTN_ALGO_FUSED);
    if (o.algo_exact && c.algo != AlgoSel::FUSED) a.push_back(FATTN_ALGO_EXACT);
    return a;
}

// Ref cost of a case (multiply-adds of its materialized fwd), for choosing grad-mode cases.
double ref_cost(const Inst &in) {
    const AttnCase &c = *in.c;
    double s = 0;
    if (c.is_varlen())
        for (size_t i = 0; i < c.seqlens_q.size(); ++i) s += double(c.seqlens_q[i]) * c.seqlens_kv[i];
    else
        s = double(c.B) * c.Sq * c.Skv;
    return s * double(c.Hq) * double(c.D + c.Dv);
}

}  // namespace

int run_attn_family(const Options &o, Summary &s) {
    std::string why;
    std::unique_ptr<fattn_ctx_t, void (*)(fattn_ctx_t *)> ctx(nullptr, fattn_ctx_free);
    if (o.mode != Mode::GRAD) {
        ctx.reset(make_ctx(o.backend, o.threads, &why));
        if (!ctx) {
            // A missing backend is a failure, never a silent CPU run.
            record(s, Outcome::FAIL, "attn/context", "cannot create the requested backend: " + why);
            return 0;
        }
    }
    const bool cpu = o.backend == BackendKind::CPU;
    if (o.mode == Mode::SELFTEST) {
        for (const AttnCase &c : attn_cases())
            if ((c.name == "plain_s17" || c.name == "causal_br_sq97_skv40" || c.name == "bias_rowcol" ||
                 c.name == "fused_qkv") && selected(o, c.name))
                selftest_case(ctx.get(), o.backend, c, s);
        return 0;
    }
    for (const AttnCase &c : attn_cases()) {
        if (!selected(o, c.name)) continue;
        if (o.quick && !c.quick) continue;
        if (c.extra && !o.extra && !explicitly_requested(o)) continue;
        if (c.large) {
            // Listed with --large (or a -p naming "large"); run on the CPU only when -p selects it.
            const bool named = explicitly_requested(o) && o.pattern.find("large") != std::string::npos;
            if (!o.large && !named) continue;
            if (o.mode == Mode::GRAD) continue;
            if (cpu && !explicitly_requested(o)) {
                record(s, Outcome::SKIP, c.name, "large case: CUDA-sized; name it with -p to run it on the CPU");
                continue;
            }
        }
        Inst in;
        setup_inst(c, &in);
        if (o.verbose)
            std::printf("        %s: B %lld Sq %lld Skv %lld Hq %lld Hkv %lld D %lld Dv %lld %s, causal %d, window (%lld, %lld, %s), "
                        "bias kind %d (%s), layout %d%s\n",
                        c.name.c_str(), (long long)in.Bv, (long long)in.Sq, (long long)in.Skv, (long long)c.Hq, (long long)c.Hkv,
                        (long long)c.D, (long long)c.Dv, fattn_dtype_name(c.dtype), int(c.causal), (long long)c.win_left,
                        (long long)c.win_right, c.win_align == FATTN_ALIGN_BOTTOM_RIGHT ? "br" : "tl", int(c.bias),
                        fattn_dtype_name(c.bias_dtype), int(c.layout), c.is_varlen() ? fmt(", varlen %lld seqs", (long long)in.nseq).c_str() : "");
        const fattn_prec prec = o.prec != FATTN_PREC_AUTO ? o.prec : c.prec;
        if (o.mode == Mode::GRAD) {
            if (ref_cost(in) > 3e6) continue;  // finite differences only on the small cases
            std::string msg;
            bool ok = grad_case(in, &msg);
            record(s, ok ? Outcome::PASS : Outcome::FAIL, c.name, msg);
            continue;
        }
        fattn::ref::Outputs ref;
        bool have_ref = false;
        for (fattn_algo algo : algos_of(o, c)) {
            std::string name = c.name + (algo == FATTN_ALGO_FUSED ? "/fused" : "/exact");
            bool unsupported = false;
            fattn_prec resolved = FATTN_PREC_AUTO;
            std::string msg;
            if (o.mode == Mode::SUPPORT) {
                bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg, nullptr, true);
                if (unsupported) record(s, Outcome::SKIP, name, msg);
                else record(s, ok ? Outcome::PASS : Outcome::FAIL, name,
                            ok ? fmt("supported, runs %s", fattn_prec_name(resolved)) : msg);
                continue;
            }
            if (o.mode == Mode::PERF) {
                std::vector<double> f, b;
                bool ok = true;
                for (int rep = 0; rep < 3 && ok; ++rep) {
                    RunTimes t;
                    ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg, &t);
                    f.push_back(t.fwd_ms), b.push_back(t.bwd_ms);
                }
                if (unsupported) { record(s, Outcome::SKIP, name, msg); continue; }
                if (!ok) { record(s, Outcome::FAIL, name, msg); continue; }
                std::sort(f.begin(), f.end());
                std::sort(b.begin(), b.end());
                record(s, Outcome::PASS, name, fmt("fwd %.3f ms  fwd+bwd %.3f ms  (%s, median of 3)", f[1], f[1] + b[1], fattn_prec_name(resolved)));
                continue;
            }
            if (o.mode == Mode::DETERMINISM) {
                bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg);
                if (unsupported) { record(s, Outcome::SKIP, name, msg); continue; }
                if (!ok) { record(s, Outcome::FAIL, name, msg); continue; }
                std::vector<std::vector<unsigned char>> first;
                for (int id : {BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV}) first.push_back(in.buf[id].host);
                std::vector<int> threads = {o.threads};
                if (cpu) threads = {1, 2, 3, o.threads};
                std::string detail = cpu ? fmt("threads %d vs", o.threads) : "run twice";
                bool same = true;
                for (int nt : threads) {
                    std::unique_ptr<fattn_ctx_t, void (*)(fattn_ctx_t *)> c2(make_ctx(o.backend, nt, &why), fattn_ctx_free);
                    if (!c2 || !run_lib(c2.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg)) {
                        ok = false;
                        break;
                    }
                    int idx = 0;
                    for (int id : {BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV}) {
                        if (in.buf[id].host != first[size_t(idx)]) {
                            same = false;
                            msg = fmt("%s differs bitwise (threads %d vs %d)", in.buf[id].name, nt, o.threads);
                        }
                        ++idx;
                    }
                    if (!same) break;
                    if (cpu) detail += fmt("%s %d", nt == threads.front() ? "" : ",", nt);
                }
                if (!ok) record(s, Outcome::FAIL, name, msg);
                else record(s, same ? Outcome::PASS : Outcome::FAIL, name, same ? detail + ": o, lse, dq, dk, dv bitwise equal" : msg);
                continue;
            }
            // ---- test mode
            bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg);
            if (unsupported) {
                // The CPU backend must run every case at F32; a refusal there is a failure.
                bool must = cpu && (prec == FATTN_PREC_AUTO || prec == FATTN_PREC_F32);
                record(s, must ? Outcome::FAIL : Outcome::SKIP, name, msg);
                continue;
            }
            if (!ok) {
                record(s, Outcome::FAIL, name, msg);
                continue;
            }
            std::string jm;
            bool good;
            if (c.large) {
                good = judge_sampled(in, tolerance(resolved, c.dtype), lse_tolerance(resolved), &jm);
            } else {
                if (!have_ref) {
                    run_oracle(in, &ref);
                    have_ref = true;
                }
                good = judge(in, ref, tolerance(resolved, c.dtype), lse_tolerance(resolved), &jm);
            }
            record(s, good ? Outcome::PASS : Outcome::FAIL, name, fmt("[%s] ", fattn_prec_name(resolved)) + jm);
        }
    }
    return 0;
}

}  // namespace fattn_test
