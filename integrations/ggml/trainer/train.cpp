// fattn-ggml-train — a reference trainer: a tiny causal transformer LM (bytes of a text file),
// trained with ggml-opt (AdamW) on ggml's CPU backend, with one of three attention arms:
//   exact      ggml's own chain: mul_mat -> diag_mask_inf -> soft_max_ext -> mul_mat, which keeps
//              the [S, S, H, B] scores and probabilities for the backward (no fattn involved)
//   flash      fattn_ggml_attn, precision AUTO (resolved per backend: F32 on the CPU)
//   flash-f32  fattn_ggml_attn, precision F32 requested explicitly
//   path       fattn_ggml_path_attn: PaTH attention (a different model: per layer two more
//              projections, w = the rows of x·Ww normalised to unit length and beta =
//              2·sigmoid(x·Wb), one of each per kv head and token; no exact arm to compare with)
// The model is the same in the softmax arms (same parameters, same initialisation, same batches);
// only the attention sub-graph differs. q, k and v are permuted views of the projections, read in
// place by the fattn arms.
//
// Start-up, flash arms: the supports probe at the real shapes (exits 1 with the reason if fattn
// does not run them), the resolved precision, fattn's memory model for one attention layer
// beside what the exact chain keeps, and a self-test rung: the gradients of every parameter on
// one batch, flash vs exact, within 1e-5 relative (exits 1 otherwise).
//
//   fattn-ggml-train --data examples/data/tiny.txt --attn flash --steps 200
//   fattn-ggml-train --attn exact --dump-graph g.txt --steps 0    (the training graph, canonical)
// Built a second time without fattn (fattn-ggml-train-nofattn, FATTN_GGML_TRAINER_NO_FATTN): its
// exact graph dump is byte-identical to this one's (ctest ggml.trainer_exact_graph_identical).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-opt.h"
#include "ggml.h"
#ifdef FATTN_GGML_TRAINER_CUDA
#include "ggml-cuda.h"
#endif
#ifndef FATTN_GGML_TRAINER_NO_FATTN
#include "fattn_ggml.h"
#endif

namespace {

using std::string;
using std::vector;

enum Arm { ARM_EXACT, ARM_FLASH, ARM_FLASH_F32, ARM_PATH };
const char *arm_name(Arm a) {
    return a == ARM_EXACT ? "exact" : a == ARM_FLASH ? "flash" : a == ARM_FLASH_F32 ? "flash-f32" : "path";
}

struct Options {
    string data;
    Arm arm = ARM_FLASH;
    int steps = 200, seq = 64, batch = 8, dim = 64, heads = 4, kv_heads = 4, layers = 2;
    int threads = 0, log_every = 20, val_batches = 4;
    float lr = 2e-3f;
    uint64_t seed = 1;
    string self_test = "on";  // on | off | only
    string dump_graph;
    double min_drop = -1;     // >= 0: exit 1 unless the loss fell by at least this much
    string backend = "cpu";   // cpu | cuda (device 0; a FATTN_GGML_CUDA build)
    bool compare = false;     // exact and the --attn arm side by side, interleaved, same batches
    double budget_mib = 0;    // > 0: the longest S of each arm whose step fits this many MiB
    double min_gain = -1;     // >= 0 with --mem-budget: exit 1 unless flash's S / exact's S >= this
};

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 7) {}
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float uni() { return float(next() >> 40) / float(1 << 24) * 2.0f - 1.0f; }  // [-1, 1)
};

// ------------------------------------------------------------------ model

struct Layer {
    ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2;
    ggml_tensor *ww = nullptr, *wb = nullptr;  // --attn path: the w and beta projections
};

struct Model {
    int V = 0, S = 0, B = 0, d = 0, H = 0, Hkv = 0, D = 0, L = 0;
    ggml_context *ctx = nullptr;  // parameters and the token input, allocated once
    ggml_backend_buffer_t buf = nullptr;
    ggml_tensor *tok_emb = nullptr, *pos_emb = nullptr, *out_norm = nullptr, *head = nullptr;
    ggml_tensor *tokens = nullptr;  // I32 [S, B]
    vector<Layer> layers;
    vector<ggml_tensor *> params;
};

ggml_tensor *param(Model &m, ggml_tensor *t, const string &name) {
    ggml_set_name(t, name.c_str());
    ggml_set_param(t);
    m.params.push_back(t);
    return t;
}

void make_model(Model &m, const Options &o, int V, ggml_backend_t backend) {
    m.V = V;
    m.S = o.seq;
    m.B = o.batch;
    m.d = o.dim;
    m.H = o.heads;
    m.Hkv = o.kv_heads;
    m.D = o.dim / o.heads;
    m.L = o.layers;
    ggml_init_params ip = {size_t(16 + 12 * m.L) * ggml_tensor_overhead(), nullptr, true};
    m.ctx = ggml_init(ip);
    ggml_context *c = m.ctx;
    const int d = m.d, dkv = m.Hkv * m.D, ff = 4 * d;
    m.tok_emb = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, V), "tok_emb");
    m.pos_emb = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, m.S), "pos_emb");
    for (int l = 0; l < m.L; ++l) {
        Layer y;
        const string s = "." + std::to_string(l);
        y.attn_norm = param(m, ggml_new_tensor_1d(c, GGML_TYPE_F32, d), "attn_norm" + s);
        y.wq = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, d), "wq" + s);
        y.wk = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, dkv), "wk" + s);
        y.wv = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, dkv), "wv" + s);
        y.wo = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, d), "wo" + s);
        y.ffn_norm = param(m, ggml_new_tensor_1d(c, GGML_TYPE_F32, d), "ffn_norm" + s);
        y.w1 = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, ff), "w1" + s);
        y.w2 = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, ff, d), "w2" + s);
        if (o.arm == ARM_PATH) {
            y.ww = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, dkv), "ww" + s);
            y.wb = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, m.Hkv), "wb" + s);
        }
        m.layers.push_back(y);
    }
    m.out_norm = param(m, ggml_new_tensor_1d(c, GGML_TYPE_F32, d), "out_norm");
    m.head = param(m, ggml_new_tensor_2d(c, GGML_TYPE_F32, d, V), "head");
    m.tokens = ggml_new_tensor_2d(c, GGML_TYPE_I32, m.S, m.B);
    ggml_set_name(m.tokens, "tokens");
    ggml_set_input(m.tokens);
    m.buf = ggml_backend_alloc_ctx_tensors(c, backend);
    Rng r(0x5eed0000 + 1);
    for (ggml_tensor *t : m.params) {
        vector<float> x(size_t(ggml_nelements(t)));
        const bool gain = ggml_n_dims(t) == 1 && std::strncmp(ggml_get_name(t), "wb.", 3) != 0;  // wb [d, 1]: a matrix
        const float a = gain ? 0.0f : t == m.tok_emb || t == m.pos_emb ? 0.1f : std::sqrt(3.0f / float(t->ne[0]));
        for (float &e : x) e = gain ? 1.0f : a * r.uni();
        ggml_backend_tensor_set(t, x.data(), 0, ggml_nbytes(t));
    }
}

