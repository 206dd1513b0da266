// attn_judge.cpp — checking what a softmax-attention call left behind: written cells, poison
// and guards (one parallel pass per buffer, fit for tensors of more than 2^31 elements), and
// the dense judge against the float64 oracle (see attn_run.cpp for the modes).
#include "test/attn_judge.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

namespace fattn_test {

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

std::string fmt(const char *f, ...) {
    char b[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

namespace {

struct WriteScan {
    int64_t nan = 0, inf = 0, oob = 0;  // covered NaN cells, covered ±inf cells, stray bytes
};

// Covered cells [e0, e1) of a buffer its one view spans densely: NaN and ±inf by their bits
// (exponent all ones: mantissa != 0 is NaN, == 0 is inf), as decoding each element would say.
template <class U>
void scan_dense(const unsigned char *host, int64_t e0, int64_t e1, U abs_mask, U inf_bits, WriteScan *w) {
    U x;
    for (int64_t e = e0; e < e1; ++e) {
        std::memcpy(&x, host + size_t(e) * sizeof(U), sizeof(U));
        x = U(x & abs_mask);
        w->nan += x > inf_bits;
        w->inf += x == inf_bits;
    }
}

WriteScan scan_written(const Buf &b) {
    constexpr int64_t kBlock = int64_t(1) << 20;
    std::vector<WriteScan> part(size_t((b.elems + kBlock - 1) / kBlock));
    const unsigned char *h = b.host.data();
    const size_t esz = b.esz();
    par_range(b.elems, kBlock, [&](int64_t e0, int64_t e1) {
        WriteScan &w = part[size_t(e0 / kBlock)];
        if (b.dense && b.dt == FATTN_F32) return scan_dense<uint32_t>(h, e0, e1, 0x7FFFFFFFu, 0x7F800000u, &w);
        if (b.dense && b.dt == FATTN_F16) return scan_dense<uint16_t>(h, e0, e1, 0x7FFF, 0x7C00, &w);
        if (b.dense && b.dt == FATTN_BF16) return scan_dense<uint16_t>(h, e0, e1, 0x7FFF, 0x7F80, &w);
        for (int64_t e = e0; e < e1; ++e) {
            if (b.covered(e)) {
                const double x = fattn::ref::decode(h, b.dt, e);
                w.nan += std::isnan(x);
                w.inf += std::isinf(x);
            } else {
                for (size_t k = 0; k < esz; ++k) w.oob += h[size_t(e) * esz + k] != kPoisonByte;
            }
        }
    });
    WriteScan w;
    for (const WriteScan &p : part) w.nan += p.nan, w.inf += p.inf, w.oob += p.oob;
    for (size_t k = b.bytes(); k < b.host.size(); ++k) w.oob += h[k] != kPoisonByte;  // the guard
    return w;
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

// Which cells of the dbias view have a live contribution: some (b, h, i, j) it sums whose key
// the masks allow (inside its sequence, varlen) and whose bias is not -inf. The others must be
// exactly 0 (fattn.h); a live cell may be 0 by the math (a row with one key) and then holds a
// rounding residue, judged by the error ratio alone.
std::vector<char> dbias_live(const Inst &in) {
    fattn::ref::Problem prob;
    fattn::ref::Tensors t;
    fattn::ref::gather(ref_params(in), &prob, &t);
    const View &bv = in.bias, &dv = in.dbias;
    const Buf &bb = in.buf[bv.buf];
    std::vector<char> live(size_t(dv.size()), 0);
    for (int64_t s = 0; s < in.nseq; ++s) {
        const bool vl = in.c->is_varlen();
        const int64_t b = vl ? 0 : s, q0 = vl ? in.cu_q[size_t(s)] : 0, k0 = vl ? in.cu_kv[size_t(s)] : 0;
        const int64_t lq = vl ? in.cu_q[size_t(s) + 1] - q0 : in.Sq, lk = vl ? in.cu_kv[size_t(s) + 1] - k0 : in.Skv;
        for (int64_t h = 0; h < in.c->Hq; ++h)
            for (int64_t i = 0; i < lq; ++i)
                for (int64_t j = 0; j < lk; ++j) {
                    if (!fattn::ref::key_allowed(prob.mask, i, j, lq, lk)) continue;
                    const int64_t e = bv.at(bv.ne[0] == 1 ? 0 : b, bv.ne[1] == 1 ? 0 : h, q0 + i, k0 + j);
                    if (std::isinf(fattn::ref::decode(bb.host.data(), bb.dt, e))) continue;
                    const int64_t rb = dv.ne[0] == 1 ? 0 : b, rh = dv.ne[1] == 1 ? 0 : h, ri = dv.ne[2] == 1 ? 0 : q0 + i;
                    live[size_t(((rb * dv.ne[1] + rh) * dv.ne[2] + ri) * dv.ne[3] + k0 + j)] = 1;
                }
    }
    return live;
}

// dbias (f32, the bias's reduced shape) against the oracle's reduction: the same error ratio
// and bar as the other outputs; cells with no live contribution (dbias_live) exactly 0; a live
// problem's reference not all zero.
void judge_dbias(const Inst &in, const fattn::ref::Outputs &r, double tol, bool any_live, std::string *line,
                 std::vector<std::string> *errs) {
    const std::vector<double> db = read_view4(in, in.dbias);
    const std::vector<char> live = dbias_live(in);
    int64_t dead = 0, dead_bad = 0;
    bool ref_zero = true, finite = true;
    for (size_t i = 0; i < db.size(); ++i) {
        finite &= std::isfinite(db[i]);
        ref_zero &= r.dbias[i] == 0.0;
        if (live[i]) continue;
        ++dead;
        dead_bad += db[i] != 0.0 || r.dbias[i] != 0.0;
    }
    if (!finite) errs->push_back("non-finite value in dbias");
    if (dead_bad) errs->push_back(fmt("dbias: %lld of %lld cells with no live (unmasked, finite-bias) entry are not 0", (long long)dead_bad, (long long)dead));
    if (any_live && ref_zero) errs->push_back("reference dbias is all zero");
    const double e = rel_rms(db, r.dbias, {});
    *line += dead ? fmt("dbias %.1e (%lld cells dead, 0) ", e, (long long)dead) : fmt("dbias %.1e ", e);
    if (!(e <= tol)) errs->push_back(fmt("dbias error %.2e > tol %.0e", e, tol));
}

}  // namespace

void check_written(Buf &b, std::vector<std::string> *errs) {
    const WriteScan w = scan_written(b);
    b.n_inf = w.inf;
    if (w.nan) errs->push_back(fmt("%s: %lld cells NaN/unwritten", b.name, (long long)w.nan));
    if (w.oob) errs->push_back(fmt("%s: %lld bytes written outside its views (guard/gap)", b.name, (long long)w.oob));
}

void score_outputs(const double (&e)[5], double tol, double lse_tol, std::string *line, std::vector<std::string> *errs) {
    static const char *const names[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; ++i) {
        // lse: judged by the arithmetic's tolerance, not by the storage dtype's (lse_tolerance).
        const double t = i == 1 ? std::min(tol, lse_tol) : tol;
        *line += fmt("%s %.1e ", names[i], e[i]);
        if (!(e[i] <= t)) errs->push_back(fmt("%s error %.2e > tol %.0e", names[i], e[i], t));
    }
}

bool verdict(const std::vector<std::string> &errs, const std::string &line, std::string *msg) {
    if (errs.empty()) {
        *msg = line;
        return true;
    }
    std::string m;
    for (size_t i = 0; i < errs.size() && i < 6; ++i) m += (i ? "; " : "") + errs[i];
    *msg = m + " | " + line;
    return false;
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
    std::string line;
    score_outputs({e_o, e_lse, e_dq, e_dk, e_dv}, tol, lse_tol, &line, &errs);
    if (in.wants_dbias()) judge_dbias(in, r, tol, any_live, &line, &errs);
    line += fmt("(tol %.0e", tol);
    if (masked_rows) line += fmt(", %lld masked rows", (long long)masked_rows);
    if (unseen) line += fmt(", %lld unseen keys", (long long)unseen);
    line += ")";
    return verdict(errs, line, msg);
}

// Large cases: the oracle's sampled layer on 48 query rows and up to 16 keys (those whose

}  // namespace fattn_test
