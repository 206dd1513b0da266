// attn_sampled.cpp — the sampled judge of the --large cases (S >= 16k; tensors of more than 2^31
// elements), where no dense oracle fits.
//
// Sampled query rows are compared for o, lse and dq, sampled keys for dk and dv, against the
// oracle's sampled layer (fattn::ref::attn_row / attn_key) run on the part of the sequence the
// sample needs: the params' mask is a band c1 <= j - i <= c2 (attn_params.h), so cutting the same
// tokens off the front (and the back) of q and kv keeps every mask, and a row of a 64-key window
// costs 64 keys whatever S is (a bias's -inf entries narrow the part further). Which rows: random ones, plus fixed ones where addressing breaks
// first — the first and last rows of the first and last sequences, and the rows on either side
// of element offsets 2^31 and 2^32 of o, lse and dq (keys likewise for dk, dv). Every element is
// still checked for NaN / unwritten poison / guards by run_lib, and for ±inf here (b.n_inf).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "test/attn_judge.h"

namespace fattn_test {

namespace {

// Sequence s: its batch index in the views, first query and key token, lengths.
struct Span {
    int64_t b, q0, lq, k0, lk;
};

Span span_of(const Inst &in, int64_t s) {
    if (!in.c->is_varlen()) return {s, 0, in.Sq, 0, in.Skv};
    const size_t u = size_t(s);
    return {0, in.cu_q[u], in.cu_q[u + 1] - in.cu_q[u], in.cu_kv[u], in.cu_kv[u + 1] - in.cu_kv[u]};
}

// The normalized mask of the params: query i may see key j iff c1 <= j - i <= c2 (and
// 0 <= j < lk); bottom-right alignment's diagonal offset lk - lq is folded into c1, c2.
struct Band {
    int64_t c1, c2;
};

Band band_of(const fattn::AttnBwdParams &a, const Span &q) {
    const int64_t off = a.bottom_right ? q.lk - q.lq : 0, big = int64_t(1) << 62;
    return {a.win_left >= 0 ? off - a.win_left : -big, a.win_right >= 0 ? off + a.win_right : big};
}

// Rows [i0, i1] and keys [j0, j1] of a sequence as a dense problem of one sequence: tokens
// [t, len - u) of it, cut alike from q and kv so that j - i and lk - lq, hence every mask, stay
// as they were. The caller picks the ranges so that nothing outside them matters.
struct Sub {
    fattn::AttnBwdParams p;
    int64_t t = 0;
};

Sub cut(const fattn::AttnBwdParams &a, const Span &q, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int64_t t = std::max<int64_t>(0, std::min(i0, j0)), u = std::max<int64_t>(0, std::min(q.lq - 1 - i1, q.lk - 1 - j1));
    auto at = [](const void *base, fattn_dtype dt, int64_t e) {
        return static_cast<const void *>(static_cast<const char *>(base) + e * int64_t(fattn_dtype_size(dt)));
    };
    Sub r;
    r.t = t;
    fattn::AttnBwdParams &p = r.p;
    p = a;
    p.batch = 1;
    p.seqlen_q = p.total_q = q.lq - t - u;
    p.seqlen_kv = p.total_kv = q.lk - t - u;
    p.cu_seqlens_q = p.cu_seqlens_kv = nullptr;
    p.q = at(a.q, a.dtype, q.b * a.q_sb + (q.q0 + t) * a.q_ss);
    p.k = at(a.k, a.dtype, q.b * a.k_sb + (q.k0 + t) * a.k_ss);
    p.v = at(a.v, a.dtype, q.b * a.v_sb + (q.k0 + t) * a.v_ss);
    p.dout = at(a.dout, a.dtype, q.b * a.do_sb + (q.q0 + t) * a.do_ss);
    if (a.bias) p.bias = at(a.bias, a.bias_dtype, q.b * a.bias_sb + (q.q0 + t) * a.bias_si + (q.k0 + t));
    return r;
}

// Whether some head of [h0, h1) has a bias other than -inf at (row i, key j) of the sequence.
bool bias_open(const fattn::AttnBwdParams &a, const Span &q, int64_t h0, int64_t h1, int64_t i, int64_t j) {
    if (!a.bias) return true;
    for (int64_t h = h0; h < h1; ++h)
        if (fattn::ref::decode(a.bias, a.bias_dtype, q.b * a.bias_sb + h * a.bias_sh + (q.q0 + i) * a.bias_si + q.k0 + j) !=
            -std::numeric_limits<double>::infinity())
            return true;
    return false;
}

// The oracle's row i of head h in sequence s, on the keys it may see (mask band, then the bias).
void row_ref(const fattn::AttnBwdParams &a, int64_t s, const Span &q, int64_t h, int64_t i, fattn::ref::RowRef *r) {
    const Band bd = band_of(a, q);
    int64_t j0 = std::max<int64_t>(0, i + bd.c1), j1 = std::min(q.lk - 1, i + bd.c2);
    while (j0 <= j1 && !bias_open(a, q, h, h + 1, i, j0)) ++j0;
    while (j1 > j0 && !bias_open(a, q, h, h + 1, i, j1)) --j1;
    if (j0 > j1) return fattn::ref::attn_row(a, s, h, i, r);  // sees no key: cheap on the whole
    const Sub sb = cut(a, q, i, i, j0, j1);
    fattn::ref::attn_row(sb.p, 0, h, i - sb.t, r);
}

// Key j (kv head hk) of sequence s: the problem its dk/dv needs — the rows that may see it, and
// every key those rows may see (mask band, narrowed by the bias where scanning it is cheap) —
// and an estimate of the oracle's multiply-adds there.
struct KeyPlan {
    Sub sub;
    bool whole = false;  // no row may see the key: the oracle on the whole sequence (no rows to do)
    double cost = 0;
};

KeyPlan plan_key(const fattn::AttnBwdParams &a, const Span &q, int64_t hk, int64_t j) {
    const Band bd = band_of(a, q);
    const int64_t g = a.group(), h0 = hk * g, h1 = h0 + g;
    int64_t i0 = std::max<int64_t>(0, j - bd.c2), i1 = std::min(q.lq - 1, j - bd.c1);
    while (i0 <= i1 && !bias_open(a, q, h0, h1, i0, j)) ++i0;
    while (i1 > i0 && !bias_open(a, q, h0, h1, i1, j)) --i1;
    KeyPlan kp;
    if (i0 > i1) {
        kp.whole = true;
        kp.cost = double(q.lq) * double(g);
        return kp;
    }
    int64_t j0 = std::max<int64_t>(0, i0 + bd.c1), j1 = std::min(q.lk - 1, i1 + bd.c2);
    if (a.bias && double(i1 - i0 + 1) * double(g) * double(j1 - j0 + 1) <= 5e7) {  // keys no such row sees
        auto open = [&](int64_t jj) {
            for (int64_t i = std::max(i0, jj - bd.c2); i <= std::min(i1, jj - bd.c1); ++i)
                if (bias_open(a, q, h0, h1, i, jj)) return true;
            return false;
        };
        while (j0 < j && !open(j0)) ++j0;
        while (j1 > j && !open(j1)) --j1;
    }
    kp.sub = cut(a, q, i0, i1, j0, j1);
    kp.cost = double(i1 - i0 + 1) * double(g) * double(j1 - j0 + 1) * double(a.d + a.dim_v);
    return kp;
}

// (batch index, token) of the rows on either side of element offset T in view v, head h: the
// first row (batch by batch, token by token) whose last element lies at or past T, and the row
// before it. sdim / hdim: the view's token and head dims.
void rows_around(const View &v, int sdim, int hdim, int64_t h, int64_t T, std::vector<std::pair<int64_t, int64_t>> *out) {
    const int64_t st = v.nb[sdim], ns = v.ne[sdim];
    if (st <= 0 || ns == 0 || v.ne[3] == 0) return;
    for (int64_t bb = 0; bb < v.ne[0]; ++bb) {
        int64_t idx[4] = {bb, 0, 0, 0};
        idx[hdim] = h;
        const int64_t base = v.at(idx[0], idx[1], idx[2], v.ne[3] - 1);  // last element of token 0
        if (base + (ns - 1) * st < T) continue;
        const int64_t g = base >= T ? 0 : (T - base + st - 1) / st;
        out->push_back({bb, g});
        if (g > 0) out->push_back({bb, g - 1});
        return;
    }
}

// (batch index, token in the view) -> (sequence, index inside it); false for no sequence.
bool seq_of_token(const Inst &in, const std::vector<int32_t> &cu, int64_t bb, int64_t g, int64_t *s, int64_t *i) {
    if (!in.c->is_varlen()) return *s = bb, *i = g, true;
    auto it = std::upper_bound(cu.begin(), cu.end(), int32_t(g));
    if (it == cu.begin() || it == cu.end()) return false;
    *s = int64_t(it - cu.begin()) - 1;
    *i = g - cu[size_t(*s)];
    return true;
}

// sqrt(num / den); a reference identically zero (every row sees one key: dq = dk = 0 by the math,
// while f32 leaves a rounding residue) is taken relative to `fallback` (the dense judge's rule).
double rel(double num, double den, double fallback = 0) {
    if (den == 0) den = fallback;
    return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

}  // namespace

bool judge_sampled(const Inst &in, double tol, double lse_tol, std::string *msg, const SampleOpts &so) {
    const AttnCase &c = *in.c;
    const fattn::AttnBwdParams a = ref_params(in);
    const Buf &bo = in.buf[in.o.buf], &bl = in.buf[in.lse.buf], &bq = in.buf[in.dq.buf];
    const Buf &bk = in.buf[in.dk.buf], &bv = in.buf[in.dv.buf];
    auto lib = [](const Buf &b, int64_t e) { return fattn::ref::decode(b.host.data(), b.dt, e); };
    std::vector<std::string> errs;
    std::mt19937_64 rng(11);

    // ---- which rows and keys: fixed ones first, then random ones
    int64_t s_first = -1, s_last = -1;
    for (int64_t s = 0; s < in.nseq; ++s)
        if (span_of(in, s).lq > 0) s_last = s, s_first = s_first < 0 ? s : s_first;
    std::set<std::tuple<int64_t, int64_t, int64_t>> rowset, keyset;  // (s, head, index)
    std::vector<std::tuple<int64_t, int64_t, int64_t>> rows, keys;
    auto add = [&](bool key, int64_t s, int64_t h, int64_t i) {
        if (s < 0 || s >= in.nseq || i < 0 || i >= (key ? span_of(in, s).lk : span_of(in, s).lq)) return;
        if ((key ? keyset : rowset).insert({s, h, i}).second) (key ? keys : rows).push_back({s, h, i});
    };
    for (int64_t s : {s_first, s_last}) {
        if (s < 0) continue;
        const Span q = span_of(in, s);
        add(false, s, 0, 0), add(false, s, c.Hq - 1, q.lq - 1), add(false, s, 0, q.lq - 2);
        add(true, s, 0, 0), add(true, s, c.Hkv - 1, q.lk - 1), add(true, s, 0, q.lk - 2);
    }
    for (int64_t T : so.offsets) {
        std::vector<std::pair<int64_t, int64_t>> at;
        for (int64_t h : {int64_t(0), c.Hq - 1}) {
            at.clear();
            rows_around(in.o, 1, 2, h, T, &at), rows_around(in.dq, 1, 2, h, T, &at), rows_around(in.lse, 2, 1, h, T, &at);
            for (auto &p : at)
                if (int64_t s, i; seq_of_token(in, in.cu_q, p.first, p.second, &s, &i)) add(false, s, h, i);
        }
        for (int64_t h : {int64_t(0), c.Hkv - 1}) {
            at.clear();
            rows_around(in.dk, 1, 2, h, T, &at), rows_around(in.dv, 1, 2, h, T, &at);
            for (auto &p : at)
                if (int64_t s, j; seq_of_token(in, in.cu_kv, p.first, p.second, &s, &j)) add(true, s, h, j);
        }
    }
    for (int t = 0; t < so.rows; ++t) {
        const int64_t s = int64_t(rng() % uint64_t(in.nseq)), lq = span_of(in, s).lq;
        const int64_t h = int64_t(rng() % uint64_t(c.Hq));
        if (lq > 0) add(false, s, h, int64_t(rng() % uint64_t(lq)));
    }

    // ---- rows: o, lse, dq (the oracle on every core, one row each; summed in order)
    double n_o = 0, d_o = 0, n_l = 0, d_l = 0, n_q = 0, d_q = 0, n_k = 0, d_k = 0, n_v = 0, d_v = 0;
    int64_t nrows = 0, masked = 0, multi = 0, nkeys = 0, unseen = 0, skipped = 0;
    std::vector<fattn::ref::RowRef> refs(rows.size());
    par_chunks(int64_t(rows.size()), [&](int64_t k) {
        const auto &[s, h, i] = rows[size_t(k)];
        row_ref(a, s, span_of(in, s), h, i, &refs[size_t(k)]);
    });
    for (size_t k = 0; k < rows.size(); ++k) {
        const auto &[s, h, i] = rows[k];
        const Span q = span_of(in, s);
        const int64_t b = q.b, gi = q.q0 + i;
        const fattn::ref::RowRef &r = refs[k];
        ++nrows;
        multi += r.nvis >= 2;
        const double lse = lib(bl, in.lse.at(b, h, gi, 0));
        if (!std::isfinite(r.lse)) {
            ++masked;
            bool zero = lse == -std::numeric_limits<double>::infinity();
            for (int64_t d = 0; d < c.Dv; ++d) zero &= lib(bo, in.o.at(b, gi, h, d)) == 0.0;
            for (int64_t d = 0; d < c.D; ++d) zero &= lib(bq, in.dq.at(b, gi, h, d)) == 0.0;
            if (!zero) errs.push_back(fmt("masked row (s%lld h%lld i%lld): o/dq != 0 or lse != -inf", (long long)s, (long long)h, (long long)i));
            continue;
        }
        n_l += (lse - r.lse) * (lse - r.lse), d_l += r.lse * r.lse;
        for (int64_t d = 0; d < c.Dv; ++d) {
            const double x = lib(bo, in.o.at(b, gi, h, d)), y = r.o[size_t(d)];
            n_o += (x - y) * (x - y), d_o += y * y;
        }
        for (int64_t d = 0; d < c.D; ++d) {
            const double x = lib(bq, in.dq.at(b, gi, h, d)), y = r.dq[size_t(d)];
            n_q += (x - y) * (x - y), d_q += y * y;
        }
    }

    // ---- keys: dk, dv. The fixed keys, then random tries (half near the end of the sequence,
    // where causal keys are seen by few rows) up to so.keys more; a key whose oracle would cost
    // over kKeyCost multiply-adds (~1 s) is left out. The oracle runs on every core (each key on
    // its own, summed in order below); keys not started within 20 s are left out too.
    constexpr double kKeyCost = 2.5e8;
    std::vector<KeyPlan> plans;
    std::vector<std::tuple<int64_t, int64_t, int64_t>> todo;
    auto take = [&](int64_t s, int64_t hk, int64_t j) {
        KeyPlan kp = plan_key(a, span_of(in, s), hk, j);
        if (kp.cost > kKeyCost) return ++skipped, false;
        plans.push_back(kp), todo.push_back({s, hk, j});
        return true;
    };
    for (auto &[s, hk, j] : keys) take(s, hk, j);
    for (int t = 0, done = 0; t < 400 && done < so.keys; ++t) {
        const int64_t s = int64_t(rng() % uint64_t(in.nseq)), lk = span_of(in, s).lk;
        if (lk == 0) continue;
        const int64_t j = (t % 2) ? lk - 1 - int64_t(rng() % uint64_t(std::min<int64_t>(lk, 64))) : int64_t(rng() % uint64_t(lk));
        const int64_t hk = int64_t(rng() % uint64_t(c.Hkv));
        if (keyset.insert({s, hk, j}).second) done += take(s, hk, j);
    }
    std::vector<std::vector<double>> rks(todo.size()), rvs(todo.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    par_chunks(int64_t(todo.size()), [&](int64_t k) {
        if (std::chrono::steady_clock::now() > deadline) return;
        const auto &[s, hk, j] = todo[size_t(k)];
        const KeyPlan &kp = plans[size_t(k)];
        if (kp.whole) fattn::ref::attn_key(a, s, hk, j, &rks[size_t(k)], &rvs[size_t(k)]);
        else fattn::ref::attn_key(kp.sub.p, 0, hk, j - kp.sub.t, &rks[size_t(k)], &rvs[size_t(k)]);
    });
    for (size_t k = 0; k < todo.size(); ++k) {
        const auto &[s, hk, j] = todo[k];
        const std::vector<double> &rk = rks[k], &rv = rvs[k];
        if (rk.empty()) {  // not started before the deadline
            ++skipped;
            continue;
        }
        const Span q = span_of(in, s);
        ++nkeys;
        const bool zero_ref = std::all_of(rv.begin(), rv.end(), [](double e) { return e == 0.0; });
        unseen += zero_ref;
        for (int64_t d = 0; d < c.D; ++d) {
            const double x = lib(bk, in.dk.at(q.b, q.k0 + j, hk, d)), y = rk[size_t(d)];
            if (zero_ref && x != 0.0) errs.push_back("unseen key: dk != 0");
            n_k += (x - y) * (x - y), d_k += y * y;
        }
        for (int64_t d = 0; d < c.Dv; ++d) {
            const double x = lib(bv, in.dv.at(q.b, q.k0 + j, hk, d)), y = rv[size_t(d)];
            if (zero_ref && x != 0.0) errs.push_back("unseen key: dv != 0");
            n_v += (x - y) * (x - y), d_v += y * y;
        }
    }

    // ---- verdict
    if (nrows > masked && d_o == 0) errs.push_back("sampled reference o is all zero");
    if (multi > 0 && d_q == 0) errs.push_back("sampled reference dq is all zero");
    if (nkeys > unseen && d_v == 0) errs.push_back("sampled reference dv is all zero");
    for (const Buf *b : {&bo, &bq, &bk, &bv})  // fused layouts share one buffer: one line is enough
        if (b->n_inf > 0) {
            errs.push_back(fmt("non-finite value in an output: %s has %lld inf cells", b->name, (long long)b->n_inf));
            break;
        }
    const double dv_ms = nkeys ? d_v / double(nkeys * c.Dv) : 0.0;  // mean square of the reference dv
    std::string line;
    score_outputs({rel(n_o, d_o), rel(n_l, d_l), rel(n_q, d_q, dv_ms * double(c.D * (nrows - masked))),
                   rel(n_k, d_k, dv_ms * double(c.D * nkeys)), rel(n_v, d_v)},
                  tol, lse_tol, &line, &errs);
    line += fmt("(tol %.0e; sampled %lld rows, %lld masked; %lld keys, %lld unseen", tol, (long long)nrows, (long long)masked,
                (long long)nkeys, (long long)unseen);
    if (skipped) line += fmt(", %lld keys left out: too costly or late", (long long)skipped);
    line += ")";
    if (nkeys == 0) line += " [no key cheap enough: dk/dv only checked for NaN/inf/guards]";
    return verdict(errs, line, msg);
}

}  // namespace fattn_test
