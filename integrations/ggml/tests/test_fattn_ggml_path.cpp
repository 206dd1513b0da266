// test_fattn_ggml_path.cpp — fattn_ggml_path_attn (PaTH attention as a differentiable ggml op)
// against fattn's own PaTH calls on the same data: o, lse and every gradient bitwise equal to
// fattn_path_fwd / fattn_path_bwd (whose results the library's tests hold to a float64 oracle),
// through ggml_build_backward_expand with loss = sum(o * R), so the op's dO is R exactly.
// Plus GQA, the gate, varlen, permuted views, thread counts, the STRICT check at compute time,
// errors, the graph check and the memory model.
//
//   fattn-ggml-path-test --list      the cases
//   fattn-ggml-path-test CASE        one case (ctest runs each as ggml.path_CASE); "all" runs all
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "case_runner.h"
#include "fattn_ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

using std::string;
using std::vector;

using fattn_ggml_test::Case;
using fattn_ggml_test::g_failures;

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    float uni() {  // [-1, 1)
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return float((s >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f;
    }
};

struct Cfg {
    int K = 16, V = 16, T = 70, Hq = 4, H = 2, B = 2;
    bool gate = true;
    vector<int32_t> cu;     // varlen offsets (B = 1); empty = dense
    bool permuted = false;  // q a permute of a [K, Hq, T, B] param, beta of an [H, T, B] one
    bool only_q_g = false;  // only q and g are parameters (the op's backward asked for two gradients)
    int threads = 2;
};

// Host data in ggml's contiguous layouts: q [K, T, Hq, B], k, w [K, T, H, B], v [V, T, H, B],
// beta [T, H, B], g [T, Hq, B], R (the loss weights, = dO) [V, T, Hq, B].
struct Data {
    vector<float> q, k, v, w, beta, g, R;
    explicit Data(const Cfg &c, uint64_t seed = 1) {
        Rng r(seed);
        auto fill = [&](vector<float> &x, size_t n, float a) {
            x.resize(n);
            for (float &e : x) e = a * r.uni();
        };
        const size_t T = size_t(c.T), B = size_t(c.B);
        fill(q, size_t(c.K) * T * c.Hq * B, 1.0f);
        fill(k, size_t(c.K) * T * c.H * B, 1.0f);
        fill(v, size_t(c.V) * T * c.H * B, 1.0f);
        fill(R, size_t(c.V) * T * c.Hq * B, 1.0f);
        fill(w, size_t(c.K) * T * c.H * B, 1.0f);
        for (size_t row = 0; row < w.size() / size_t(c.K); ++row) {  // unit rows (STRICT)
            double n = 0;
            for (int d = 0; d < c.K; ++d) n += double(w[row * c.K + d]) * w[row * c.K + d];
            for (int d = 0; d < c.K; ++d) w[row * c.K + d] = float(w[row * c.K + d] / std::sqrt(n));
        }
        beta.resize(T * c.H * B);
        for (float &e : beta) e = 1.0f + 0.95f * r.uni();  // (0.05, 1.95)
        g.resize(T * c.Hq * B);
        for (float &e : g) e = -0.05f * (1.0f + r.uni()) / 2;  // log forget gate in (-0.05, 0]
    }
};

// fattn views of contiguous ggml blocks: [X, T, H, B] as [B, T, H, X]; [T, H, B] as [B, T, H, 1].
fattn_tensor bthx(void *d, int64_t X, int64_t T, int64_t H, int64_t B) {
    return fattn_tensor_4d(d, FATTN_F32, B, T, H, X, X * T * H, X, X * T, 1);
}
fattn_tensor bth1(void *d, int64_t T, int64_t H, int64_t B) {
    return fattn_tensor_4d(d, FATTN_F32, B, T, H, 1, T * H, 1, T, 1);
}

struct Direct {
    vector<float> o, lse, dq, dk, dv, dw, db, dg;
};

// fattn_path_fwd / fattn_path_bwd on a CPU context, dout = R.
bool direct(const Cfg &c, Data &d, Direct *r, fattn_path_check check = FATTN_PATH_CHECK_STRICT) {
    fattn_ctx_t *ctx = nullptr;
    if (fattn_ctx_init_cpu(1, &ctx) != FATTN_OK) return false;
    fattn_path_params p = fattn_path_params_default();
    p.check = check;
    if (!c.cu.empty()) p.cu_seqlens = c.cu.data(), p.num_seqs = int64_t(c.cu.size()) - 1;
    const int64_t T = c.T, B = c.B;
    r->o.assign(size_t(c.V) * T * c.Hq * B, 0), r->lse.assign(size_t(T * c.Hq * B), 0);
    r->dq.assign(d.q.size(), 0), r->dk.assign(d.k.size(), 0), r->dv.assign(d.v.size(), 0);
    r->dw.assign(d.w.size(), 0), r->db.assign(d.beta.size(), 0), r->dg.assign(d.g.size(), 0);
    const fattn_tensor q = bthx(d.q.data(), c.K, T, c.Hq, B), k = bthx(d.k.data(), c.K, T, c.H, B),
                       v = bthx(d.v.data(), c.V, T, c.H, B), w = bthx(d.w.data(), c.K, T, c.H, B),
                       be = bth1(d.beta.data(), T, c.H, B),
                       g = c.gate ? bth1(d.g.data(), T, c.Hq, B) : fattn_tensor_none(),
                       o = bthx(r->o.data(), c.V, T, c.Hq, B),
                       lse = fattn_tensor_4d(r->lse.data(), FATTN_F32, B, c.Hq, T, 1, c.Hq * T, T, 1, 1),
                       dO = bthx(d.R.data(), c.V, T, c.Hq, B), dq = bthx(r->dq.data(), c.K, T, c.Hq, B),
                       dk = bthx(r->dk.data(), c.K, T, c.H, B), dv = bthx(r->dv.data(), c.V, T, c.H, B),
                       dw = bthx(r->dw.data(), c.K, T, c.H, B), db = bth1(r->db.data(), T, c.H, B),
                       dg = c.gate ? bth1(r->dg.data(), T, c.Hq, B) : fattn_tensor_none();
    fattn_status s = fattn_path_fwd(ctx, &p, &q, &k, &v, &w, &be, &g, &o, &lse, nullptr, 0);
    if (s == FATTN_OK)
        s = fattn_path_bwd(ctx, &p, &q, &k, &v, &w, &be, &g, &o, &lse, &dO, &dq, &dk, &dv, &dw, &db, &dg, nullptr, 0);
    EXPECT(s == FATTN_OK, "direct call: %s", fattn_ctx_last_error(ctx));
    fattn_ctx_free(ctx);
    return s == FATTN_OK;
}

// Logical contents of a (strided) f32 tensor, ne0 fastest.
vector<float> read(const ggml_tensor *t) {
    vector<float> out;
    if (!t) return out;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                    float x;
                    std::memcpy(&x, (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3],
                                sizeof x);
                    out.push_back(x);
                }
    return out;
}