// softmax(q·kᵀ·scale, causal) · v over q [D, S, H, B], k / v [D, S, Hkv, B] (permuted views);
// v4 is v before the permute ([D, Hkv, S, B]).
ggml_tensor *attention(ggml_context *c, const Model &m, Arm arm, ggml_tensor *q, ggml_tensor *k,
                       ggml_tensor *v, ggml_tensor *v4, vector<ggml_tensor *> *attn_outs) {
    const float scale = 1.0f / std::sqrt(float(m.D));
    if (arm == ARM_EXACT) {
        ggml_tensor *kq = ggml_mul_mat(c, k, q);  // [S, S, H, B]
        kq = ggml_diag_mask_inf(c, kq, 0);
        kq = ggml_soft_max_ext(c, kq, nullptr, scale, 0.0f);
        ggml_tensor *vt = ggml_cont(c, ggml_permute(c, v4, 1, 2, 0, 3));  // [S, D, Hkv, B]
        return ggml_mul_mat(c, vt, kq);                                    // [D, S, H, B]
    }
#ifndef FATTN_GGML_TRAINER_NO_FATTN
    const fattn_prec prec = arm == ARM_FLASH_F32 ? FATTN_PREC_F32 : FATTN_PREC_AUTO;
    ggml_tensor *o = fattn_ggml_attn(c, q, k, v, nullptr, scale, FATTN_CAUSAL_TOP_LEFT, prec);
    if (!o) {
        std::fprintf(stderr, "fattn_ggml_attn: %s\n", fattn_ggml_last_error());
        std::exit(1);
    }
    if (attn_outs) attn_outs->push_back(o);
    return o;
#else
    (void)v;
    (void)attn_outs;
    std::fprintf(stderr, "this build has no fattn: --attn exact only\n");
    std::exit(2);
#endif
}

// PaTH attention of layer y on its normed input h [d, S*B]: w = the rows of h·Ww [D, Hkv, S, B]
// scaled to unit length (rms_norm over D, times 1/sqrt(D)), beta = 2·sigmoid(h·Wb) [Hkv, S, B]
// (as 2·exp(-softplus(-x)): ggml differentiates those), both read by the op as permuted views.
// Each permute takes an identity reshape as its source: ggml's backward of a permute is a
// non-contiguous view, which RESHAPE's backward makes contiguous (SCALE's would assert).
// qkvwb (if given and empty) receives q, k, v, w, beta.
ggml_tensor *path_attention(ggml_context *c, const Model &m, const Layer &y, ggml_tensor *h, ggml_tensor *q,
                            ggml_tensor *k, ggml_tensor *v, vector<ggml_tensor *> *attn_outs,
                            vector<ggml_tensor *> *qkvwb) {
#ifndef FATTN_GGML_TRAINER_NO_FATTN
    const int S = m.S, B = m.B, D = m.D, Hkv = m.Hkv;
    ggml_tensor *w4 = ggml_reshape_4d(c, ggml_mul_mat(c, y.ww, h), D, Hkv, S, B);
    w4 = ggml_scale(c, ggml_rms_norm(c, w4, 1e-12f), 1.0f / std::sqrt(float(D)));
    ggml_tensor *w = ggml_permute(c, ggml_reshape_4d(c, w4, D, Hkv, S, B), 0, 2, 1, 3);  // [D, S, Hkv, B] view
    ggml_tensor *bl = ggml_reshape_3d(c, ggml_mul_mat(c, y.wb, h), Hkv, S, B);
    ggml_tensor *b3 = ggml_scale(c, ggml_exp(c, ggml_neg(c, ggml_softplus(c, ggml_neg(c, bl)))), 2.0f);
    ggml_tensor *beta = ggml_permute(c, ggml_reshape_3d(c, b3, Hkv, S, B), 1, 0, 2, 3);  // [S, Hkv, B] view
    if (qkvwb && qkvwb->empty()) *qkvwb = {q, k, v, w, beta};
    ggml_tensor *o = fattn_ggml_path_attn(c, q, k, v, w, beta, nullptr);
    if (!o) {
        std::fprintf(stderr, "fattn_ggml_path_attn: %s\n", fattn_ggml_last_error());
        std::exit(1);
    }
    if (attn_outs) attn_outs->push_back(o);
    return o;
#else
    (void)c, (void)m, (void)y, (void)h, (void)q, (void)k, (void)v, (void)attn_outs, (void)qkvwb;
    std::fprintf(stderr, "this build has no fattn: --attn exact only\n");
    std::exit(2);
#endif
}

// logits [V, S*B] of the batch in m.tokens.
ggml_tensor *forward(ggml_context *c, const Model &m, Arm arm, vector<ggml_tensor *> *attn_outs,
                     vector<ggml_tensor *> *qkv_first = nullptr) {
    const int S = m.S, B = m.B, d = m.d, D = m.D, H = m.H, Hkv = m.Hkv, N = S * B;
    const float eps = 1e-5f;
    ggml_tensor *x = ggml_get_rows(c, m.tok_emb, ggml_reshape_1d(c, m.tokens, N));  // [d, N]
    x = ggml_add(c, ggml_reshape_3d(c, x, d, S, B), m.pos_emb);
    x = ggml_reshape_2d(c, x, d, N);
    for (const Layer &y : m.layers) {
        ggml_tensor *h = ggml_mul(c, ggml_rms_norm(c, x, eps), y.attn_norm);
        ggml_tensor *q4 = ggml_reshape_4d(c, ggml_mul_mat(c, y.wq, h), D, H, S, B);
        ggml_tensor *k4 = ggml_reshape_4d(c, ggml_mul_mat(c, y.wk, h), D, Hkv, S, B);
        ggml_tensor *v4 = ggml_reshape_4d(c, ggml_mul_mat(c, y.wv, h), D, Hkv, S, B);
        ggml_tensor *q = ggml_permute(c, q4, 0, 2, 1, 3);  // [D, S, H, B] views
        ggml_tensor *k = ggml_permute(c, k4, 0, 2, 1, 3);
        ggml_tensor *v = ggml_permute(c, v4, 0, 2, 1, 3);
        ggml_tensor *o = nullptr;  // [D, S, H, B]
        if (arm == ARM_PATH) {
            o = path_attention(c, m, y, h, q, k, v, attn_outs, qkv_first);
        } else {
            if (qkv_first && qkv_first->empty()) *qkv_first = {q, k, v};
            o = attention(c, m, arm, q, k, v, v4, attn_outs);
        }
        o = ggml_reshape_2d(c, ggml_cont(c, ggml_permute(c, o, 0, 2, 1, 3)), d, N);
        x = ggml_add(c, x, ggml_mul_mat(c, y.wo, o));
        h = ggml_mul(c, ggml_rms_norm(c, x, eps), y.ffn_norm);
        x = ggml_add(c, x, ggml_mul_mat(c, y.w2, ggml_silu(c, ggml_mul_mat(c, y.w1, h))));
    }
    x = ggml_mul(c, ggml_rms_norm(c, x, eps), m.out_norm);
    return ggml_mul_mat(c, m.head, x);  // [V, N]
}

