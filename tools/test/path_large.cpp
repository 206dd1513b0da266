// path_large.cpp — the --large PaTH case of fattn-test: q, o, dout and dq of more than 2^31
// elements (B 2048 × T 1100 × Hq 16 × K 64), so element offsets, workspace rows and history cells
// all need 64 bits. Inputs come from a counter-based generator on every core (a value is a
// function of its tensor and element index, whatever the thread count); fwd + bwd run over the
// whole batch; the float64 oracle judges batches 0 and B-1 with path/'s bars (sequences are
// independent, so the oracle on one batch is the exact reference for its slice). CUDA-sized: on
// the CPU it runs only when -p names it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "cpu/ref/path_ref.h"
#include "fattn/fattn.h"
#include "test/backend_mem.h"
#include "test/path_cases.h"

namespace fattn_test {

namespace {

constexpr const char *kName = "path/large_2g_elems_B2048_T1100_gqa_gate_bf16";
constexpr int64_t kT = 1100, kHq = 16, kH = 2, kK = 64, kV = 64;
constexpr fattn_dtype kDt = FATTN_BF16;

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
double uniform(uint64_t tensor, int64_t i) {  // (0, 1)
    return (double(mix(tensor << 56 ^ uint64_t(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
double normal(uint64_t tensor, int64_t i) {  // Box-Muller on two counters
    return std::sqrt(-2 * std::log(uniform(tensor, 2 * i))) * std::cos(6.283185307179586 * uniform(tensor, 2 * i + 1));
}

// f(begin, end) over [0, n) in chunks on every core.
template <class F> void par_for(int64_t n, F &&f) {
    const int nt = int(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t chunk = (n + nt - 1) / nt;
    std::vector<std::thread> ts;
    for (int t = 0; t < nt; ++t) {
        const int64_t b = t * chunk, e = std::min(n, b + chunk);
        if (b < e) ts.emplace_back([&f, b, e] { f(b, e); });
    }
    for (auto &t : ts) t.join();
}

struct Big {  // one tensor: host bytes (inputs: the values; outputs: unused) and its backend copy
    fattn_dtype dt;
    int64_t n;  // elements
    std::vector<uint8_t> host;
    DevBuf dev;
    size_t bytes() const { return size_t(n) * fattn_dtype_size(dt); }
};

enum : uint64_t { TQ = 1, TK, TV, TW, TBETA, TG, TDO };

// 2048 batches; FATTN_TEST_PATH_LARGE_B=n runs the same harness on n (a dry run of the generator,
// slicing and judging on a small machine: `fattn-test test -p path/large` with n = 4).
int64_t batches() {
    const char *e = std::getenv("FATTN_TEST_PATH_LARGE_B");
    const long long n = e ? std::atoll(e) : 0;
    return n >= 1 ? n : 2048;
}

// Batch b's slice of a tensor whose batch is its outermost dim, as doubles.
std::vector<double> slice(const std::vector<uint8_t> &bytes, fattn_dtype dt, int64_t per_batch, int64_t b) {
    std::vector<double> x(static_cast<size_t>(per_batch));
    for (int64_t i = 0; i < per_batch; ++i) x[size_t(i)] = fattn::load_f32(bytes.data(), dt, b * per_batch + i);
    return x;
}

}  // namespace

void run_path_large(const Options &o, Summary &sum) {
    const bool named = explicitly_requested(o) && o.pattern.find("large") != std::string::npos;
    if (!selected(o, kName) || (!o.large && !named) || o.mode != Mode::TEST) return;
    if (o.backend == BackendKind::CPU && !named)
        return record(sum, Outcome::SKIP, kName, "large case: CUDA-sized; name it with -p to run it on the CPU");
    const int64_t kB = batches(), R = kB * kT;
    Big q{kDt, R * kHq * kK}, k{kDt, R * kH * kK}, v{kDt, R * kH * kV}, w{FATTN_F32, R * kH * kK},
        beta{FATTN_F32, R * kH}, g{FATTN_F32, R * kHq}, dout{kDt, R * kHq * kV}, out{kDt, R * kHq * kV},
        lse{FATTN_F32, R * kHq}, dq{kDt, q.n}, dk{kDt, k.n}, dv{kDt, v.n}, dw{FATTN_F32, w.n}, db{FATTN_F32, beta.n},
        dg{FATTN_F32, g.n};
    // Inputs: normals (q, k, v, dout, scaled 1/4 so the scores stay in softmax's working range),
    // w rows of unit length (normalized in f32), beta in [1.5, 2), the log gate in (-0.02, 0).
    for (auto [t, id] : {std::pair{&q, TQ}, {&k, TK}, {&v, TV}, {&dout, TDO}}) {
        t->host.resize(t->bytes());
        par_for(t->n, [&, t = t, id = id](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) fattn::store_f32(t->host.data(), t->dt, i, float(0.25 * normal(id, i)));
        });
    }
    w.host.resize(w.bytes());
    par_for(R * kH, [&](int64_t b, int64_t e) {
        float *x = reinterpret_cast<float *>(w.host.data());
        for (int64_t r = b; r < e; ++r) {
            float n2 = 0;
            for (int64_t d = 0; d < kK; ++d) n2 += (x[r * kK + d] = float(normal(TW, r * kK + d))) * x[r * kK + d];
            for (int64_t d = 0; d < kK; ++d) x[r * kK + d] /= std::sqrt(n2);
        }
    });
    beta.host.resize(beta.bytes());
    g.host.resize(g.bytes());
    for (int64_t i = 0; i < beta.n; ++i) reinterpret_cast<float *>(beta.host.data())[i] = float(1.5 + 0.5 * uniform(TBETA, i));
    for (int64_t i = 0; i < g.n; ++i) reinterpret_cast<float *>(g.host.data())[i] = float(-0.02 * uniform(TG, i));

    std::string why;
    fattn_ctx_t *ctx = make_ctx(o.backend, o.threads, &why);
    if (!ctx) return record(sum, Outcome::FAIL, kName, why);
    const BackendKind kind = o.backend;
    std::string err;
    for (Big *t : {&q, &k, &v, &w, &beta, &g, &dout})
        if (err.empty() && (!t->dev.alloc(kind, t->bytes()) || !t->dev.upload(t->host.data(), t->bytes())))
            err = "input allocation or upload failed";
    for (Big *t : {&out, &lse, &dq, &dk, &dv, &dw, &db, &dg})
        if (err.empty() && (!t->dev.alloc(kind, t->bytes()) || !t->dev.poison())) err = "output allocation failed";
    auto tv = [kB](Big &t, int64_t h, int64_t d) { return fattn_tensor_contiguous(t.dev.ptr(), t.dt, kB, kT, h, d); };
    fattn_path_params p = fattn_path_params_default();
    fattn_tensor tq = tv(q, kHq, kK), tk = tv(k, kH, kK), tvv = tv(v, kH, kV), tw = tv(w, kH, kK), tb = tv(beta, kH, 1),
                 tg = tv(g, kHq, 1), to = tv(out, kHq, kV), tdo = tv(dout, kHq, kV), tdq = tv(dq, kHq, kK),
                 tdk = tv(dk, kH, kK), tdv = tv(dv, kH, kV), tdw = tv(dw, kH, kK), tdb = tv(db, kH, 1), tdg = tv(dg, kHq, 1);
    fattn_tensor tl = fattn_tensor_contiguous(lse.dev.ptr(), FATTN_F32, kB, kHq, kT, 1);
    fattn_path_workspace_info wf{}, wb{};
    DevBuf ws;
    fattn_status s = FATTN_OK;
    if (err.empty()) {
        s = fattn_path_workspace_size(ctx, &p, &tq, &tk, &tvv, &tw, &tb, &tg, FATTN_DIR_FWD, &wf);
        if (s == FATTN_OK) s = fattn_path_workspace_size(ctx, &p, &tq, &tk, &tvv, &tw, &tb, &tg, FATTN_DIR_BWD, &wb);
        if (s == FATTN_OK && !ws.alloc(kind, size_t(std::max(wf.total_bytes, wb.total_bytes)) + 1))
            err = "workspace allocation failed (" + std::to_string(std::max(wf.total_bytes, wb.total_bytes) >> 30) + " GiB)";
        if (s == FATTN_OK && err.empty()) s = fattn_path_fwd(ctx, &p, &tq, &tk, &tvv, &tw, &tb, &tg, &to, &tl, ws.ptr(), wf.total_bytes);
        if (s == FATTN_OK && err.empty())
            s = fattn_path_bwd(ctx, &p, &tq, &tk, &tvv, &tw, &tb, &tg, &to, &tl, &tdo, &tdq, &tdk, &tdv, &tdw, &tdb, &tdg,
                               ws.ptr(), wb.total_bytes);
        backend_sync(kind);
        if (s != FATTN_OK) err = std::string(fattn_status_string(s)) + ": " + fattn_ctx_last_error(ctx);
    }
    fattn_ctx_free(ctx);
    if (!err.empty()) {
        // a card smaller than the case (the H100's 80 GB: 67 GiB of workspace beside 22 GiB of
        // tensors) is skipped with the numbers; an allocation that fails where it fits is a failure
        size_t need = size_t(std::max(wf.total_bytes, wb.total_bytes));
        for (const Big *t : {&q, &k, &v, &w, &beta, &g, &dout, &out, &lse, &dq, &dk, &dv, &dw, &db, &dg}) need += t->bytes();
        const size_t cap = device_total_bytes(kind);
        if (cap > 0 && need > cap)
            return record(sum, Outcome::SKIP, kName,
                          err + ": the case needs " + std::to_string(need >> 30) + " GiB, the device has " +
                              std::to_string(cap >> 30) + " GiB");
        return record(sum, Outcome::FAIL, kName, err);
    }

    // The oracle on batches 0 and B-1; the backend's slices of the same batches.
    fattn::ref::PathRefShape rs;
    rs.B = 1, rs.T = kT, rs.Hq = kHq, rs.H = kH, rs.K = kK, rs.V = kV;
    bool ok = true, downloaded = true;
    std::string detail;
    char buf[128];
    std::snprintf(buf, sizeof buf, "q %lld elements, bwd workspace %.2f GiB;",
                  static_cast<long long>(q.n), double(wb.total_bytes) / (1 << 30));
    detail = buf;
    for (int64_t b : {int64_t(0), kB - 1}) {
        auto in = [&](const Big &t, int64_t per) { return slice(t.host, t.dt, per, b); };
        auto got = [&](const Big &t, int64_t per) {
            std::vector<uint8_t> h(size_t(per) * fattn_dtype_size(t.dt));
            if (!t.dev.download(h.data(), h.size(), size_t(b * per) * fattn_dtype_size(t.dt))) downloaded = false;
            return slice(h, t.dt, per, 0);
        };
        const int64_t nq = kT * kHq * kK, nk = kT * kH * kK, nv = kT * kH * kV, no = kT * kHq * kV;
        const std::vector<double> xq = in(q, nq), xk = in(k, nk), xv = in(v, nv), xw = in(w, nk), xb = in(beta, kT * kH),
                                  xg = in(g, kT * kHq), xdo = in(dout, no);
        auto zeros = [](int64_t n) { return std::vector<double>(static_cast<size_t>(n)); };
        std::vector<double> ro = zeros(no), rl = zeros(kT * kHq), rq = zeros(nq), rk = zeros(nk), rv = zeros(nv),
                            rw = zeros(nk), rb = zeros(kT * kH), rg = zeros(kT * kHq);
        fattn::ref::path_ref_fwd(rs, xq.data(), xk.data(), xv.data(), xw.data(), xb.data(), xg.data(), ro.data(), rl.data());
        fattn::ref::path_ref_bwd(rs, xq.data(), xk.data(), xv.data(), xw.data(), xb.data(), xg.data(), xdo.data(), rq.data(),
                                 rk.data(), rv.data(), rw.data(), rb.data(), rg.data());
        const std::vector<PathJudged> cs = {
            {"o", got(out, no), ro, 0.005},   {"lse", got(lse, kT * kHq), rl, 0.005}, {"dq", got(dq, nq), rq, 0.008},
            {"dk", got(dk, nk), rk, 0.008},   {"dv", got(dv, nv), rv, 0.008},       {"dw", got(dw, nk), rw, 0.015},
            {"dbeta", got(db, kT * kH), rb, 0.02}, {"dg", got(dg, kT * kHq), rg, 0.02}};
        std::snprintf(buf, sizeof buf, " batch %lld:", static_cast<long long>(b));
        detail += buf;
        ok = judge_ratios(cs, o.verbose, &detail) && ok;
    }
    if (!downloaded) detail += " (a download failed)";
    record(sum, ok && downloaded ? Outcome::PASS : Outcome::FAIL, kName, detail);
}

}  // namespace fattn_test