// y[i0, i2, i1, i3] = x[i0, i1, i2, i3] (dims 1 and 2 swapped) of a contiguous [n0, n1, n2, n3].
vector<float> swap12(const vector<float> &x, int n0, int n1, int n2, int n3) {
    vector<float> y(x.size());
    for (int i3 = 0; i3 < n3; ++i3)
        for (int i2 = 0; i2 < n2; ++i2)
            for (int i1 = 0; i1 < n1; ++i1)
                for (int i0 = 0; i0 < n0; ++i0)
                    y[((size_t(i3) * n1 + i1) * n2 + i2) * n0 + i0] = x[((size_t(i3) * n2 + i2) * n1 + i1) * n0 + i0];
    return y;
}

// y = x with dims 0 and 1 swapped, of a contiguous [n0, n1, n2].
vector<float> swap01(const vector<float> &x, int n0, int n1, int n2) {
    vector<float> y(x.size());
    for (int i2 = 0; i2 < n2; ++i2)
        for (int i1 = 0; i1 < n1; ++i1)
            for (int i0 = 0; i0 < n0; ++i0) y[(size_t(i2) * n0 + i0) * n1 + i1] = x[(size_t(i2) * n1 + i1) * n0 + i0];
    return y;
}

bool bitwise(const vector<float> &a, const vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Graph {
    ggml_context *ctx = nullptr;
    ggml_cgraph *gf = nullptr;
    ggml_tensor *pq = nullptr, *k = nullptr, *v = nullptr, *w = nullptr, *pbeta = nullptr, *g = nullptr;
    ggml_tensor *R = nullptr, *cu = nullptr, *o = nullptr, *lse = nullptr;
    Graph() = default;
    Graph(const Graph &) = delete;
    Graph &operator=(const Graph &) = delete;
    ~Graph() {
        if (ctx) ggml_free(ctx);
    }
};

// The op on params q, k, v, w, beta (, g), loss = sum(o * R), its backward.
bool build(Graph &gr, const Cfg &c, fattn_path_check check = FATTN_PATH_CHECK_STRICT) {
    ggml_init_params ip = {size_t(64) << 20, nullptr, false};
    gr.ctx = ggml_init(ip);
    ggml_context *ctx = gr.ctx;
    ggml_tensor *q, *beta;
    if (c.permuted) {
        gr.pq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.K, c.Hq, c.T, c.B);
        q = ggml_permute(ctx, gr.pq, 0, 2, 1, 3);  // [K, T, Hq, B] view
        gr.pbeta = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.H, c.T, c.B);
        beta = ggml_permute(ctx, gr.pbeta, 1, 0, 2, 3);  // [T, H, B] view
    } else {
        q = gr.pq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.K, c.T, c.Hq, c.B);
        beta = gr.pbeta = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.T, c.H, c.B);
    }
    gr.k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.K, c.T, c.H, c.B);
    gr.v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.V, c.T, c.H, c.B);
    gr.w = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.K, c.T, c.H, c.B);
    gr.R = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.V, c.T, c.Hq, c.B);
    ggml_set_param(gr.pq);
    if (!c.only_q_g)
        for (ggml_tensor *t : {gr.k, gr.v, gr.w, gr.pbeta}) ggml_set_param(t);
    fattn_ggml_path_opts opts = fattn_ggml_path_opts_default();
    opts.check = check;
    if (c.gate) {
        gr.g = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.T, c.Hq, c.B);
        ggml_set_param(gr.g);
        opts.g = gr.g;
    }
    if (!c.cu.empty()) {
        gr.cu = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, int64_t(c.cu.size()));
        opts.cu_seqlens = gr.cu;
    }
    gr.o = fattn_ggml_path_attn(ctx, q, gr.k, gr.v, gr.w, beta, &opts);
    EXPECT(gr.o != nullptr, "fattn_ggml_path_attn: %s", fattn_ggml_last_error());
    if (!gr.o) return false;
    gr.lse = fattn_ggml_path_lse(ctx, gr.o);
    ggml_tensor *loss = ggml_sum(ctx, ggml_mul(ctx, gr.o, gr.R));
    ggml_set_loss(loss);
    gr.gf = ggml_new_graph_custom(ctx, 1024, true);
    ggml_build_forward_expand(gr.gf, loss);
    ggml_build_forward_expand(gr.gf, gr.lse);
    ggml_build_backward_expand(ctx, gr.gf, nullptr);
    return true;
}