// ------------------------------------------------------------------ data

struct Corpus {
    vector<int32_t> ids;  // the file as vocabulary indices
    vector<unsigned char> vocab;
};

bool load(const string &path, Corpus *cp) {
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    vector<unsigned char> bytes;
    unsigned char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    int map[256];
    bool seen[256] = {false};
    for (unsigned char b : bytes) seen[b] = true;
    for (int i = 0; i < 256; ++i)
        if (seen[i]) {
            map[i] = int(cp->vocab.size());
            cp->vocab.push_back((unsigned char)i);
        }
    cp->ids.reserve(bytes.size());
    for (unsigned char b : bytes) cp->ids.push_back(map[b]);
    return true;
}

// Windows of S + 1 tokens: inputs (first S, [S, B]) and one-hot labels (next S, [V, S*B]).
// Training windows come from the first 90% of the corpus, validation ones from the rest.
void batch(const Corpus &cp, const Model &m, Rng &r, bool val, vector<int32_t> *in, vector<float> *labels) {
    const int64_t n = int64_t(cp.ids.size()), split = n * 9 / 10;
    const int64_t lo = val ? split : 0, hi = (val ? n : split) - m.S - 1;
    in->assign(size_t(m.S) * m.B, 0);
    labels->assign(size_t(m.V) * m.S * m.B, 0.0f);
    for (int b = 0; b < m.B; ++b) {
        const int64_t at = lo + int64_t(r.next() % uint64_t(std::max<int64_t>(1, hi - lo)));
        for (int s = 0; s < m.S; ++s) {
            (*in)[size_t(b) * m.S + s] = cp.ids[at + s];
            (*labels)[(size_t(b) * m.S + s) * m.V + cp.ids[at + s + 1]] = 1.0f;
        }
    }
}

// ------------------------------------------------------------------ graph dump

// One line per leaf and node: op, type, shape, strides, op params, flags, sources by position.
// No addresses, so two builds of the same graph give the same bytes (custom ops' params hold
// function pointers: they print as "custom").
bool dump_graph(const string &path, ggml_cgraph *g) {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    // Nodes in graph order, then the leaves (sources that are not nodes) by first use.
    std::vector<ggml_tensor *> order;
    const int n_nodes = ggml_graph_n_nodes(g);
    for (int i = 0; i < n_nodes; ++i) order.push_back(ggml_graph_node(g, i));
    auto known = [&](const ggml_tensor *t) { return std::find(order.begin(), order.end(), t) != order.end(); };
    for (int i = 0; i < n_nodes; ++i) {
        const ggml_tensor *n = ggml_graph_node(g, i);
        for (int s = 0; s < GGML_MAX_SRC; ++s)
            for (ggml_tensor *t : {n->src[s], n->src[s] ? n->src[s]->view_src : nullptr})
                if (t && !known(t)) order.push_back(t);
    }
    auto id = [&](const ggml_tensor *t) -> string {
        if (!t) return "-";
        for (size_t i = 0; i < order.size(); ++i)
            if (order[i] == t) return (int(i) < n_nodes ? "N" : "L") + std::to_string(i);
        return "?";
    };
    for (size_t i = 0; i < order.size(); ++i) {
        const ggml_tensor *t = order[i];
        std::fprintf(f, "%s %s %s ne=[%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "] nb=[%zu %zu %zu %zu] flags=%d",
                     id(t).c_str(), ggml_op_desc(t), ggml_type_name(t->type), t->ne[0], t->ne[1],
                     t->ne[2], t->ne[3], t->nb[0], t->nb[1], t->nb[2], t->nb[3], t->flags);
        if (t->op == GGML_OP_CUSTOM) {
            std::fprintf(f, " params=custom");
        } else {
            std::fprintf(f, " params=");
            for (size_t b = 0; b < sizeof t->op_params; ++b)
                std::fprintf(f, "%02x", ((const unsigned char *)t->op_params)[b]);
        }
        std::fprintf(f, " src=");
        for (int s = 0; s < GGML_MAX_SRC; ++s) std::fprintf(f, "%s%s", s ? "," : "", id(t->src[s]).c_str());
        std::fprintf(f, " view=%s+%zu name=%s\n", id(t->view_src).c_str(), t->view_offs, t->name);
    }
    return std::fclose(f) == 0;
}

// ------------------------------------------------------------------ self-test rung
#ifndef FATTN_GGML_TRAINER_NO_FATTN

