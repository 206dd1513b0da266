// fattn_ggml_path.cpp — fattn's PaTH attention as ggml custom ops (forward and backward) and the
// backward hook that makes the forward differentiable in ggml_build_backward_expand (CPU
// backend). The same scheme as fattn_ggml.cpp's softmax op:
//   pa  = GGML_OP_CUSTOM, F32 [n_o + n_lse]: O [V, T, Hq, B] then LSE [T, Hq, B], contiguous;
//         srcs q, k, v, w, beta (, g) (, cu_seqlens); fattn_path_fwd writes both parts.
//   o   = view of pa's O part (what the caller gets).
//   bwd = GGML_OP_CUSTOM, F32 [n_q + n_k + n_v + n_w + n_beta (+ n_g)]: dq, dk, dv, dw, dbeta
//         (, dg), contiguous and shaped like their inputs; srcs q, k, v, w, beta, pa, dO (a 4-d
//         view of pa's gradient) (, g) (, cu_seqlens); fattn_path_bwd writes all of them.
// F32 tensors only (fattn's CPU PaTH computes in f32 whatever the input dtype).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "fattn_ggml.h"
#include "fattn_ggml_common.h"

namespace {

using namespace fattn_ggml_detail;

constexpr uint32_t kMagicPathFwd = 0x50414631u;  // "PAF1"
constexpr uint32_t kMagicPathBwd = 0x50414231u;  // "PAB1"

struct PathOp {
    uint32_t magic;
    fattn_path_params base;  // scale, check, check_tol; cu_seqlens set per call from the src
    bool has_gate;           // a g src follows beta
    bool has_varlen;         // a cu_seqlens src follows (after g)
    ggml_tensor *o;          // forward: the view handed to the caller
    Pool pool;
};

PathOp *new_path_op(ggml_context *ctx, uint32_t magic, const PathOp &from) {
    void *mem = ggml_new_buffer(ctx, record_bytes<PathOp>());
    PathOp *op = new (mem) PathOp();
    op->magic = magic;
    op->base = from.base;
    op->has_gate = from.has_gate;
    op->has_varlen = from.has_varlen;
    op->o = nullptr;
    return op;
}

void path_fwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata);
void path_bwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata);

// The forward record of o (nullptr unless o is an fattn_ggml_path_attn output).
const PathOp *path_fwd_of_o(const ggml_tensor *o) {
    if (!o || !o->view_src) return nullptr;
    const PathOp *op = record_of<PathOp>(o->view_src, path_fwd_compute, kMagicPathFwd);
    return op && op->o == o ? op : nullptr;
}

// ------------------------------------------------------------------ views

// A ggml [T, H, B] tensor (beta, g; any element strides) as fattn's [B, T, H, 1] view.
fattn_tensor tbh(const ggml_tensor *t, void *data) {
    return fattn_tensor_4d(data, FATTN_F32, t->ne[2], t->ne[0], t->ne[1], 1, (int64_t)t->nb[2] / 4,
                           (int64_t)t->nb[0] / 4, (int64_t)t->nb[1] / 4, 1);
}

// A contiguous ggml [T, H, B] block at data.
fattn_tensor tbh_contiguous(float *data, int64_t T, int64_t H, int64_t B) {
    return fattn_tensor_4d(data, FATTN_F32, B, T, H, 1, T * H, 1, T, 1);
}

// The call's views: q, k, v, w, beta, g of a node (or stand-ins for the graph-building queries).
struct PathViews {
    fattn_tensor q, k, v, w, beta, g;
    std::vector<int32_t> stand_cu;  // stand-in offsets (graph-building queries)
    fattn_path_params p;
};