void set(ggml_tensor *t, const vector<float> &x) { std::memcpy(t->data, x.data(), x.size() * sizeof(float)); }

// Sets the inputs, computes on `threads` threads; false if ggml failed.
bool compute(Graph &gr, const Cfg &c, const Data &d, int threads) {
    set(gr.pq, c.permuted ? swap12(d.q, c.K, c.T, c.Hq, c.B) : d.q);
    set(gr.pbeta, c.permuted ? swap01(d.beta, c.T, c.H, c.B) : d.beta);
    set(gr.k, d.k), set(gr.v, d.v), set(gr.w, d.w), set(gr.R, d.R);
    if (gr.g) set(gr.g, d.g);
    if (gr.cu) std::memcpy(gr.cu->data, c.cu.data(), c.cu.size() * sizeof(int32_t));
    ggml_graph_reset(gr.gf);
    return ggml_graph_compute_with_ctx(gr.ctx, gr.gf, threads) == GGML_STATUS_SUCCESS;
}

vector<float> grad(const Graph &gr, ggml_tensor *param) { return read(ggml_graph_get_grad(gr.gf, param)); }

// The op's o, lse and gradients bitwise those of the direct calls.
void expect_direct(const Cfg &c, int seed = 1) {
    Data d(c, uint64_t(seed));
    Direct ref;
    if (!direct(c, d, &ref)) return;
    Graph gr;
    if (!build(gr, c)) return;
    // twice: the second computation must give the same bits (outputs overwritten, not added to)
    for (int round = 0; round < 2; ++round) EXPECT(compute(gr, c, d, c.threads), "graph compute");
    char why[512];
    const int fails = fattn_ggml_compute_error(why, sizeof why);
    EXPECT(fails == 0, "%d compute failures: %s", fails, why);
    if (c.only_q_g) {  // the backward asked for dq and dg alone; the others are no gradients
        EXPECT(bitwise(read(gr.o), ref.o), "o differs");
        EXPECT(bitwise(grad(gr, gr.pq), ref.dq), "dq differs");
        EXPECT(bitwise(grad(gr, gr.g), ref.dg), "dg differs");
        EXPECT(!ggml_graph_get_grad(gr.gf, gr.k) && !ggml_graph_get_grad(gr.gf, gr.w), "k or w got a gradient");
        std::printf("  only q and g trainable: dq, dg bitwise\n");
        return;
    }
    vector<float> dq = grad(gr, gr.pq), db = grad(gr, gr.pbeta);
    if (c.permuted) dq = swap12(dq, c.K, c.Hq, c.T, c.B), db = swap01(db, c.H, c.T, c.B);
    const struct {
        const char *n;
        vector<float> got;
        const vector<float> &want;
    } outs[] = {{"o", read(gr.o), ref.o},
                {"lse", read(gr.lse), ref.lse},
                {"dq", dq, ref.dq},
                {"dk", grad(gr, gr.k), ref.dk},
                {"dv", grad(gr, gr.v), ref.dv},
                {"dw", grad(gr, gr.w), ref.dw},
                {"dbeta", db, ref.db}};
    for (const auto &x : outs) EXPECT(bitwise(x.got, x.want), "%s differs from fattn_path_*'s", x.n);
    if (c.gate) EXPECT(bitwise(grad(gr, gr.g), ref.dg), "dg differs from fattn_path_bwd's");
    double mx = 0;
    for (float x : ref.dw) mx = std::fmax(mx, std::fabs(x));
    EXPECT(mx > 0, "the reference dw is zero");
    std::printf("  K %d V %d T %d Hq %d H %d B %d%s%s%s: bitwise (max |dw| %.3g)\n", c.K, c.V, c.T, c.Hq, c.H, c.B,
                c.gate ? " gate" : "", c.cu.empty() ? "" : " varlen", c.permuted ? " permuted" : "", mx);
}