// Gradients of every parameter for one batch through a plain graph (gallocr, CPU backend).
bool param_grads(const Model &m, Arm arm, ggml_backend_t be, const vector<float> &labels,
                 vector<vector<float>> *grads, float *loss_out) {
    ggml_init_params ip = {size_t(32) << 20, nullptr, true};
    ggml_context *c = ggml_init(ip);
    ggml_tensor *logits = forward(c, m, arm, nullptr);
    ggml_tensor *lab = ggml_new_tensor_2d(c, GGML_TYPE_F32, m.V, m.S * m.B);
    ggml_set_input(lab);
    ggml_tensor *loss = ggml_cross_entropy_loss(c, logits, lab);
    ggml_set_loss(loss);
    ggml_set_output(loss);
    ggml_cgraph *g = ggml_new_graph_custom(c, 8192, true);
    ggml_build_forward_expand(g, loss);
    ggml_build_backward_expand(c, g, nullptr);
    vector<ggml_tensor *> gt;
    for (ggml_tensor *p : m.params) {
        ggml_tensor *gr = ggml_graph_get_grad(g, p);
        if (gr && !ggml_is_contiguous(gr)) gr = ggml_cont(c, gr);
        if (gr) {
            ggml_set_output(gr);
            ggml_build_forward_expand(g, gr);
        }
        gt.push_back(gr);
    }
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    bool ok = ggml_gallocr_alloc_graph(ga, g);
    if (ok) {
        ggml_backend_tensor_set(lab, labels.data(), 0, ggml_nbytes(lab));
        ggml_graph_reset(g);
        ok = ggml_backend_graph_compute(be, g) == GGML_STATUS_SUCCESS;
    }
    if (ok) {
        ggml_backend_tensor_get(loss, loss_out, 0, sizeof(float));
        grads->clear();
        for (ggml_tensor *gr : gt) {
            vector<float> x(gr ? size_t(ggml_nelements(gr)) : 0);
            if (gr) ggml_backend_tensor_get(gr, x.data(), 0, x.size() * sizeof(float));
            grads->push_back(std::move(x));
        }
    }
    ggml_gallocr_free(ga);
    ggml_free(c);
    return ok;
}

bool self_test(const Model &m, Arm arm, ggml_backend_t be, const vector<float> &labels) {
    vector<vector<float>> ge, gf;
    float le = 0, lf = 0;
    if (!param_grads(m, ARM_EXACT, be, labels, &ge, &le) || !param_grads(m, arm, be, labels, &gf, &lf)) {
        std::fprintf(stderr, "self-test: a gradient graph failed to run\n");
        return false;
    }
    double worst = 0;
    string worst_name = "-";
    for (size_t i = 0; i < m.params.size(); ++i) {
        double num = 0, den = 0;
        for (size_t j = 0; j < ge[i].size(); ++j) {
            const double e = double(gf[i][j]) - ge[i][j];
            num += e * e;
            den += double(ge[i][j]) * ge[i][j];
        }
        const double rel = ge[i].size() == gf[i].size() && den > 0 ? std::sqrt(num / den) : INFINITY;
        if (!(rel <= worst)) {
            worst = rel;
            worst_name = ggml_get_name(m.params[i]);
        }
    }
    const bool ok = worst <= 1e-5;
    std::printf("self-test: %s vs exact on one batch: loss %.6f vs %.6f, gradients of %zu parameters, "
                "max rel rms %.2e (%s): %s\n",
                arm_name(arm), lf, le, m.params.size(), worst, worst_name.c_str(), ok ? "ok" : "FAILED (> 1e-5)");
    return ok;
}
#endif

// ------------------------------------------------------------------ options

ggml_opt_optimizer_params opt_params(void *ud) {
    ggml_opt_optimizer_params p = ggml_opt_get_default_optimizer_params(nullptr);
    p.adamw.alpha = *static_cast<const float *>(ud);
    return p;
}

[[noreturn]] void usage(const char *argv0, int rc) {
    std::fprintf(rc ? stderr : stdout,
                 "usage: %s [--data FILE] [--attn exact|flash|flash-f32|path] [--steps N] [--seq S] "
                 "[--batch B]\n  [--dim d] [--heads H] [--kv-heads Hkv] [--layers L] [--lr x] "
                 "[--threads T] [--seed s]\n  [--self-test on|off|only] [--dump-graph FILE] "
                 "[--log-every n] [--min-drop x]\n  [--backend cpu|cuda] [--compare on|off] "
                 "[--mem-budget MiB [--min-gain x]]\n",
                 argv0);
    std::exit(rc);
}

// ggml-opt on a fresh batch: a training step (train: from the training split, with the backward
// and the AdamW step) or a validation batch (from the held-out split, forward only). Its loss.
float eval_batch(ggml_opt_context_t opt, const Corpus &cp, const Model &m, Rng &r, bool train,
                 vector<int32_t> *in, vector<float> *labels) {
    batch(cp, m, r, !train, in, labels);
    ggml_opt_alloc(opt, train);
    ggml_backend_tensor_set(m.tokens, in->data(), 0, ggml_nbytes(m.tokens));
    ggml_backend_tensor_set(ggml_opt_labels(opt), labels->data(), 0, labels->size() * sizeof(float));
    ggml_opt_eval(opt, nullptr);
    float loss = 0;
    ggml_backend_tensor_get(ggml_opt_loss(opt), &loss, 0, sizeof loss);
    return loss;
}

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const string a = argv[i];
        if (a == "-h" || a == "--help") usage(argv[0], 0);
        if (i + 1 >= argc) usage(argv[0], 2);
        const char *v = argv[++i];
        if (a == "--data") o.data = v;
        else if (a == "--attn") {
            const string s = v;
            if (s == "exact") o.arm = ARM_EXACT;
            else if (s == "flash") o.arm = ARM_FLASH;
            else if (s == "flash-f32") o.arm = ARM_FLASH_F32;
            else if (s == "path") o.arm = ARM_PATH;
            else usage(argv[0], 2);
        } else if (a == "--steps") o.steps = std::atoi(v);
        else if (a == "--seq") o.seq = std::atoi(v);
        else if (a == "--batch") o.batch = std::atoi(v);
        else if (a == "--dim") o.dim = std::atoi(v);
        else if (a == "--heads") o.heads = std::atoi(v);
        else if (a == "--kv-heads") o.kv_heads = std::atoi(v);
        else if (a == "--layers") o.layers = std::atoi(v);
        else if (a == "--lr") o.lr = float(std::atof(v));
        else if (a == "--threads") o.threads = std::atoi(v);
        else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
        else if (a == "--self-test") o.self_test = v;
        else if (a == "--dump-graph") o.dump_graph = v;
        else if (a == "--log-every") o.log_every = std::max(1, std::atoi(v));
        else if (a == "--min-drop") o.min_drop = std::atof(v);
        else if (a == "--backend") o.backend = v;
        else if (a == "--compare") o.compare = string(v) == "on";
        else if (a == "--mem-budget") o.budget_mib = std::atof(v);
        else if (a == "--min-gain") o.min_gain = std::atof(v);
        else usage(argv[0], 2);
    }
    if (o.self_test != "on" && o.self_test != "off" && o.self_test != "only") usage(argv[0], 2);
    if (o.backend != "cpu" && o.backend != "cuda") usage(argv[0], 2);
    if (o.seq < 2 || o.batch < 1 || o.dim < 1 || o.heads < 1 || o.kv_heads < 1 || o.layers < 1 ||
        o.dim % o.heads || o.heads % o.kv_heads || o.steps < 0 || !(o.lr > 0)) {
        std::fprintf(stderr, "bad sizes: need seq >= 2, dim %% heads == 0, heads %% kv-heads == 0, lr > 0\n");
        std::exit(2);
    }
    if (o.arm == ARM_PATH && (o.compare || o.budget_mib > 0 || o.self_test == "only")) {
        std::fprintf(stderr, "--attn path trains a PaTH model, which no exact arm computes: no --compare, "
                             "--mem-budget or --self-test only\n");
        std::exit(2);
    }
    if (o.kv_heads != o.heads && o.batch > 1 && o.arm != ARM_PATH &&
        (o.arm == ARM_EXACT || o.compare || o.self_test != "off")) {
        std::fprintf(stderr, "ggml's exact chain cannot differentiate GQA with batch > 1 (its MUL_MAT backward "
                             "broadcasts heads only when ne3 is 1): use --batch 1, or --attn flash "
                             "--self-test off\n");
        std::exit(2);
    }
    if (o.threads <= 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
    return o;
}