// Views of the tensors and the params; data stand-ins where a tensor has none (queries), and for
// varlen stand-in offsets of the same num_seqs (one sequence of all tokens) unless node is set,
// when the offsets are the cu_seqlens tensor's data.
void make_views(PathViews *pv, const fattn_path_params &base, ggml_tensor *const src[5], const ggml_tensor *g,
                const ggml_tensor *cu, bool node) {
    pv->q = bshd(src[0], data_or_fake(src[0], 0));
    pv->k = bshd(src[1], data_or_fake(src[1], 1));
    pv->v = bshd(src[2], data_or_fake(src[2], 2));
    pv->w = bshd(src[3], data_or_fake(src[3], 3));
    pv->beta = tbh(src[4], data_or_fake(src[4], 4));
    pv->g = g ? tbh(g, data_or_fake(g, 5)) : fattn_tensor_none();
    pv->p = base;
    if (!cu) return;
    pv->p.num_seqs = cu->ne[0] - 1;
    if (node) {
        pv->p.cu_seqlens = static_cast<const int32_t *>(cu->data);
        return;
    }
    pv->stand_cu.assign(size_t(cu->ne[0]), int32_t(src[0]->ne[1]));
    pv->stand_cu[0] = 0;
    pv->p.cu_seqlens = pv->stand_cu.data();
}

// ------------------------------------------------------------------ input rules (ggml's terms)

// beta, g: F32 [T, H, B] (ne[3] = 1), any strides in whole elements.
fattn_status check_tbh(const char *name, const ggml_tensor *t, int64_t T, int64_t H, int64_t B, const char *heads) {
    if (t->type != GGML_TYPE_F32)
        return fail(FATTN_ERR_DTYPE_MISMATCH, string(name) + ": type is " + ggml_type_name(t->type) + ", must be F32");
    for (int d = 0; d < 4; ++d)
        if (t->nb[d] % 4 != 0)
            return fail(FATTN_ERR_BAD_STRIDE, string(name) + ": nb[" + S(d) + "] is " + S((int64_t)t->nb[d]) +
                                                  " bytes, not a multiple of 4");
    const int64_t want[4] = {T, H, B, 1};
    const char *what[4] = {"tokens (q's ne1)", heads, "batch (q's ne3)", "1"};
    for (int d = 0; d < 4; ++d)
        if (t->ne[d] != want[d])
            return fail(FATTN_ERR_SHAPE_MISMATCH, string(name) + ": ne" + S(d) + " is " + S(t->ne[d]) + ", must be " +
                                                      S(want[d]) + " (" + what[d] + "); layout [T, H, B]");
    return FATTN_OK;
}

fattn_status check_path_inputs(ggml_tensor *const src[5], const fattn_ggml_path_opts &opt) {
    const char *names[5] = {"q", "k", "v", "w", "beta"};
    for (int i = 0; i < 5; ++i)
        if (!src[i]) return fail(FATTN_ERR_NULL_POINTER, string(names[i]) + ": is NULL");
    const ggml_tensor *q = src[0], *k = src[1], *v = src[2], *w = src[3];
    for (int i = 0; i < 4; ++i) {
        if (src[i]->type != GGML_TYPE_F32)
            return fail(FATTN_ERR_DTYPE_MISMATCH, string(names[i]) + ": type is " + ggml_type_name(src[i]->type) +
                                                      "; the PaTH op takes F32 q, k, v, w");
        fattn_status s = check_layout(names[i], src[i]);
        if (s != FATTN_OK) return s;
    }
    const struct {
        const char *a;
        const ggml_tensor *ta;
        const char *b;
        const ggml_tensor *tb;
        int dim;
        const char *what;
    } same[] = {
        {"k", k, "q", q, 0, "head dim K"}, {"k", k, "q", q, 1, "tokens"},   {"k", k, "q", q, 3, "batch"},
        {"v", v, "k", k, 1, "tokens"},     {"v", v, "k", k, 2, "kv heads"}, {"v", v, "k", k, 3, "batch"},
        {"w", w, "k", k, 0, "head dim K"}, {"w", w, "k", k, 1, "tokens"},   {"w", w, "k", k, 2, "kv heads"},
        {"w", w, "k", k, 3, "batch"},
    };
    for (const auto &e : same)
        if (e.ta->ne[e.dim] != e.tb->ne[e.dim])
            return fail(FATTN_ERR_SHAPE_MISMATCH, string(e.a) + ": ne" + S(e.dim) + " (" + e.what + ") is " +
                                                      S(e.ta->ne[e.dim]) + " but " + e.b + " has " + S(e.tb->ne[e.dim]));
    if (k->ne[2] <= 0 || q->ne[2] % k->ne[2] != 0)
        return fail(FATTN_ERR_GQA_HEADS, "k: ne2 (kv heads) is " + S(k->ne[2]) + ", must divide q's ne2 (query heads) " +
                                             S(q->ne[2]));
    fattn_status s = check_tbh("beta", src[4], q->ne[1], k->ne[2], q->ne[3], "kv heads (k's ne2)");
    if (s != FATTN_OK) return s;
    if (opt.g) {
        s = check_tbh("g", opt.g, q->ne[1], q->ne[2], q->ne[3], "query heads (q's ne2)");
        if (s != FATTN_OK) return s;
    }
    if (!std::isfinite(opt.scale)) return fail(FATTN_ERR_BAD_VALUE, "scale: is not finite");
    const int c = raw_enum(opt.check);
    if (c != FATTN_PATH_CHECK_STRICT && c != FATTN_PATH_CHECK_NONE)
        return fail(FATTN_ERR_BAD_VALUE, "check: " + S(c) + " is not FATTN_PATH_CHECK_STRICT or FATTN_PATH_CHECK_NONE");
    if (opt.cu_seqlens) {
        s = check_seqlens("cu_seqlens", opt.cu_seqlens);
        if (s != FATTN_OK) return s;
        if (opt.cu_seqlens->ne[0] - 1 > INT32_MAX)
            return fail(FATTN_ERR_BAD_SEQLENS, "cu_seqlens: " + S(opt.cu_seqlens->ne[0] - 1) +
                                                   " sequences, more than 2^31 - 1");
    }
    return FATTN_OK;
}