// ------------------------------------------------------------------ cases

// Dense, GQA 4/2, gate, two segments of 512 tokens (the history's path).
void case_dense() {
    Cfg c;
    expect_direct(c);
    c.T = 600, c.B = 1, c.K = 32, c.V = 24;
    expect_direct(c, 2);
}

// Varlen (B = 1, offsets as graph data), MQA, head dims off the powers of two; without and with
// the gate (g and cu_seqlens at src 5 and 6 of the forward, 7 and 8 of the backward).
void case_varlen() {
    Cfg c;
    c.B = 1, c.T = 150, c.Hq = 3, c.H = 1, c.K = 20, c.V = 12, c.gate = false;
    c.cu = {0, 40, 41, 150};
    expect_direct(c);
    c.gate = true, c.Hq = 4, c.H = 2;
    expect_direct(c, 3);
}

// Only q and g trainable: the hook fills the two gradients asked for, with the gate's index after
// beta's (and the varlen offsets after it).
void case_partial_grads() {
    Cfg c;
    c.only_q_g = true;
    expect_direct(c);
    c.B = 1, c.cu = {0, 30, 140}, c.T = 140;
    expect_direct(c, 4);
}

// q and beta as permuted views of their params (read in place, gradients through the permutes).
void case_permuted() {
    Cfg c;
    c.permuted = true;
    expect_direct(c);
}