// ------------------------------------------------------------------ runs

// One training run: a model on the compute backend and ggml-opt over a scheduler (the compute
// backend, then the CPU, as ggml's scheduler wants the CPU last).
struct Run {
    Arm arm = ARM_EXACT;
    Model m;
    ggml_backend_sched_t sched = nullptr;
    ggml_context *ctx_compute = nullptr;
    ggml_opt_context_t opt = nullptr;
    Rng rng{1};
    Run() = default;
    Run(const Run &) = delete;
    Run &operator=(const Run &) = delete;
    ~Run() {
        if (opt) ggml_opt_free(opt);
        if (ctx_compute) ggml_free(ctx_compute);
        if (sched) ggml_backend_sched_free(sched);
        if (m.buf) ggml_backend_buffer_free(m.buf);
        if (m.ctx) ggml_free(m.ctx);
    }
};

struct Backends {
    ggml_backend_t cpu = nullptr, compute = nullptr;  // compute == cpu on the CPU backend
    ~Backends() {
        if (compute && compute != cpu) ggml_backend_free(compute);
        if (cpu) ggml_backend_free(cpu);
    }
    int n() const { return compute == cpu ? 1 : 2; }
    ggml_backend_t list[2];
    ggml_backend_t *all() {
        list[0] = compute;
        list[1] = cpu;
        return list;
    }
};

ggml_backend_sched_t new_sched(Backends &be) {
    return ggml_backend_sched_new(be.all(), nullptr, be.n(), 4 * GGML_DEFAULT_GRAPH_SIZE, false, true);
}

// ggml-opt, static graphs: the forward graph from the logits; ggml-opt adds the loss, builds the
// backward with ggml_build_backward_expand (through fattn's hook) and the AdamW step.
void start_run(Run &r, const Options &o, Arm arm, int V, Backends &be) {
    r.arm = arm;
    r.rng = Rng(o.seed);
    make_model(r.m, o, V, be.compute);
    r.sched = new_sched(be);
    ggml_init_params cip = {size_t(64) << 20, nullptr, true};
    r.ctx_compute = ggml_init(cip);
    ggml_tensor *logits = forward(r.ctx_compute, r.m, arm, nullptr);
    ggml_opt_params op = ggml_opt_default_params(r.sched, GGML_OPT_LOSS_TYPE_CROSS_ENTROPY);
    op.ctx_compute = r.ctx_compute;
    op.inputs = r.m.tokens;
    op.outputs = logits;
    op.optimizer = GGML_OPT_OPTIMIZER_TYPE_ADAMW;
    op.get_opt_pars = opt_params;
    op.get_opt_pars_ud = const_cast<float *>(&o.lr);
    r.opt = ggml_opt_init(op);
}

// The training graph as ggml-opt builds it (forward, loss, backward), in c (no_alloc).
ggml_cgraph *training_graph(ggml_context *c, const Model &m, Arm arm) {
    ggml_tensor *dl = forward(c, m, arm, nullptr);
    ggml_tensor *lab = ggml_new_tensor_2d(c, GGML_TYPE_F32, m.V, m.S * m.B);
    ggml_set_input(lab);
    ggml_tensor *loss = ggml_cross_entropy_loss(c, dl, lab);
    ggml_set_loss(loss);
    ggml_cgraph *g = ggml_new_graph_custom(c, 8192, true);
    ggml_build_forward_expand(g, loss);
    ggml_build_backward_expand(c, g, nullptr);
    return g;
}

int64_t n_params(const Model &m) {
    int64_t n = 0;
    for (ggml_tensor *p : m.params) n += ggml_nelements(p);
    return n;
}

#ifndef FATTN_GGML_TRAINER_NO_FATTN
// fattn's memory model (fattn_attn_memory, or fattn_path_memory for a graph of `threads` threads;
// CPU context) for one attention layer of m: its backward peak beyond ggml's tensors (the
// workspace fattn allocates itself).
size_t fattn_layer_workspace(const Model &m, Arm arm, int threads) {
    ggml_init_params ip = {size_t(8) << 20, nullptr, true};
    ggml_context *c = ggml_init(ip);
    vector<ggml_tensor *> qkv, outs;
    forward(c, m, arm, &outs, &qkv);
    if (arm == ARM_PATH) {
        fattn_path_memory_info pm{};
        const bool ok = fattn_ggml_path_memory(qkv[0], qkv[1], qkv[2], qkv[3], qkv[4], nullptr, threads, &pm) == FATTN_OK;
        ggml_free(c);
        return ok ? std::max(pm.fwd_workspace_bytes, pm.bwd_workspace_bytes) : 0;
    }
    const fattn_prec req = arm == ARM_FLASH_F32 ? FATTN_PREC_F32 : FATTN_PREC_AUTO;
    fattn_attn_memory_info mi{};
    const bool ok = fattn_ggml_attn_memory(qkv[0], qkv[1], qkv[2], nullptr, 1.0f / std::sqrt(float(m.D)),
                                           FATTN_CAUSAL_TOP_LEFT, req, &mi) == FATTN_OK;
    ggml_free(c);
    return ok ? std::max(mi.fwd_workspace_bytes, mi.bwd_workspace_bytes) : 0;
}
#endif