fattn_path_params base_params(const fattn_ggml_path_opts &o) {
    fattn_path_params p = fattn_path_params_default();
    p.scale = o.scale;
    std::memcpy(&p.check, &o.check, sizeof p.check);  // bits: check_path_inputs judged the value
    p.check_tol = o.check_tol;
    return p;
}

// ggml-side rules, then fattn_path_supports() of a CPU context at these shapes; *pv (if given)
// keeps the probe's views.
fattn_status path_supports(ggml_tensor *const src[5], const fattn_ggml_path_opts &opt, const CpuCtx &c,
                           PathViews *pv) {
    fattn_status s = check_path_inputs(src, opt);
    if (s != FATTN_OK) return s;
    if (!c.ctx) return fail(FATTN_ERR_OUT_OF_MEMORY, "fattn: a CPU context could not be made");
    try {
        make_views(pv, base_params(opt), src, opt.g, opt.cu_seqlens, false);
    } catch (const std::bad_alloc &) {
        return fail(FATTN_ERR_OUT_OF_MEMORY, "cu_seqlens: no memory for stand-in offsets");
    }
    char why[512];
    s = fattn_path_supports(c.ctx, &pv->p, &pv->q, &pv->k, &pv->v, &pv->w, &pv->beta, &pv->g, why, sizeof why);
    if (s != FATTN_OK)
        return fail(s, string("fattn (views [B, T, H, K] = ggml ne3, ne1, ne2, ne0; beta, g [B, T, H, 1] = "
                              "ggml ne2, ne0, ne1): ") + why);
    return FATTN_OK;
}

// ------------------------------------------------------------------ compute functions

// The g and cu_seqlens srcs of a node whose fixed srcs end before index first.
void extras(const PathOp *op, const ggml_tensor *dst, int first, const ggml_tensor **g, const ggml_tensor **cu) {
    *g = op->has_gate ? dst->src[first] : nullptr;
    *cu = op->has_varlen ? dst->src[first + (op->has_gate ? 1 : 0)] : nullptr;
}