// The same bits on 1 and 3 threads.
void case_threads_bitwise() {
    Cfg c;
    c.T = 300;
    Data d(c);
    vector<float> o[2], dw[2];
    const int threads[2] = {1, 3};
    for (int i = 0; i < 2; ++i) {
        Graph gr;
        if (!build(gr, c)) return;
        EXPECT(compute(gr, c, d, threads[i]), "graph compute");
        o[i] = read(gr.o), dw[i] = grad(gr, gr.w);
    }
    EXPECT(bitwise(o[0], o[1]) && bitwise(dw[0], dw[1]), "1 vs 3 threads differ");
}

// STRICT: a w row off the unit sphere fails the op when the graph computes (NaN output, the
// token named by fattn_ggml_compute_error); NONE computes it.
void case_strict_check() {
    Cfg c;
    c.gate = false;
    Data d(c);
    for (int e = 0; e < c.K; ++e) d.w[size_t(37 * c.K + e)] *= 1.1f;  // token 37 of kv head 0, batch 0
    {
        Graph gr;
        if (!build(gr, c)) return;
        EXPECT(compute(gr, c, d, 2), "graph compute");
        char why[512] = "";
        const int fails = fattn_ggml_compute_error(why, sizeof why);
        const vector<float> o = read(gr.o);
        EXPECT(fails >= 1 && std::strstr(why, "t 37") != nullptr, "%d failures: %s", fails, why);
        EXPECT(!o.empty() && std::isnan(o[0]), "o is not NaN after a failed check");
        std::printf("  STRICT: %s\n", why);
    }
    Graph gr;
    if (!build(gr, c, FATTN_PATH_CHECK_NONE)) return;
    EXPECT(compute(gr, c, d, 2), "graph compute");
    char why[512] = "";
    EXPECT(fattn_ggml_compute_error(why, sizeof why) == 0, "NONE: %s", why);
    Direct ref;  // NONE computes the definition with that row as it is: fattn's own NONE call's bits
    if (!direct(c, d, &ref, FATTN_PATH_CHECK_NONE)) return;
    EXPECT(bitwise(read(gr.o), ref.o) && bitwise(grad(gr, gr.w), ref.dw), "NONE: o or dw differs from fattn's");
}