// Memory of one training step of arm at sequence length S, predicted before running it: ggml's
// compute buffers for the training graph (ggml_backend_sched_reserve_size: what ggml-opt's
// scheduler allocates for it, exactly), the parameters with their gradients and AdamW's two
// moments (4 floats each), and for a flash arm fattn's own workspace (its memory model). Never
// under what the step allocates through ggml; fattn's part is its documented upper bound.
double step_bytes(const Options &o, Arm arm, int V, int S, Backends &be) {
    Options os = o;
    os.seq = S;
    Model m;
    make_model(m, os, V, be.compute);
    ggml_init_params ip = {size_t(64) << 20, nullptr, true};
    ggml_context *c = ggml_init(ip);
    ggml_cgraph *g = training_graph(c, m, arm);
    ggml_backend_sched_t sched = new_sched(be);
    size_t sizes[2] = {0, 0};
    ggml_backend_sched_reserve_size(sched, g, sizes);
    double bytes = double(sizes[0]) + 16.0 * double(n_params(m));
#ifndef FATTN_GGML_TRAINER_NO_FATTN
    if (arm != ARM_EXACT) bytes += double(fattn_layer_workspace(m, arm, o.threads));
#endif
    ggml_backend_sched_free(sched);
    ggml_free(c);
    ggml_backend_buffer_free(m.buf);
    ggml_free(m.ctx);
    return bytes;
}

// --mem-budget: per arm, the longest S (a multiple of 16) whose predicted step fits the budget.
int longest_seq(const Options &o, Arm arm, int V, Backends &be, double budget, int s_max) {
    int lo = 0, hi = s_max / 16;  // in units of 16
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (step_bytes(o, arm, V, 16 * mid, be) <= budget) lo = mid;
        else hi = mid - 1;
    }
    return 16 * lo;
}

#ifndef FATTN_GGML_TRAINER_NO_FATTN
// Start-up checks of a flash arm: the supports probe at the real shapes (fattn's rules on the
// CPU, then every fattn node of the training graph on the compute backend: no silent CPU split),
// the resolved precision where it runs, fattn's memory model, and the self-test rung on the CPU.
bool flash_start_up(const Options &o, Arm arm, const Corpus &cp, Backends &be, bool *stop) {
    Model m;
    make_model(m, o, int(cp.vocab.size()), be.cpu);
    struct Free {
        Model &m;
        ~Free() {
            ggml_backend_buffer_free(m.buf);
            ggml_free(m.ctx);
        }
    } fr{m};
    ggml_init_params ip = {size_t(8) << 20, nullptr, true};
    ggml_context *c = ggml_init(ip);
    vector<ggml_tensor *> qkv, outs;
    forward(c, m, arm, &outs, &qkv);
    const fattn_prec req = arm == ARM_FLASH_F32 ? FATTN_PREC_F32 : FATTN_PREC_AUTO;
    const float scale = 1.0f / std::sqrt(float(m.D));
    char why[512];
    const fattn_status s = fattn_ggml_attn_supports(qkv[0], qkv[1], qkv[2], nullptr, scale,
                                                    FATTN_CAUSAL_TOP_LEFT, req, why, sizeof why);
    std::printf("fattn supports [D %d, S %d, H %d/%d, B %d, causal, q/k/v strided views]: %s%s\n", m.D,
                m.S, m.H, m.Hkv, m.B, s == FATTN_OK ? "yes" : "NO: ", why);
    if (s != FATTN_OK) {
        ggml_free(c);
        return false;
    }
    fattn_prec resolved = fattn_ggml_attn_prec(outs[0]);
    if (be.compute != be.cpu) {
        // the training graph at the real shapes, its fattn nodes asked of the compute backend
        ggml_init_params gp = {size_t(64) << 20, nullptr, true};
        ggml_context *gc = ggml_init(gp);
        Model mg;
        make_model(mg, o, int(cp.vocab.size()), be.compute);
        ggml_cgraph *g = training_graph(gc, mg, arm);
        const fattn_status gs = fattn_ggml_graph_check(g, be.compute, why, sizeof why);
        std::printf("fattn on %s: %s%s\n", ggml_backend_name(be.compute),
                    gs == FATTN_OK ? "every fattn node of the training graph runs there" : "NO: ", gs == FATTN_OK ? "" : why);
        ggml_free(gc);
        ggml_backend_buffer_free(mg.buf);
        ggml_free(mg.ctx);
        if (gs != FATTN_OK) {
            ggml_free(c);
            return false;
        }
        resolved = fattn_ggml_attn_prec_cuda(outs[0], 0);
    }
    std::printf("attention: fattn fused forward + backward on %s, precision requested %s, resolved %s; cpu isa %s\n",
                ggml_backend_name(be.compute), fattn_prec_name(req), fattn_prec_name(resolved), fattn_cpu_isa());
    fattn_attn_memory_info mi{};
    if (fattn_ggml_attn_memory(qkv[0], qkv[1], qkv[2], nullptr, scale, FATTN_CAUSAL_TOP_LEFT, req, &mi) == FATTN_OK) {
        const double kib = 1024.0;
        const double probs = double(m.S) * m.S * m.H * m.B * 4;
        std::printf("memory, one attention layer (fattn_attn_memory): saved O+LSE %.1f KiB, fwd workspace "
                    "%.1f KiB, bwd workspace %.1f KiB, bwd peak %.1f KiB; the exact chain keeps "
                    "[S, S, H, B] scores and probabilities: 2 x %.1f KiB\n",
                    mi.saved_bytes / kib, mi.fwd_workspace_bytes / kib, mi.bwd_workspace_bytes / kib,
                    mi.bwd_peak_bytes / kib, probs / kib);
    }
    ggml_free(c);
    if (o.self_test != "off") {  // on the CPU, in f32: the op against ggml's chain
        Rng r2(o.seed ^ 0xabcdef);
        vector<int32_t> in;
        vector<float> labels;
        batch(cp, m, r2, false, &in, &labels);
        ggml_backend_tensor_set(m.tokens, in.data(), 0, ggml_nbytes(m.tokens));
        if (!self_test(m, arm, be.cpu, labels)) return false;
        if (o.self_test == "only") *stop = true;
    }
    return true;
}
#endif

