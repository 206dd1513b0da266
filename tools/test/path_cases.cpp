// path_cases.cpp — the PaTH family of fattn-test (registered as "path").
//
// Modes: test (the backend through the C API vs the float64 oracle, every output, FLA's
// err_ratio = rms(out - ref) / rms(ref)), grad (oracle vs central finite differences for q, k, v,
// w, beta, g), determinism (CPU: threads 1 vs --threads; CUDA: two runs; bitwise), support (what
// runs), perf (one timing line per case). Inputs, outputs and workspaces live in the backend's
// memory (device buffers on CUDA); outputs and workspaces are NaN-poisoned before each call, and
// every reference output is asserted non-zero. CUDA f32 inputs run on TF32 tensor cores: their
// bar is 5e-3 (16-bit inputs: FLA's bars on either backend).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "cpu/ref/path_ref.h"
#include "fattn/fattn.h"
#include "test/path_cases.h"
#include "test/path_data.h"
#include "test/backend_mem.h"
#include "test/registry.h"

namespace {

using namespace fattn_test;

struct PCase {
    const char *name;
    int64_t B, T, Hq, H, K, V;
    std::vector<int32_t> cu;
    bool gate;
    fattn_dtype dt;
    fattn_path_history hist;
    double beta_lo;  // beta ~ U(beta_lo, 2): near 2, long-range paths keep their weight
    bool quick;      // part of --quick
};

const std::vector<PCase> &table() {
    static const std::vector<PCase> t = {
        {"path/dense_T97_gqa_K16_V32_gate_f32", 2, 97, 2, 1, 16, 32, {}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 0.3, true},
        {"path/dense_T512_mha_K64_gate_f32", 1, 512, 2, 2, 64, 64, {}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.5, false},
        {"path/dense_T513_gqa_K32_V16_f32", 1, 513, 2, 1, 32, 16, {}, false, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.9, true},
        {"path/dense_T1025_K64_gate_f32", 1, 1025, 1, 1, 64, 64, {}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/varlen_15_333_900_K32_gate_f32", 1, 1248, 2, 1, 32, 32, {0, 15, 348, 1248}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/dense_T1100_rect_K64_f32", 1, 1100, 2, 1, 64, 64, {}, false, FATTN_F32, FATTN_PATH_HISTORY_RECTANGULAR, 1.95, false},
        {"path/dense_T640_K128_gate_bf16", 1, 640, 2, 2, 128, 128, {}, true, FATTN_BF16, FATTN_PATH_HISTORY_PACKED, 1.5, false},
        // three segments at K 128 (the E step of seg-inter's D128 layouts), 16-bit and f32
        {"path/dense_T1100_K128_bf16", 1, 1100, 1, 1, 128, 128, {}, false, FATTN_BF16, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/dense_T1100_K128_gate_f32", 1, 1100, 1, 1, 128, 128, {}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/varlen_gqa_K64_f16", 1, 1100, 4, 2, 64, 64, {0, 100, 613, 1100}, false, FATTN_F16, FATTN_PATH_HISTORY_PACKED, 1.9, true},
        {"path/dense_T1100_gqa_K64_gate_bf16", 1, 1100, 4, 2, 64, 64, {}, true, FATTN_BF16, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/varlen_K128_V64_f16", 1, 1300, 2, 2, 128, 64, {0, 700, 1300}, false, FATTN_F16, FATTN_PATH_HISTORY_PACKED, 1.9, false},
        // 16-bit beside the f32 ones: the rectangular history, and V < K (zero-filled columns)
        {"path/dense_T1100_rect_K64_bf16", 1, 1100, 2, 1, 64, 64, {}, true, FATTN_BF16, FATTN_PATH_HISTORY_RECTANGULAR, 1.95, false},
        {"path/dense_T700_K64_V16_f16", 1, 700, 2, 2, 64, 16, {}, true, FATTN_F16, FATTN_PATH_HISTORY_PACKED, 1.9, false},
        // head dims between the CUDA kernels' sizes (zeros past K and V; K 100 in f16: rows that are
        // not whole 16-byte vectors, element loads, history rows of 104)
        {"path/dense_T600_gqa_K48_V80_gate_bf16", 1, 600, 2, 1, 48, 80, {}, true, FATTN_BF16, FATTN_PATH_HISTORY_PACKED, 1.95, true},
        {"path/dense_T600_K20_V12_gate_f32", 1, 600, 2, 2, 20, 12, {}, true, FATTN_F32, FATTN_PATH_HISTORY_PACKED, 1.95, false},
        {"path/varlen_K100_V72_f16", 1, 1100, 2, 1, 100, 72, {0, 530, 1100}, false, FATTN_F16, FATTN_PATH_HISTORY_PACKED, 1.9, false},
    };
    return t;
}

using Buf = fattn_test::TypedBuf;

struct Run {
    Run() = default;
    Run(const Run &) = delete;  // owns its backend buffers
    Run &operator=(const Run &) = delete;
    PCase c;
    Buf q, k, v, w, beta, g, dout, o, lse, dq, dk, dv, dw, db, dg;
    void inputs(uint32_t seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<double> nd;
        std::uniform_real_distribution<double> ub(c.beta_lo, 2.0), ug(-0.02, 0.0);
        const int64_t R = c.B * c.T;
        q.alloc(c.dt, R * c.Hq * c.K), k.alloc(c.dt, R * c.H * c.K), v.alloc(c.dt, R * c.H * c.V);
        w.alloc(FATTN_F32, R * c.H * c.K), beta.alloc(FATTN_F32, R * c.H), dout.alloc(c.dt, R * c.Hq * c.V);
        for (Buf *b : {&q, &k, &v, &dout})
            for (size_t i = 0; i < b->val.size(); ++i) b->set(int64_t(i), nd(rng));
        for (int64_t r = 0; r < R * c.H; ++r) {
            const std::vector<double> x = fattn_test::unit_vector(c.K, rng, nd);
            for (int64_t d = 0; d < c.K; ++d) w.set(r * c.K + d, x[size_t(d)]);
            beta.set(r, ub(rng));
        }
        if (c.gate) {
            g.alloc(FATTN_F32, R * c.Hq);
            for (size_t i = 0; i < g.val.size(); ++i) g.set(int64_t(i), ug(rng));
        }
    }
    // Every tensor in the backend's memory (host buffers are the staging area of a CUDA run).
    BackendKind kind = BackendKind::CPU;
    std::vector<DevBuf *> devs;
    ~Run() {
        for (DevBuf *d : devs) delete d;
    }
    void *place(Buf &b) {
        if (kind == BackendKind::CPU) return b.bytes.data();
        DevBuf *d = new DevBuf;
        devs.push_back(d);
        if (!d->alloc(kind, b.bytes.size()) || !d->upload(b.bytes.data(), b.bytes.size())) return nullptr;
        return d->ptr();
    }
    std::vector<std::pair<Buf *, DevBuf *>> outs;
    fattn_tensor t(Buf &b, int64_t n2, int64_t n3, bool out = false) {
        void *ptr = place(b);
        if (out && kind != BackendKind::CPU) outs.push_back({&b, devs.back()});
        return fattn_tensor_contiguous(ptr, b.dt, c.B, c.T, n2, n3);
    }
    // fwd + bwd; returns "" or the error.
    std::string go(fattn_ctx_t *ctx, double *ms) {
        const int64_t R = c.B * c.T;
        kind = fattn_ctx_backend(ctx) == FATTN_BACKEND_CUDA ? BackendKind::CUDA : BackendKind::CPU;
        o.alloc(c.dt, R * c.Hq * c.V), lse.alloc(FATTN_F32, R * c.Hq), dq.alloc(c.dt, R * c.Hq * c.K);
        dk.alloc(c.dt, R * c.H * c.K), dv.alloc(c.dt, R * c.H * c.V), dw.alloc(FATTN_F32, R * c.H * c.K);
        db.alloc(FATTN_F32, R * c.H);
        if (c.gate) dg.alloc(FATTN_F32, R * c.Hq);
        fattn_path_params p = fattn_path_params_default();
        if (!c.cu.empty()) p.cu_seqlens = c.cu.data(), p.num_seqs = int64_t(c.cu.size()) - 1;
        p.history = c.hist;
        fattn_tensor tq = t(q, c.Hq, c.K), tk = t(k, c.H, c.K), tv = t(v, c.H, c.V), tw = t(w, c.H, c.K),
                     tb = t(beta, c.H, 1), tg = c.gate ? t(g, c.Hq, 1) : fattn_tensor_none(), to = t(o, c.Hq, c.V, true),
                     tdo = t(dout, c.Hq, c.V), tdq = t(dq, c.Hq, c.K, true), tdk = t(dk, c.H, c.K, true),
                     tdv = t(dv, c.H, c.V, true), tdw = t(dw, c.H, c.K, true), tdb = t(db, c.H, 1, true),
                     tdg = c.gate ? t(dg, c.Hq, 1, true) : fattn_tensor_none();
        void *lp = place(lse);
        if (kind != BackendKind::CPU) outs.push_back({&lse, devs.back()});
        fattn_tensor tl = fattn_tensor_contiguous(lp, FATTN_F32, c.B, c.Hq, c.T, 1);
        for (const fattn_tensor *x : {&tq, &tk, &tv, &tw, &tb, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb})
            if (!x->data) return "allocation of a backend buffer failed";
        fattn_path_workspace_info wf{}, wb{};
        fattn_status s = fattn_path_workspace_size(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, FATTN_DIR_FWD, &wf);
        if (s == FATTN_OK) s = fattn_path_workspace_size(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, FATTN_DIR_BWD, &wb);
        if (s != FATTN_OK) return std::string(fattn_status_string(s)) + ": " + fattn_ctx_last_error(ctx);
        DevBuf ws;
        if (!ws.alloc(kind, size_t(std::max(wf.total_bytes, wb.total_bytes)) + 1) || !ws.poison())
            return "workspace allocation failed";
        auto t0 = std::chrono::steady_clock::now();
        s = fattn_path_fwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, ws.ptr(), wf.total_bytes);
        if (s != FATTN_OK) return std::string(fattn_status_string(s)) + ": " + fattn_ctx_last_error(ctx);
        ws.poison();
        s = fattn_path_bwd(ctx, &p, &tq, &tk, &tv, &tw, &tb, &tg, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb, &tdg,
                           ws.ptr(), wb.total_bytes);
        backend_sync(kind);
        if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (s != FATTN_OK) return std::string(fattn_status_string(s)) + ": " + fattn_ctx_last_error(ctx);
        for (auto &[b, d] : outs)
            if (!d->download(b->bytes.data(), b->bytes.size())) return "download of an output failed";
        for (Buf *b : {&o, &lse, &dq, &dk, &dv, &dw, &db}) b->read();
        if (c.gate) dg.read();
        return "";
    }
};

}  // namespace