// Bad input: NULL plus a message naming the argument; nothing aborts.
void case_errors() {
    ggml_init_params ip = {size_t(16) << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    auto t4 = [&](ggml_type t, int a, int b, int cc, int dd) { return ggml_new_tensor_4d(ctx, t, a, b, cc, dd); };
    ggml_tensor *q = t4(GGML_TYPE_F32, 16, 30, 4, 2), *k = t4(GGML_TYPE_F32, 16, 30, 2, 2),
                *v = t4(GGML_TYPE_F32, 8, 30, 2, 2), *w = t4(GGML_TYPE_F32, 16, 30, 2, 2),
                *beta = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 30, 2, 2);
    struct Bad {
        const char *what;
        ggml_tensor *q, *k, *v, *w, *beta, *g, *cu;
        int check;
        const char *expect;
    };
    const Bad bad[] = {
        {"q NULL", nullptr, k, v, w, beta, nullptr, nullptr, 0, "q: is NULL"},
        {"beta NULL", q, k, v, w, nullptr, nullptr, nullptr, 0, "beta: is NULL"},
        {"q f16", t4(GGML_TYPE_F16, 16, 30, 4, 2), k, v, w, beta, nullptr, nullptr, 0, "q: type is f16"},
        {"k head dim", q, t4(GGML_TYPE_F32, 8, 30, 2, 2), v, w, beta, nullptr, nullptr, 0, "k: ne0 (head dim K) is 8 but q has 16"},
        {"v tokens", q, k, t4(GGML_TYPE_F32, 8, 31, 2, 2), w, beta, nullptr, nullptr, 0, "v: ne1 (tokens) is 31 but k has 30"},
        {"w heads", q, k, v, t4(GGML_TYPE_F32, 16, 30, 1, 2), beta, nullptr, nullptr, 0, "w: ne2 (kv heads) is 1 but k has 2"},
        {"gqa", q, t4(GGML_TYPE_F32, 16, 30, 3, 2), t4(GGML_TYPE_F32, 8, 30, 3, 2), t4(GGML_TYPE_F32, 16, 30, 3, 2),
         ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 30, 3, 2), nullptr, nullptr, 0, "k: ne2 (kv heads) is 3"},
        {"beta heads", q, k, v, w, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 30, 4, 2), nullptr, nullptr, 0,
         "beta: ne1 is 4, must be 2 (kv heads"},
        {"beta f16", q, k, v, w, ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 30, 2, 2), nullptr, nullptr, 0, "beta: type is f16"},
        {"g heads", q, k, v, w, beta, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 30, 2, 2), nullptr, 0,
         "g: ne1 is 2, must be 4 (query heads"},
        {"transposed w", q, k, v, ggml_transpose(ctx, t4(GGML_TYPE_F32, 30, 16, 2, 2)), beta, nullptr, nullptr, 0, "w: nb[0] is"},
        {"check", q, k, v, w, beta, nullptr, nullptr, 7, "check: 7 is not"},
        {"cu f32", q, k, v, w, beta, nullptr, ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3), 0, "cu_seqlens: type is f32"},
        {"k tokens", q, t4(GGML_TYPE_F32, 16, 31, 2, 2), t4(GGML_TYPE_F32, 8, 31, 2, 2), t4(GGML_TYPE_F32, 16, 31, 2, 2), beta,
         nullptr, nullptr, 0, "k: ne1 (tokens) is 31 but q has 30"},
        {"g tokens", q, k, v, w, beta, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 31, 4, 2), nullptr, 0, "g: ne0 is 31, must be 30"},
        {"beta 4-d", q, k, v, w, t4(GGML_TYPE_F32, 30, 2, 2, 2), nullptr, nullptr, 0, "beta: ne3 is 2, must be 1"},
        {"varlen B 2", q, k, v, w, beta, nullptr, ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3), 0, "cu_seqlens"},
        {"K 300", t4(GGML_TYPE_F32, 300, 30, 4, 2), t4(GGML_TYPE_F32, 300, 30, 2, 2), v, t4(GGML_TYPE_F32, 300, 30, 2, 2), beta,
         nullptr, nullptr, 0, "K = 300"},
    };
    for (const Bad &b : bad) {
        fattn_ggml_path_opts o = fattn_ggml_path_opts_default();
        o.g = b.g, o.cu_seqlens = b.cu;
        std::memcpy(&o.check, &b.check, sizeof b.check);
        ggml_tensor *out = fattn_ggml_path_attn(ctx, b.q, b.k, b.v, b.w, b.beta, &o);
        const string msg = fattn_ggml_last_error();
        EXPECT(out == nullptr && msg.find(b.expect) != string::npos, "%s: got '%s', want '%s'", b.what, msg.c_str(),
               b.expect);
        char why[512];
        EXPECT(fattn_ggml_path_supports(b.q, b.k, b.v, b.w, b.beta, &o, why, sizeof why) != FATTN_OK &&
                   string(why).find(b.expect) != string::npos,
               "%s: supports said '%s'", b.what, why);
    }
    char why[64] = "unset";
    EXPECT(fattn_ggml_path_supports(q, k, v, w, beta, nullptr, why, sizeof why) == FATTN_OK && why[0] == 0, "good: %s", why);
    fattn_ggml_path_opts nan_scale = fattn_ggml_path_opts_default();
    nan_scale.scale = std::numeric_limits<float>::quiet_NaN();
    EXPECT(fattn_ggml_path_attn(ctx, q, k, v, w, beta, &nan_scale) == nullptr &&
               string(fattn_ggml_last_error()) == "scale: is not finite",
           "NaN scale: %s", fattn_ggml_last_error());
    EXPECT(fattn_ggml_path_attn(nullptr, q, k, v, w, beta, nullptr) == nullptr &&
               string(fattn_ggml_last_error()) == "ctx: is NULL",
           "NULL ctx");
    EXPECT(fattn_ggml_path_lse(ctx, q) == nullptr && fattn_ggml_is_path(q) == 0, "lse of a non-PaTH tensor");
    ggml_free(ctx);
}