void path_fwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata) {
    PathOp *op = static_cast<PathOp *>(userdata);
    ggml_tensor *const src[5] = {dst->src[0], dst->src[1], dst->src[2], dst->src[3], dst->src[4]};
    const ggml_tensor *q = src[0], *v = src[2], *g = nullptr, *cu = nullptr;
    extras(op, dst, 5, &g, &cu);
    const int64_t V = v->ne[0], T = q->ne[1], Hq = q->ne[2], B = q->ne[3], n_o = V * T * Hq * B;
    float *base = static_cast<float *>(dst->data);
    drive(&op->pool, dst, ith, nth, "fattn_path_fwd", [&](fattn_ctx_t *fc) {
        PathViews pv;
        make_views(&pv, op->base, src, g, cu, true);
        const fattn_tensor to = bshd_contiguous(base, V, T, Hq, B), tl = lse_view(base + n_o, T, Hq, B);
        return fattn_path_fwd(fc, &pv.p, &pv.q, &pv.k, &pv.v, &pv.w, &pv.beta, &pv.g, &to, &tl, nullptr, 0);
    });
}

void path_bwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata) {
    PathOp *op = static_cast<PathOp *>(userdata);
    ggml_tensor *const src[5] = {dst->src[0], dst->src[1], dst->src[2], dst->src[3], dst->src[4]};
    const ggml_tensor *pa = dst->src[5], *dout = dst->src[6], *g = nullptr, *cu = nullptr;
    extras(op, dst, 7, &g, &cu);
    const ggml_tensor *q = src[0], *k = src[1], *v = src[2];
    const int64_t K = q->ne[0], V = v->ne[0], T = q->ne[1], Hq = q->ne[2], H = k->ne[2], B = q->ne[3];
    const int64_t nq = K * T * Hq * B, nk = K * T * H * B, nv = V * T * H * B, nb = T * H * B, n_o = V * T * Hq * B;
    float *pab = static_cast<float *>(pa->data), *d = static_cast<float *>(dst->data);
    drive(&op->pool, dst, ith, nth, "fattn_path_bwd", [&](fattn_ctx_t *fc) {
        PathViews pv;
        make_views(&pv, op->base, src, g, cu, true);
        const fattn_tensor to = bshd_contiguous(pab, V, T, Hq, B), tl = lse_view(pab + n_o, T, Hq, B);
        const fattn_tensor tdo = bshd(dout, dout->data);
        float *at = d;
        const fattn_tensor tdq = bshd_contiguous(at, K, T, Hq, B);
        const fattn_tensor tdk = bshd_contiguous(at += nq, K, T, H, B);
        const fattn_tensor tdv = bshd_contiguous(at += nk, V, T, H, B);
        const fattn_tensor tdw = bshd_contiguous(at += nv, K, T, H, B);
        const fattn_tensor tdb = tbh_contiguous(at += nk, T, H, B);
        const fattn_tensor tdg = g ? tbh_contiguous(at + nb, T, Hq, B) : fattn_tensor_none();
        return fattn_path_bwd(fc, &pv.p, &pv.q, &pv.k, &pv.v, &pv.w, &pv.beta, &pv.g, &to, &tl, &tdo, &tdq, &tdk,
                              &tdv, &tdw, &tdb, &tdg, nullptr, 0);
    });
}

// ------------------------------------------------------------------ backward graph

