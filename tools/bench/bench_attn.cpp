// bench_attn.cpp — one fattn arm (FUSED or EXACT) of a benchmark case, through the public C API:
// support check, memory model, buffers, a measured memory pass (workspace from a tracking
// allocator), then median timings of fwd and fwd+bwd with caller-provided workspace.
// Also the inputs (deterministic random data) and the parity metric between arms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "bench/bench.h"
#include "core/dtype.h"

namespace fbench {

double fwd_flops(const Case &c) {
    double f = 4.0 * double(c.B) * double(c.Hq) * double(c.Sq) * double(c.Skv) * double(c.D);
    return c.causal != FATTN_CAUSAL_NONE ? f / 2 : f;
}

HostData make_inputs(const Case &c, uint64_t seed) {
    HostData h;
    const size_t es = fattn_dtype_size(c.dtype);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    auto fill = [&](std::vector<uint8_t> &buf, int64_t n) {
        buf.resize(size_t(n) * es);
        for (int64_t i = 0; i < n; ++i) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;  // xorshift64: reproducible, not zeros
            float u = float(double(x >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
            fattn::store_f32(buf.data(), c.dtype, i, u);
        }
    };
    fill(h.q, c.B * c.Sq * c.Hq * c.D);
    fill(h.k, c.B * c.Skv * c.Hkv * c.D);
    fill(h.v, c.B * c.Skv * c.Hkv * c.D);
    fill(h.dout, c.B * c.Sq * c.Hq * c.D);
    if (c.band >= 0) {  // HOT-Step's windowed site: the band given as a dense -inf bias
        h.bias.resize(size_t(c.Sq * c.Skv) * es);
        const float ninf = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < c.Sq; ++i)
            for (int64_t j = 0; j < c.Skv; ++j)
                fattn::store_f32(h.bias.data(), c.dtype, i * c.Skv + j,
                                 std::llabs(j - i) <= c.band ? 0.f : ninf);
    }
    return h;
}

namespace {

// Tracks the context's workspace allocations (memory pass): live/high-water bytes and, on CUDA,
// the lowest free device memory seen right after each allocation.
struct Tracker {
    fattn_backend be;
    size_t live = 0, high = 0, min_free = SIZE_MAX;
    std::map<void *, size_t> sizes;
    void sample() {
        size_t f = 0, t = 0;
        if (be == FATTN_BACKEND_CUDA && dev::mem_info(&f, &t)) min_free = std::min(min_free, f);
    }
};

void *track_alloc(size_t bytes, void *user) {
    Tracker *t = static_cast<Tracker *>(user);
    void *p = nullptr;
    if (!dev::alloc(t->be, &p, bytes)) return nullptr;
    t->sizes[p] = bytes;
    t->live += bytes;
    t->high = std::max(t->high, t->live);
    t->sample();
    return p;
}

void track_free(void *p, void *user) {
    Tracker *t = static_cast<Tracker *>(user);
    auto it = t->sizes.find(p);
    if (it != t->sizes.end()) {
        t->live -= it->second;
        t->sizes.erase(it);
    }
    dev::sync(t->be);  // the stream-ordered work that used it must be done before it goes back
    dev::free(t->be, p);
}

// Device buffers of one arm; freed on scope exit.
struct Buffers {
    fattn_backend be;
    std::vector<void *> ptrs;
    size_t bytes = 0;
    explicit Buffers(fattn_backend b) : be(b) {}
    ~Buffers() {
        for (void *p : ptrs) dev::free(be, p);
    }
    void *get(size_t n) {
        void *p = nullptr;
        if (!dev::alloc(be, &p, n)) return nullptr;
        ptrs.push_back(p);
        bytes += n;
        return p;
    }
};

std::vector<float> to_f32(fattn_backend be, const void *src, fattn_dtype t, int64_t n) {
    std::vector<uint8_t> raw(static_cast<size_t>(n) * fattn_dtype_size(t));
    std::vector<float> out(static_cast<size_t>(n));
    if (!dev::download(be, raw.data(), src, raw.size())) return {};
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = fattn::load_f32(raw.data(), t, i);
    return out;
}

std::string fmt_gib(double b) {
    char s[64];
    std::snprintf(s, sizeof s, "%.2f GiB", b / 1073741824.0);
    return s;
}

}  // namespace

ArmResult run_fattn_arm(const Case &c, const Options &opt, fattn_algo algo, const HostData &in,
                        fattn_cuda_family family) {
    ArmResult r;
    r.arm = algo == FATTN_ALGO_EXACT ? "exact" : family == FATTN_CUDA_FAMILY_PORTABLE ? "portable" : "fused";
    const fattn_backend be = opt.backend;
    fattn_ctx_t *ctx = nullptr;
    fattn_status st = be == FATTN_BACKEND_CPU ? fattn_ctx_init_cpu(opt.threads, &ctx)
                                              : fattn_ctx_init_cuda(0, nullptr, &ctx);
    if (st != FATTN_OK) {
        r.status = std::string("error: context: ") + fattn_ctx_last_error(nullptr);
        return r;
    }
    struct CtxGuard {
        fattn_ctx_t *c;
        ~CtxGuard() { fattn_ctx_free(c); }
    } ctx_guard{ctx};
    if (be == FATTN_BACKEND_CUDA && fattn_ctx_set_cuda_family(ctx, family) != FATTN_OK) {
        r.status = std::string("error: family: ") + fattn_ctx_last_error(ctx);
        return r;
    }
    auto fail = [&](const char *what) {
        r.status = std::string("error: ") + what + ": " + fattn_ctx_last_error(ctx);
        return r;
    };

    const fattn_dtype dt = c.dtype;
    const size_t es = fattn_dtype_size(dt);
    fattn_attn_params p = fattn_attn_params_default();
    p.causal = c.causal;
    p.prec = c.prec;
    p.algo = algo;
    if (c.window >= 0) p.window_left = p.window_right = c.window;

    Buffers buf(be);
    size_t free0 = 0, total0 = 0;
    const bool cuda = be == FATTN_BACKEND_CUDA;
    if (cuda) dev::mem_info(&free0, &total0);
    void *bias_d = nullptr;
    if (!in.bias.empty()) {
        bias_d = buf.get(in.bias.size());
        if (!bias_d || !dev::upload(be, bias_d, in.bias.data(), in.bias.size()))
            return r.status = "error: allocating the bias", r;
        p.bias = fattn_tensor_4d(bias_d, dt, 1, 1, c.Sq, c.Skv, 0, 0, c.Skv, 1);
    }
    // Shapes first (NULL data is fine for queries): support, precision, memory model.
    fattn_tensor q = fattn_tensor_contiguous(nullptr, dt, c.B, c.Sq, c.Hq, c.D);
    fattn_tensor k = fattn_tensor_contiguous(nullptr, dt, c.B, c.Skv, c.Hkv, c.D);
    fattn_tensor v = fattn_tensor_contiguous(nullptr, dt, c.B, c.Skv, c.Hkv, c.D);
    char why[512];
    if (fattn_attn_supports(ctx, &p, &q, &k, &v, why, sizeof why) != FATTN_OK)
        return r.status = std::string("unsupported: ") + why, r;
    r.prec = fattn_prec_name(fattn_resolve_prec(ctx, &p, &q));
    fattn_attn_memory_info mi{};
    if (fattn_attn_memory(ctx, &p, &q, &k, &v, &mi) != FATTN_OK) return fail("fattn_attn_memory");
    r.saved_bytes = mi.saved_bytes;
    // This harness allocates dout and the gradients before the forward, so they are live during
    // it: its peak is the forward's plus those buffers, or the backward's (which holds them).
    r.model_peak = std::max(mi.fwd_peak_bytes + mi.grads_bytes, mi.bwd_peak_bytes);
    if (cuda && double(r.model_peak) > opt.max_mem_frac * double(free0))
        return r.status = "skipped: needs " + fmt_gib(double(r.model_peak)) + ", " +
                          fmt_gib(double(free0)) + " free",
               r;
    size_t saved_b = 0, ws_f = 0, ws_b = 0;
    if (fattn_attn_saved_size(ctx, &p, &q, &k, &v, &saved_b) != FATTN_OK ||
        fattn_attn_workspace_size(ctx, &p, &q, &k, &v, FATTN_DIR_FWD, &ws_f) != FATTN_OK ||
        fattn_attn_workspace_size(ctx, &p, &q, &k, &v, FATTN_DIR_BWD, &ws_b) != FATTN_OK)
        return fail("size query");

    const int64_t nq = c.B * c.Sq * c.Hq * c.D, nkv = c.B * c.Skv * c.Hkv * c.D;
    const int64_t nlse = c.B * c.Hq * c.Sq;
    void *qd = buf.get(nq * es), *kd = buf.get(nkv * es), *vd = buf.get(nkv * es);
    void *od = buf.get(nq * es), *dod = buf.get(nq * es);
    void *dqd = buf.get(nq * es), *dkd = buf.get(nkv * es), *dvd = buf.get(nkv * es);
    void *lsed = buf.get(nlse * 4), *saved = buf.get(saved_b);
    if (!qd || !kd || !vd || !od || !dod || !dqd || !dkd || !dvd || !lsed || !saved)
        return r.status = "error: allocating buffers", r;
    if (!dev::upload(be, qd, in.q.data(), in.q.size()) || !dev::upload(be, kd, in.k.data(), in.k.size()) ||
        !dev::upload(be, vd, in.v.data(), in.v.size()) ||
        !dev::upload(be, dod, in.dout.data(), in.dout.size()))
        return r.status = "error: uploading inputs", r;
    size_t free1 = 0, total1 = 0;
    if (cuda) dev::mem_info(&free1, &total1);
    const double buffers_measured = cuda ? double(free0) - double(free1) : double(buf.bytes);

    q.data = qd; k.data = kd; v.data = vd;
    fattn_tensor o = fattn_tensor_contiguous(od, dt, c.B, c.Sq, c.Hq, c.D);
    fattn_tensor lse = fattn_tensor_contiguous(lsed, FATTN_F32, c.B, c.Hq, c.Sq, 1);
    fattn_tensor dO = fattn_tensor_contiguous(dod, dt, c.B, c.Sq, c.Hq, c.D);
    fattn_tensor dq = fattn_tensor_contiguous(dqd, dt, c.B, c.Sq, c.Hq, c.D);
    fattn_tensor dk = fattn_tensor_contiguous(dkd, dt, c.B, c.Skv, c.Hkv, c.D);
    fattn_tensor dv = fattn_tensor_contiguous(dvd, dt, c.B, c.Skv, c.Hkv, c.D);

    // ---- first call (warm-up; creates any lazily made library state such as cuBLAS handles)
    Tracker tr{be};
    fattn_ctx_set_allocator(ctx, track_alloc, track_free, &tr);
    dev::Timer first(FATTN_BACKEND_CPU);  // host clock: the first call's cost sets the rep count
    first.start();
    if (fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, saved, nullptr, 0) != FATTN_OK)
        return fail("fwd");
    if (fattn_attn_bwd(ctx, &p, &q, &k, &v, &o, &lse, saved, &dO, &dq, &dk, &dv, nullptr, 0) != FATTN_OK)
        return fail("bwd");
    dev::sync(be);
    const double first_ms = first.stop_ms();
    // ---- memory pass: workspace from the tracking allocator, free memory sampled throughout
    size_t base = 0, tot = 0;
    if (cuda) dev::mem_info(&base, &tot);
    tr.high = 0;
    tr.min_free = SIZE_MAX;
    tr.sample();
    if (fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, saved, nullptr, 0) != FATTN_OK)
        return fail("fwd");
    dev::sync(be);
    tr.sample();
    if (fattn_attn_bwd(ctx, &p, &q, &k, &v, &o, &lse, saved, &dO, &dq, &dk, &dv, nullptr, 0) != FATTN_OK)
        return fail("bwd");
    dev::sync(be);
    tr.sample();
    if (cuda && tr.min_free != SIZE_MAX)
        r.measured_peak = buffers_measured + (double(base) - double(tr.min_free));
    else if (!cuda)
        r.measured_peak = buffers_measured + double(tr.high);
    r.o = to_f32(be, od, dt, nq);
    r.lse = to_f32(be, lsed, FATTN_F32, nlse);
    r.dq = to_f32(be, dqd, dt, nq);
    r.dk = to_f32(be, dkd, dt, nkv);
    r.dv = to_f32(be, dvd, dt, nkv);
    r.have_values = !r.o.empty() && !r.dv.empty();

    // ---- timing with caller-provided workspace (no allocation inside the timed region)
    void *ws = buf.get(std::max(ws_f, ws_b));
    if (!ws) return r.status = "error: allocating the workspace", r;
    int warm = opt.warmup >= 0 ? opt.warmup : (cuda ? 3 : 1);
    int reps = opt.reps > 0 ? opt.reps : (cuda ? 10 : 5);
    if (first_ms > opt.slow_ms) {  // long cases: 1 warm-up, 3 reps keep a preset within minutes
        warm = std::min(warm, 1);
        reps = std::min(reps, 3);
    }
    auto fwd = [&] {
        return fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, saved, ws, ws_f) == FATTN_OK;
    };
    auto fwdbwd = [&] {
        return fwd() && fattn_attn_bwd(ctx, &p, &q, &k, &v, &o, &lse, saved, &dO, &dq, &dk, &dv,
                                       ws, ws_b) == FATTN_OK;
    };
    r.fwd_ms = dev::time_median(be, warm, reps, fwd);
    if (r.fwd_ms < 0) return fail("timed fwd");
    r.fwdbwd_ms = dev::time_median(be, warm, reps, fwdbwd);
    if (r.fwdbwd_ms < 0) return fail("timed fwd+bwd");
    return r;
}

double max_rel_err(const ArmResult &a, const ArmResult &b, bool with_lse) {
    if (!a.have_values || !b.have_values) return -1;
    auto one = [](const std::vector<float> &x, const std::vector<float> &y) {
        if (x.size() != y.size() || x.empty()) return std::numeric_limits<double>::infinity();
        double num = 0, den = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            if (std::isinf(y[i]) && x[i] == y[i]) continue;  // both -inf (fully masked lse)
            num = std::max(num, double(std::fabs(double(x[i]) - double(y[i]))));
            if (!std::isinf(y[i])) den = std::max(den, double(std::fabs(y[i])));
            if (std::isnan(x[i]) || std::isnan(y[i])) return std::numeric_limits<double>::infinity();
        }
        return den > 0 ? num / den : num;
    };
    double e = std::max({one(a.o, b.o), one(a.dq, b.dq), one(a.dk, b.dk), one(a.dv, b.dv)});
    if (with_lse) e = std::max(e, one(a.lse, b.lse));
    return e;
}

}  // namespace fbench