// fattn_ggml_graph_check takes the op's forward and backward nodes on the CPU backend; the
// memory model is fattn_path_memory's.
void case_graph_check_memory() {
    Cfg c;
    Graph gr;
    if (!build(gr, c)) return;
    int nodes = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gr.gf); ++i) {
        const ggml_tensor *n = ggml_graph_node(gr.gf, i);
        nodes += n->op == GGML_OP_CUSTOM && std::strncmp(ggml_get_name(n), "fattn_path", 10) == 0;
    }
    ggml_backend_t cpu = ggml_backend_cpu_init();
    char why[256] = "unset";
    EXPECT(nodes == 2 && fattn_ggml_graph_check(gr.gf, cpu, why, sizeof why) == FATTN_OK && why[0] == 0,
           "%d PaTH nodes; %s", nodes, why);
    ggml_backend_free(cpu);
    EXPECT(fattn_ggml_is_path(gr.o) == 1, "is_path");
    fattn_ggml_path_opts o = fattn_ggml_path_opts_default();
    o.g = gr.g;
    fattn_path_memory_info m{}, want{}, one{};
    EXPECT(fattn_ggml_path_memory(gr.o->view_src->src[0], gr.k, gr.v, gr.w, gr.pbeta, &o, 3, &m) == FATTN_OK, "memory: %s",
           fattn_ggml_last_error());
    EXPECT(fattn_ggml_path_memory(gr.o->view_src->src[0], gr.k, gr.v, gr.w, gr.pbeta, &o, 1, &one) == FATTN_OK &&
               one.bwd_workspace_bytes < m.bwd_workspace_bytes,
           "3 threads' workspace %llu not above one thread's %llu", (unsigned long long)m.bwd_workspace_bytes,
           (unsigned long long)one.bwd_workspace_bytes);
    EXPECT(fattn_ggml_path_memory(gr.o->view_src->src[0], gr.k, gr.v, gr.w, gr.pbeta, &o, 0, &one) == FATTN_ERR_BAD_VALUE,
           "0 threads");
    fattn_ctx_t *ctx = nullptr;
    fattn_ctx_init_cpu(3, &ctx);
    Data d(c);
    const fattn_path_params p = fattn_path_params_default();
    const fattn_tensor q = bthx(d.q.data(), c.K, c.T, c.Hq, c.B), k = bthx(d.k.data(), c.K, c.T, c.H, c.B),
                       v = bthx(d.v.data(), c.V, c.T, c.H, c.B), w = bthx(d.w.data(), c.K, c.T, c.H, c.B),
                       be = bth1(d.beta.data(), c.T, c.H, c.B), g = bth1(d.g.data(), c.T, c.Hq, c.B);
    EXPECT(fattn_path_memory(ctx, &p, &q, &k, &v, &w, &be, &g, &want) == FATTN_OK, "fattn_path_memory");
    fattn_ctx_free(ctx);
    EXPECT(std::memcmp(&m, &want, sizeof m) == 0, "memory model differs (bwd peak %llu vs %llu)",
           (unsigned long long)m.bwd_peak_bytes, (unsigned long long)want.bwd_peak_bytes);
}

const Case kCases[] = {
    {"dense", case_dense},
    {"varlen", case_varlen},
    {"partial_grads", case_partial_grads},
    {"permuted", case_permuted},
    {"threads_bitwise", case_threads_bitwise},
    {"strict_check", case_strict_check},
    {"errors", case_errors},
    {"graph_check_memory", case_graph_check_memory},
};

}  // namespace

int main(int argc, char **argv) { return fattn_ggml_test::run_cases(argc, argv, kCases, sizeof kCases / sizeof kCases[0]); }