// ggml_custom_backward_t of pa: grad is pa's gradient ([n_o + n_lse]); its O part is dO.
void path_backward(ggml_context *ctx, ggml_tensor *pa, ggml_tensor *grad, const bool *needs_grad,
                   ggml_tensor **src_grads, void *userdata) {
    const PathOp *fop = static_cast<const PathOp *>(userdata);
    const int gi = fop->has_gate ? 5 : -1;  // g's src index
    bool any = false;
    for (int j = 0; j < 5; ++j) any = any || needs_grad[j];
    if (!any && !(gi >= 0 && needs_grad[gi])) return;  // only cu_seqlens: none
    ggml_tensor *gr = grad;
    if (gr->type != GGML_TYPE_F32) gr = ggml_cast(ctx, gr, GGML_TYPE_F32);
    if (!ggml_is_contiguous(gr)) gr = ggml_cont(ctx, gr);
    const ggml_tensor *o = fop->o;
    const size_t es = sizeof(float);
    ggml_tensor *dout = ggml_view_4d(ctx, gr, o->ne[0], o->ne[1], o->ne[2], o->ne[3], o->ne[0] * es,
                                     o->ne[0] * o->ne[1] * es, o->ne[0] * o->ne[1] * o->ne[2] * es, 0);
    ggml_tensor *q = pa->src[0], *k = pa->src[1], *v = pa->src[2], *w = pa->src[3], *beta = pa->src[4];
    PathOp *bop = new_path_op(ctx, kMagicPathBwd, *fop);
    static_assert(GGML_MAX_SRC >= 9, "the backward node takes up to 9 srcs");
    ggml_tensor *args[GGML_MAX_SRC] = {q, k, v, w, beta, pa, dout};
    int n_args = 7;
    for (int j = 5; j < GGML_MAX_SRC && pa->src[j]; ++j) args[n_args++] = pa->src[j];  // g, cu_seqlens
    const int64_t nq = ggml_nelements(q), nk = ggml_nelements(k), nv = ggml_nelements(v), nb = ggml_nelements(beta);
    const int64_t ng = fop->has_gate ? ggml_nelements(pa->src[5]) : 0;
    ggml_tensor *d = ggml_custom_4d(ctx, GGML_TYPE_F32, nq + 2 * nk + nv + nb + ng, 1, 1, 1, args, n_args,
                                    path_bwd_compute, GGML_N_TASKS_MAX, bop);
    ggml_format_name(d, "fattn_path_back");
    auto part = [&](const ggml_tensor *like, int64_t offset) {
        return ggml_view_4d(ctx, d, like->ne[0], like->ne[1], like->ne[2], like->ne[3], like->ne[0] * es,
                            like->ne[0] * like->ne[1] * es, like->ne[0] * like->ne[1] * like->ne[2] * es, offset * es);
    };
    const int64_t off[6] = {0, nq, nq + nk, nq + nk + nv, nq + 2 * nk + nv, nq + 2 * nk + nv + nb};
    for (int j = 0; j < 5; ++j)
        if (needs_grad[j]) src_grads[j] = part(pa->src[j], off[j]);
    if (gi >= 0 && needs_grad[gi]) src_grads[gi] = part(pa->src[gi], off[5]);
}

}  // namespace

namespace fattn_ggml_detail {
bool is_path_node(const ggml_tensor *t) {
    return record_of<PathOp>(t, path_fwd_compute, kMagicPathFwd) || record_of<PathOp>(t, path_bwd_compute, kMagicPathBwd);
}
}  // namespace fattn_ggml_detail

// ------------------------------------------------------------------ C API