#ifndef FATTN_GGML_TRAINER_NO_FATTN
// Start-up checks of --attn path: the supports probe at the real shapes, every fattn node of the
// training graph on the compute backend (no silent CPU split: the PaTH op has a CPU path only),
// fattn's PaTH memory model for one layer.
bool path_start_up(const Options &o, const Corpus &cp, Backends &be) {
    Model m;
    make_model(m, o, int(cp.vocab.size()), be.cpu);
    ggml_init_params ip = {size_t(8) << 20, nullptr, true};
    ggml_context *c = ggml_init(ip);
    vector<ggml_tensor *> qkvwb, outs;
    forward(c, m, ARM_PATH, &outs, &qkvwb);
    char why[512];
    fattn_status s = fattn_ggml_path_supports(qkvwb[0], qkvwb[1], qkvwb[2], qkvwb[3], qkvwb[4], nullptr, why, sizeof why);
    std::printf("fattn PaTH supports [K %d, T %d, H %d/%d, B %d, q/k/v/w/beta strided views]: %s%s\n", m.D, m.S, m.H,
                m.Hkv, m.B, s == FATTN_OK ? "yes" : "NO: ", why);
    fattn_path_memory_info pm{};
    if (s == FATTN_OK && fattn_ggml_path_memory(qkvwb[0], qkvwb[1], qkvwb[2], qkvwb[3], qkvwb[4], nullptr, o.threads, &pm) == FATTN_OK)
        std::printf("memory, one PaTH layer (fattn_path_memory): saved O+LSE %.1f KiB, bwd workspace %.1f KiB "
                    "(history %.1f KiB), bwd peak %.1f KiB\n",
                    pm.saved_bytes / 1024.0, pm.bwd_workspace_bytes / 1024.0, pm.history_packed_bytes / 1024.0,
                    pm.bwd_peak_bytes / 1024.0);
    ggml_free(c);
    ggml_backend_buffer_free(m.buf);
    ggml_free(m.ctx);
    if (s != FATTN_OK) return false;
    ggml_init_params gp = {size_t(64) << 20, nullptr, true};
    ggml_context *gc = ggml_init(gp);
    Model mg;
    make_model(mg, o, int(cp.vocab.size()), be.compute);
    ggml_cgraph *g = training_graph(gc, mg, ARM_PATH);
    s = fattn_ggml_graph_check(g, be.compute, why, sizeof why);
    std::printf("fattn on %s: %s%s\n", ggml_backend_name(be.compute),
                s == FATTN_OK ? "every fattn node of the training graph runs there" : "NO: ", s == FATTN_OK ? "" : why);
    ggml_free(gc);
    ggml_backend_buffer_free(mg.buf);
    ggml_free(mg.ctx);
    if (s == FATTN_OK && o.self_test == "on") std::printf("self-test: none for --attn path (no exact PaTH arm)\n");
    return s == FATTN_OK;
}
#endif

double median(vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    Options o = parse(argc, argv);
#ifdef FATTN_GGML_TRAINER_NO_FATTN
    if (o.arm != ARM_EXACT || o.compare) {
        std::fprintf(stderr, "this build has no fattn: --attn exact only\n");
        return 2;
    }
#endif
    if (o.data.empty()) {
#ifdef FATTN_GGML_TRAINER_DEFAULT_DATA
        o.data = FATTN_GGML_TRAINER_DEFAULT_DATA;
#else
        usage(argv[0], 2);
#endif
    }
    Corpus cp;
    if (!load(o.data, &cp) || cp.ids.size() < size_t(o.seq) * 20) {
        std::fprintf(stderr, "%s: cannot read it, or shorter than 20 windows of %d bytes\n", o.data.c_str(), o.seq);
        return 1;
    }
    const int V = int(cp.vocab.size());
    Backends be;
    be.cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be.cpu, o.threads);
    be.compute = be.cpu;
    if (o.backend == "cuda") {
#ifdef FATTN_GGML_TRAINER_CUDA
        be.compute = ggml_backend_cuda_init(0);
        if (!be.compute) {
            std::fprintf(stderr, "--backend cuda: ggml_backend_cuda_init(0) failed (no CUDA device 0?)\n");
            be.compute = be.cpu;
            return 1;
        }
#else
        std::fprintf(stderr, "--backend cuda: this build has no CUDA backend (configure with -DFATTN_GGML_CUDA=ON)\n");
        return 2;
#endif
    }
#ifdef FATTN_GGML_TRAINER_CUDA
    size_t dev_free0 = 0;  // free device memory before the run's allocations
    if (be.compute != be.cpu) {
        size_t total = 0;
        ggml_backend_cuda_get_device_memory(0, &dev_free0, &total);
    }
#endif
    const Arm flash_arm = o.arm == ARM_EXACT ? ARM_FLASH : o.arm;
    {
        Model probe;
        make_model(probe, o, V, be.cpu);
        std::printf("fattn-ggml-train: %s (%zu bytes, vocab %d); model d %d, %d layers, heads %d/%d (D %d), "
                    "S %d, B %d, %" PRId64 " parameters; attention %s; backend %s; %d threads\n",
                    o.data.c_str(), cp.ids.size(), V, probe.d, probe.L, probe.H, probe.Hkv, probe.D, probe.S,
                    probe.B, n_params(probe), o.compare ? (string("exact vs ") + arm_name(flash_arm)).c_str() : arm_name(o.arm),
                    ggml_backend_name(be.compute), o.threads);
        ggml_backend_buffer_free(probe.buf);
        ggml_free(probe.ctx);
    }

#ifndef FATTN_GGML_TRAINER_NO_FATTN
    if (o.arm == ARM_PATH) {
        if (!path_start_up(o, cp, be)) return 1;
    } else if (o.arm != ARM_EXACT || o.compare) {
        bool stop = false;
        if (!flash_start_up(o, flash_arm, cp, be, &stop)) return 1;
        if (stop) return 0;
    }