bool fattn_test::judge_ratios(const std::vector<fattn_test::PathJudged> &cs, bool verbose, std::string *detail) {
    bool ok = true;
    char buf[96];
    for (const fattn_test::PathJudged &m : cs) {
        double se = 0, sr = 0;
        bool finite = true;
        for (size_t i = 0; i < m.got.size(); ++i) {
            finite = finite && std::isfinite(m.got[i]);
            se += (m.got[i] - m.ref[i]) * (m.got[i] - m.ref[i]);
            sr += m.ref[i] * m.ref[i];
        }
        const double ratio = finite ? std::sqrt(se / (sr + 1e-300)) : INFINITY;
        const bool good = finite && ratio < m.tol && sr > 0 && m.got.size() == m.ref.size();
        ok = ok && good;
        if (!good || verbose || &m == &cs.front() || std::string(m.name) == "dw") {
            std::snprintf(buf, sizeof buf, "%s%s %.1e%s", detail->empty() ? "" : " ", m.name, ratio, sr > 0 ? "" : "(ref 0!)");
            *detail += buf;
        }
    }
    return ok;
}

namespace {

fattn::ref::PathRefShape shape_of(const PCase &c) {
    fattn::ref::PathRefShape s;
    s.B = c.B, s.T = c.T, s.Hq = c.Hq, s.H = c.H, s.K = c.K, s.V = c.V, s.cu_seqlens = c.cu;
    return s;
}

void mode_test(const Options &o, Summary &sum, const PCase &c) {
    Run r;
    r.c = c;
    r.inputs(7);
    std::string why;
    fattn_ctx_t *ctx = make_ctx(o.backend, o.threads, &why);
    if (!ctx) return record(sum, Outcome::FAIL, c.name, why);  // never a CPU run for a CUDA request
    std::string e = r.go(ctx, nullptr);
    fattn_ctx_free(ctx);
    if (!e.empty()) return record(sum, Outcome::FAIL, c.name, e);
    auto s = shape_of(c);
    std::vector<double> ro(r.o.val.size()), rl(r.lse.val.size()), rq(r.dq.val.size()), rk(r.dk.val.size()),
        rv(r.dv.val.size()), rw(r.dw.val.size()), rb(r.db.val.size()), rg(size_t(c.B * c.T * c.Hq));
    const double *g = c.gate ? r.g.val.data() : nullptr;
    fattn::ref::path_ref_fwd(s, r.q.val.data(), r.k.val.data(), r.v.val.data(), r.w.val.data(), r.beta.val.data(), g,
                             ro.data(), rl.data());
    fattn::ref::path_ref_bwd(s, r.q.val.data(), r.k.val.data(), r.v.val.data(), r.w.val.data(), r.beta.val.data(), g,
                             r.dout.val.data(), rq.data(), rk.data(), rv.data(), rw.data(), rb.data(), rg.data());
    // f32: tight on the CPU, TF32 on CUDA; f16/bf16: FLA's per-gradient ratios (PATH.md §7.2).
    const bool f32 = c.dt == FATTN_F32 && o.backend == BackendKind::CPU, bf = c.dt == FATTN_BF16;
    const bool tf32 = c.dt == FATTN_F32 && o.backend == BackendKind::CUDA;
    auto bar = [&](double b16) { return f32 ? 3e-5 : tf32 ? 5e-3 : bf ? b16 : 0.005; };
    std::vector<PathJudged> cs = {{"o", r.o.val, ro, bar(0.005)},  {"lse", r.lse.val, rl, bar(0.005)},
                                  {"dq", r.dq.val, rq, bar(0.008)}, {"dk", r.dk.val, rk, bar(0.008)},
                                  {"dv", r.dv.val, rv, bar(0.008)}, {"dw", r.dw.val, rw, bar(0.015)},
                                  {"dbeta", r.db.val, rb, bar(0.02)}};
    if (c.gate) cs.push_back({"dg", r.dg.val, rg, bar(0.02)});
    std::string detail;
    const bool ok = judge_ratios(cs, o.verbose, &detail);
    record(sum, ok ? Outcome::PASS : Outcome::FAIL, c.name, detail);
}

void mode_determinism(const Options &o, Summary &sum, const PCase &c) {
    Run a, b;
    a.c = b.c = c;
    a.inputs(9);
    b.inputs(9);
    std::string why;
    const bool cuda = o.backend == BackendKind::CUDA;
    fattn_ctx_t *c1 = make_ctx(o.backend, 1, &why), *cn = make_ctx(o.backend, std::max(2, o.threads), &why);
    if (!c1 || !cn) {
        if (c1) fattn_ctx_free(c1);
        if (cn) fattn_ctx_free(cn);
        return record(sum, Outcome::FAIL, c.name, why);
    }
    std::string e = a.go(c1, nullptr);
    if (e.empty()) e = b.go(cn, nullptr);
    fattn_ctx_free(c1);
    fattn_ctx_free(cn);
    if (!e.empty()) return record(sum, Outcome::FAIL, c.name, e);
    std::string diff;
    for (auto [x, y, n] : {std::tuple{&a.o, &b.o, "o"}, {&a.lse, &b.lse, "lse"}, {&a.dq, &b.dq, "dq"},
                           {&a.dk, &b.dk, "dk"}, {&a.dv, &b.dv, "dv"}, {&a.dw, &b.dw, "dw"}, {&a.db, &b.db, "dbeta"},
                           {&a.dg, &b.dg, "dg"}})
        if (x->bytes != y->bytes) diff += std::string(" ") + n;
    record(sum, diff.empty() ? Outcome::PASS : Outcome::FAIL, c.name,
           diff.empty() ? (cuda ? std::string("bitwise equal, two runs on the device")
                                : "bitwise equal, threads 1 vs " + std::to_string(std::max(2, o.threads)))
                        : "differs:" + diff);
}

// Oracle gradients vs central differences on tiny problems (the oracle has no head-dim limit).
void mode_grad(Summary &sum) {
    struct G {
        const char *name;
        fattn::ref::PathRefShape s;
        bool gate;
    };
    std::vector<G> gs(3);
    gs[0].name = "path/grad/dense_gqa_gate";
    gs[0].s.B = 2, gs[0].s.T = 6, gs[0].s.Hq = 2, gs[0].s.H = 1, gs[0].s.K = 4, gs[0].s.V = 3, gs[0].gate = true;
    gs[1].name = "path/grad/varlen_mha";
    gs[1].s.B = 1, gs[1].s.T = 9, gs[1].s.Hq = 2, gs[1].s.H = 2, gs[1].s.K = 3, gs[1].s.V = 4, gs[1].gate = false;
    gs[1].s.cu_seqlens = {0, 2, 9};
    gs[2].name = "path/grad/varlen_gqa_gate";
    gs[2].s.B = 1, gs[2].s.T = 8, gs[2].s.Hq = 4, gs[2].s.H = 2, gs[2].s.K = 5, gs[2].s.V = 2, gs[2].gate = true;
    gs[2].s.cu_seqlens = {0, 5, 8};
    for (G &gc : gs) {
        const auto &s = gc.s;
        std::mt19937 rng(5);
        std::normal_distribution<double> nd;
        const int64_t R = s.B * s.T;
        std::vector<double> q(size_t(R * s.Hq * s.K)), k(size_t(R * s.H * s.K)), v(size_t(R * s.H * s.V)),
            w(k.size()), b(size_t(R * s.H)), g(size_t(R * s.Hq)), dout(size_t(R * s.Hq * s.V));
        for (auto *x : {&q, &k, &v, &w, &dout})
            for (auto &e : *x) e = nd(rng);
        for (auto &e : b) e = 0.5 + std::fabs(nd(rng)) * 0.5;
        for (auto &e : g) e = -0.1 * std::fabs(nd(rng));
        std::vector<double> o(dout.size()), l(size_t(R * s.Hq)), dq(q.size()), dk(k.size()), dv(v.size()),
            dw(w.size()), db(b.size()), dg(g.size());
        const double *gp = gc.gate ? g.data() : nullptr;
        fattn::ref::path_ref_bwd(s, q.data(), k.data(), v.data(), w.data(), b.data(), gp, dout.data(), dq.data(),
                                 dk.data(), dv.data(), dw.data(), db.data(), dg.data());
        auto loss = [&]() {
            fattn::ref::path_ref_fwd(s, q.data(), k.data(), v.data(), w.data(), b.data(), gp, o.data(), l.data());
            double a = 0;
            for (size_t i = 0; i < o.size(); ++i) a += o[i] * dout[i];
            return a;
        };
        std::string detail;
        bool ok = true;
        std::vector<std::tuple<const char *, std::vector<double> *, std::vector<double> *>> args = {
            {"q", &q, &dq}, {"k", &k, &dk}, {"v", &v, &dv}, {"w", &w, &dw}, {"beta", &b, &db}};
        if (gc.gate) args.push_back({"g", &g, &dg});
        for (auto &[n, x, dx] : args) {
            double err = 0, mx = 0;
            for (size_t i = 0; i < x->size(); ++i) {
                const double x0 = (*x)[i], h = 1e-5;
                (*x)[i] = x0 + h;
                const double lp = loss();
                (*x)[i] = x0 - h;
                const double lm = loss();
                (*x)[i] = x0;
                const double fd = (lp - lm) / (2 * h);
                err = std::max(err, std::fabs(fd - (*dx)[i]));
                mx = std::max(mx, std::fabs(fd));
            }
            const bool good = mx > 1e-3 && err < 1e-7 * std::max(1.0, mx);
            ok = ok && good;
            char buf[64];
            std::snprintf(buf, sizeof buf, "%s%s %.0e", detail.empty() ? "" : " ", n, err / std::max(mx, 1e-300));
            detail += buf;
        }
        record(sum, ok ? Outcome::PASS : Outcome::FAIL, gc.name, "max|fd-an|/max|fd|: " + detail);
    }
}

int run_path(const Options &o, Summary &sum) {
    if (o.mode == Mode::GRAD) {
        if (selected(o, "path/grad")) mode_grad(sum);
        return 0;
    }
    run_path_large(o, sum);
    for (const PCase &c : table()) {
        if (!selected(o, c.name) || (o.quick && !c.quick)) continue;
        switch (o.mode) {
        case Mode::TEST: mode_test(o, sum, c); break;
        case Mode::DETERMINISM: mode_determinism(o, sum, c); break;
        case Mode::SUPPORT:
            record(sum, Outcome::PASS, c.name,
                   o.backend == BackendKind::CUDA ? "cuda: mma.sync kernels (UT chunks 64, segments 512; f32 on TF32)"
                                                  : "cpu: blocked f32 (UT chunks 64, segments 512)");
            break;
        case Mode::PERF: {
            Run r;
            r.c = c;
            r.inputs(3);
            std::string why;
            fattn_ctx_t *ctx = make_ctx(o.backend, o.threads, &why);
            if (!ctx) {
                record(sum, Outcome::FAIL, c.name, why);
                break;
            }
            double ms = 0;
            std::string e = r.go(ctx, &ms);
            fattn_ctx_free(ctx);
            char buf[64];
            std::snprintf(buf, sizeof buf, "fwd+bwd %.1f ms", ms);
            record(sum, e.empty() ? Outcome::PASS : Outcome::FAIL, c.name, e.empty() ? buf : e);
            break;
        }
        default: break;
        }
    }
    return 0;
}

const bool registered = register_family({"path", run_path});

}  // namespace