extern "C" {

fattn_ggml_path_opts fattn_ggml_path_opts_default(void) {
    fattn_ggml_path_opts o;
    o.g = nullptr;
    o.scale = 0.0f;
    o.cu_seqlens = nullptr;
    o.check = FATTN_PATH_CHECK_STRICT;
    o.check_tol = 0.0f;
    return o;
}

struct ggml_tensor *fattn_ggml_path_attn(struct ggml_context *ctx, struct ggml_tensor *q, struct ggml_tensor *k,
                                         struct ggml_tensor *v, struct ggml_tensor *w, struct ggml_tensor *beta,
                                         const fattn_ggml_path_opts *opts) {
    if (!ctx) {
        fail(FATTN_ERR_NULL_POINTER, "ctx: is NULL");
        return nullptr;
    }
    const fattn_ggml_path_opts opt = opts ? *opts : fattn_ggml_path_opts_default();
    ggml_tensor *const src[5] = {q, k, v, w, beta};
    {
        const CpuCtx c;
        PathViews pv;
        if (path_supports(src, opt, c, &pv) != FATTN_OK) return nullptr;
    }
    const int64_t V = v->ne[0], T = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t n_o = V * T * Hq * B, n_lse = T * Hq * B;
    if (!ctx_has_room(ctx, 2, size_t(n_o + n_lse) * sizeof(float), record_bytes<PathOp>())) return nullptr;
    PathOp proto{};
    proto.base = base_params(opt);
    proto.has_gate = opt.g != nullptr;
    proto.has_varlen = opt.cu_seqlens != nullptr;
    PathOp *op = new_path_op(ctx, kMagicPathFwd, proto);
    ggml_tensor *args[7] = {q, k, v, w, beta};
    int n_args = 5;
    if (opt.g) args[n_args++] = opt.g;
    if (opt.cu_seqlens) args[n_args++] = opt.cu_seqlens;
    ggml_tensor *pa = ggml_custom_4d(ctx, GGML_TYPE_F32, n_o + n_lse, 1, 1, 1, args, n_args, path_fwd_compute,
                                     GGML_N_TASKS_MAX, op);
    ggml_format_name(pa, "fattn_path");
    ggml_custom_set_backward(pa, path_backward, op);
    const size_t es = sizeof(float);
    ggml_tensor *o = ggml_view_4d(ctx, pa, V, T, Hq, B, V * es, V * T * es, V * T * Hq * es, 0);
    ggml_format_name(o, "fattn_path.o");
    op->o = o;
    return o;
}

struct ggml_tensor *fattn_ggml_path_lse(struct ggml_context *ctx, struct ggml_tensor *o) {
    const PathOp *op = path_fwd_of_o(o);
    if (!ctx || !op) {
        fail(ctx ? FATTN_ERR_BAD_VALUE : FATTN_ERR_NULL_POINTER,
             ctx ? "o: is not a tensor returned by fattn_ggml_path_attn" : "ctx: is NULL");
        return nullptr;
    }
    return lse_part(ctx, o, "fattn_path.lse");
}

int fattn_ggml_is_path(const struct ggml_tensor *t) { return path_fwd_of_o(t) ? 1 : 0; }

fattn_status fattn_ggml_path_supports(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                      const struct ggml_tensor *v, const struct ggml_tensor *w,
                                      const struct ggml_tensor *beta, const fattn_ggml_path_opts *opts, char *why,
                                      size_t why_len) {
    const fattn_ggml_path_opts opt = opts ? *opts : fattn_ggml_path_opts_default();
    ggml_tensor *const src[5] = {const_cast<ggml_tensor *>(q), const_cast<ggml_tensor *>(k), const_cast<ggml_tensor *>(v),
                                 const_cast<ggml_tensor *>(w), const_cast<ggml_tensor *>(beta)};
    const CpuCtx c;
    PathViews pv;
    const fattn_status s = path_supports(src, opt, c, &pv);
    copy_why(why, why_len, s == FATTN_OK ? "" : last_error().c_str());
    return s;
}

fattn_status fattn_ggml_path_memory(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                    const struct ggml_tensor *v, const struct ggml_tensor *w,
                                    const struct ggml_tensor *beta, const fattn_ggml_path_opts *opts,
                                    int n_threads, fattn_path_memory_info *out) {
    if (!out) return fail(FATTN_ERR_NULL_POINTER, "out: is NULL");
    if (n_threads < 1) return fail(FATTN_ERR_BAD_VALUE, "n_threads: " + S(n_threads) + ", must be >= 1");
    const fattn_ggml_path_opts opt = opts ? *opts : fattn_ggml_path_opts_default();
    ggml_tensor *const src[5] = {const_cast<ggml_tensor *>(q), const_cast<ggml_tensor *>(k), const_cast<ggml_tensor *>(v),
                                 const_cast<ggml_tensor *>(w), const_cast<ggml_tensor *>(beta)};
    const CpuCtx c(n_threads);
    PathViews pv;
    fattn_status s = path_supports(src, opt, c, &pv);
    if (s != FATTN_OK) return s;
    s = fattn_path_memory(c.ctx, &pv.p, &pv.q, &pv.k, &pv.v, &pv.w, &pv.beta, &pv.g, out);
    if (s != FATTN_OK) return fail(s, string("fattn: ") + fattn_ctx_last_error(c.ctx));
    return FATTN_OK;
}

}  // extern "C"