#endif

    if (o.budget_mib > 0) {
        // The longest sequence of each arm whose predicted step fits the budget (step_bytes).
        const double budget = o.budget_mib * 1024 * 1024;
        const int s_max = int(std::min<size_t>(cp.ids.size() / 20, 1 << 20));
        const int se = longest_seq(o, ARM_EXACT, V, be, budget, s_max);
        std::printf("memory budget %.0f MiB (B %d): longest S, exact %d (predicted %.1f MiB)", o.budget_mib, o.batch,
                    se, se ? step_bytes(o, ARM_EXACT, V, se, be) / 1048576.0 : 0.0);
#ifndef FATTN_GGML_TRAINER_NO_FATTN
        const int sf = longest_seq(o, flash_arm, V, be, budget, s_max);
        const double gain = se ? double(sf) / se : 0.0;
        std::printf(", %s %d (predicted %.1f MiB): %.2fx\n", arm_name(flash_arm), sf,
                    sf ? step_bytes(o, flash_arm, V, sf, be) / 1048576.0 : 0.0, gain);
        if (o.min_gain >= 0 && !(gain >= o.min_gain)) {
            std::fprintf(stderr, "the flash arm's longest S is %.2fx exact's, less than --min-gain %.2f\n", gain, o.min_gain);
            return 1;
        }
#else
        std::printf("\n");
#endif
        if (o.steps == 0) return 0;
    }

    vector<std::unique_ptr<Run>> runs;
    for (Arm a : o.compare ? vector<Arm>{ARM_EXACT, flash_arm} : vector<Arm>{o.arm}) {
        runs.emplace_back(new Run());
        start_run(*runs.back(), o, a, V, be);
    }

    if (!o.dump_graph.empty()) {
        ggml_init_params dip = {size_t(64) << 20, nullptr, true};
        ggml_context *dc = ggml_init(dip);
        ggml_cgraph *g = training_graph(dc, runs[0]->m, runs[0]->arm);
        const bool written = dump_graph(o.dump_graph, g);
        const int n_nodes = ggml_graph_n_nodes(g);
        ggml_free(dc);
        if (!written) {
            std::fprintf(stderr, "%s: cannot write\n", o.dump_graph.c_str());
            return 1;
        }
        std::printf("graph: %d nodes -> %s\n", n_nodes, o.dump_graph.c_str());
    }

    // Steps; with --compare the arms alternate which goes first, on the same batches.
    const size_t nr = runs.size();
    vector<double> first(nr, NAN), last_sum(nr, 0.0), ms_log(nr, 0.0);
    vector<vector<double>> ms(nr);
    vector<float> loss(nr, 0.0f);
    double drift_max = 0;
    int last_n = 0, logged = 0;
    vector<int32_t> in;
    vector<float> labels;
    for (int step = 1; step <= o.steps; ++step) {
        for (size_t k = 0; k < nr; ++k) {
            const size_t i = (step % 2 && nr > 1) ? nr - 1 - k : k;
            Run &r = *runs[i];
            const auto t0 = std::chrono::steady_clock::now();
            loss[i] = eval_batch(r.opt, cp, r.m, r.rng, true, &in, &labels);  // returns after the step
            const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (step > 1) ms[i].push_back(t);
            ms_log[i] += t;
            if (step == 1) first[i] = loss[i];
            if (step > o.steps - std::min(10, o.steps)) last_sum[i] += loss[i];
        }
        if (step > o.steps - std::min(10, o.steps)) ++last_n;
        if (nr > 1) drift_max = std::max(drift_max, double(std::fabs(loss[1] - loss[0])));
        if (step == 1 || step % o.log_every == 0 || step == o.steps) {  // time: since the last line
            std::printf("step %5d ", step);
            for (size_t i = 0; i < nr; ++i)
                std::printf(" %sloss %.4f  %.1f ms/step", nr > 1 ? (string(arm_name(runs[i]->arm)) + " ").c_str() : "",
                            loss[i], ms_log[i] / (step - logged));
            std::printf("%s\n", step == 1 ? " (graph allocation included)" : "");
            std::fill(ms_log.begin(), ms_log.end(), 0.0);
            logged = step;
        }
    }
#ifndef FATTN_GGML_TRAINER_NO_FATTN
    char why[512];
    if (fattn_ggml_compute_error(why, sizeof why)) {
        std::fprintf(stderr, "fattn compute failure: %s\n", why);
        return 1;
    }
#endif
    int rc = 0;
    if (o.steps > 0) {
        for (size_t i = 0; i < nr; ++i)
            std::printf("%s%s: ggml compute buffer on %s %.1f MiB; predicted step (--mem-budget's model) %.1f MiB\n",
                        arm_name(runs[i]->arm), nr > 1 ? "" : " run", ggml_backend_name(be.compute),
                        ggml_backend_sched_get_buffer_size(runs[i]->sched, be.compute) / 1048576.0,
                        step_bytes(o, runs[i]->arm, V, o.seq, be) / 1048576.0);
#ifdef FATTN_GGML_TRAINER_CUDA
        if (be.compute != be.cpu) {  // everything the run holds on the device now (pools included)
            size_t free1 = 0, total = 0;
            ggml_backend_cuda_get_device_memory(0, &free1, &total);
            std::printf("device memory held by the run after its steps: %.1f MiB (of %.0f MiB)\n",
                        (double(dev_free0) - double(free1)) / 1048576.0, total / 1048576.0);
        }
#endif
        for (size_t i = 0; i < nr; ++i) {
            Run &r = *runs[i];
            double val = 0;
            Rng rv(o.seed + 99);
            for (int b = 0; b < o.val_batches; ++b) val += eval_batch(r.opt, cp, r.m, rv, false, &in, &labels);
            const double last = last_sum[i] / std::max(1, last_n);
            std::printf("done%s%s: loss %.4f -> %.4f (mean of the last %d steps), validation loss %.4f\n",
                        nr > 1 ? " " : "", nr > 1 ? arm_name(r.arm) : "", first[i], last, last_n, val / o.val_batches);
            if (o.min_drop >= 0 && !(first[i] - last >= o.min_drop)) {
                std::fprintf(stderr, "the loss fell by %.4f, less than --min-drop %.4f\n", first[i] - last, o.min_drop);
                rc = 1;
            }
        }
        if (nr > 1) {
            // Paired: same process, same shapes and batches, alternating order; ggml's compute
            // buffer of each arm's training graph (the scheduler's allocation) beside it.
            std::printf("paired (%d steps, step 1 excluded, median ms/step): exact %.2f, %s %.2f (%.2fx); "
                        "compute buffer on %s: exact %.1f MiB, %s %.1f MiB; loss drift max |flash - exact| %.2e "
                        "over the steps\n",
                        o.steps, median(ms[0]), arm_name(runs[1]->arm), median(ms[1]), median(ms[1]) / median(ms[0]),
                        ggml_backend_name(be.compute),
                        ggml_backend_sched_get_buffer_size(runs[0]->sched, be.compute) / 1048576.0,
                        arm_name(runs[1]->arm),
                        ggml_backend_sched_get_buffer_size(runs[1]->sched, be.compute) / 1048576.0, drift_max);
        }
    }
    return rc;
}
