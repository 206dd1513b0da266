// path_api.cpp — the C entry points of PaTH attention: params defaults, validation (the one
// support surface: every entry goes through validate(), which ends in the backend's selection
// function), workspace and memory model, and fwd / bwd through the backend seam
// (path_dispatch.h): the context's backend runs, never another. Every C++ exception is caught
// here (std::bad_alloc -> OUT_OF_MEMORY, else INTERNAL).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/context.h"
#include "core/enum_raw.h"
#include "core/path_dispatch.h"
#include "core/path_params.h"
#include "core/size_math.h"
#include "core/view_check.h"

namespace fattn {
namespace {

using std::string;
string S(int64_t x) { return std::to_string(x); }

enum class PathOp { QUERY, FWD, BWD };

struct PathViews {
    const fattn_tensor *q = nullptr, *k = nullptr, *v = nullptr, *w = nullptr, *beta = nullptr,
                       *g = nullptr, *o = nullptr, *lse = nullptr, *dout = nullptr, *dq = nullptr,
                       *dk = nullptr, *dv = nullptr, *dw = nullptr, *dbeta = nullptr, *dg = nullptr;
};

bool given(const fattn_tensor *t) { return t && t->data; }

struct Fail {
    fattn_status s;
    string why;
};

#define PATH_FAIL_IF(cond, status, msg)      \
    do {                                     \
        if (cond) return Fail{status, msg};  \
    } while (0)

// A shared view check (view_check.h): its status and message become the Fail.
#define PATH_CHECK(expr)                                  \
    do {                                                  \
        string why_;                                      \
        const fattn_status s_ = (expr);                   \
        if (s_ != FATTN_OK) return Fail{s_, why_};        \
    } while (0)

struct Resolved {
    PathBwdParams p{};
    bool empty = false;  // nothing to compute (a dim is 0)
};

// The rules and their order are the softmax family's (attn_validate.cpp), through the same
// shared checks, so a view broken one way gets the same status and message in both families:
// null pointers, enum values, dtypes, shapes, GQA heads, head dims, strides and sizes, data (NULL,
// alignment), overlap, scalars, backend, cu_seqlens (overlap, then contents), selection.
Fail validate(const fattn_ctx *ctx, const fattn_path_params *pp, PathOp op, const PathViews &vw,
              Resolved *out) {
    PATH_FAIL_IF(!pp, FATTN_ERR_NULL_POINTER, "params: pointer is NULL");
    const bool fwd = op == PathOp::FWD, bwd = op == PathOp::BWD;
    // g is optional: "given" when it has data, or (size queries) describes a non-empty shape.
    const fattn_tensor *g = vw.g;
    const bool has_g = g && (g->data || (op == PathOp::QUERY &&
                                         (g->ne[0] | g->ne[1] | g->ne[2] | g->ne[3]) != 0));
    vc::View views[16];
    int n = 0;
    views[n++] = {"q", vw.q, false};
    views[n++] = {"k", vw.k, false};
    views[n++] = {"v", vw.v, false};
    views[n++] = {"w", vw.w, false};
    views[n++] = {"beta", vw.beta, false};
    if (has_g) views[n++] = {"g", g, false};
    if (op != PathOp::QUERY) {
        views[n++] = {"o", vw.o, fwd};
        views[n++] = {"lse", vw.lse, fwd, 2};
    }
    if (bwd) {
        views[n++] = {"dout", vw.dout, false};
        views[n++] = {"dq", vw.dq, true};
        views[n++] = {"dk", vw.dk, true};
        views[n++] = {"dv", vw.dv, true};
        views[n++] = {"dw", vw.dw, true};
        views[n++] = {"dbeta", vw.dbeta, true};
        PATH_FAIL_IF(has_g && !given(vw.dg), FATTN_ERR_NULL_POINTER, "dg: g was given, so dg is required");
        PATH_FAIL_IF(!has_g && given(vw.dg), FATTN_ERR_BAD_VALUE, "dg: given but g is not");
        if (has_g) views[n++] = {"dg", vw.dg, true};
    }
    for (int i = 0; i < n; ++i)
        PATH_FAIL_IF(!views[i].t, FATTN_ERR_NULL_POINTER, string(views[i].name) + ": tensor pointer is NULL");
    const fattn_tensor &q = *vw.q, &k = *vw.k, &v = *vw.v;

    // ---- enum values (read raw: loading an out-of-range value as the enum is undefined) ----
    for (int i = 0; i < n; ++i) PATH_CHECK(vc::check_dtype_valid(views[i], &why_));
    const int64_t hist_raw = raw_enum(pp->history), check_raw = raw_enum(pp->check);
    PATH_FAIL_IF(hist_raw != FATTN_PATH_HISTORY_PACKED && hist_raw != FATTN_PATH_HISTORY_RECTANGULAR,
                 FATTN_ERR_BAD_VALUE, "history: " + S(hist_raw) + " is not a fattn_path_history");
    PATH_FAIL_IF(check_raw != FATTN_PATH_CHECK_STRICT && check_raw != FATTN_PATH_CHECK_NONE,
                 FATTN_ERR_BAD_VALUE, "check: " + S(check_raw) + " is not a fattn_path_check");

    // ---- dtypes: q, k, v, o and their gradients share q's; the rest are f32 ----
    for (int i = 0; i < n; ++i) {
        const string nm = views[i].name;
        const bool qs = nm == "q" || nm == "k" || nm == "v" || nm == "o" || nm == "dout" ||
                        nm == "dq" || nm == "dk" || nm == "dv";
        PATH_CHECK(qs ? vc::check_dtype_is(views[i], q.dtype, "q", &why_)
                      : vc::check_dtype_is(views[i], FATTN_F32, nullptr, &why_));
    }

    // ---- shapes ----
    const int64_t B = q.ne[0], T = q.ne[1], HQ = q.ne[2], K = q.ne[3];
    const int64_t H = k.ne[2], V = v.ne[3];
    {
        const vc::Want free{0, nullptr};
        const vc::Want wq[4] = {free, free, free, free};
        const vc::Want wk[4] = {{B, "q"}, {T, "q"}, free, {K, "q"}};
        const vc::Want wv[4] = {{B, "q"}, {T, "q"}, {H, "k"}, free};
        const vc::Want ww[4] = {{B, "q"}, {T, "q"}, {H, "k"}, {K, "q"}};
        const vc::Want wb[4] = {{B, "q"}, {T, "q"}, {H, "k"}, {1, ""}};
        const vc::Want wg[4] = {{B, "q"}, {T, "q"}, {HQ, "q"}, {1, ""}};
        const vc::Want wo[4] = {{B, "q"}, {T, "q"}, {HQ, "q"}, {V, "v"}};
        const vc::Want wl[4] = {{B, "q"}, {HQ, "q"}, {T, "q"}, {1, ""}};
        const vc::Want wdq[4] = {{B, "q"}, {T, "q"}, {HQ, "q"}, {K, "q"}};
        for (int i = 0; i < n; ++i) {
            const string nm = views[i].name;
            const vc::Want(&w)[4] = nm == "q" ? wq : nm == "k" ? wk : nm == "v" || nm == "dv" ? wv
                                  : nm == "dk" || nm == "w" || nm == "dw" ? ww
                                  : nm == "beta" || nm == "dbeta" ? wb : nm == "g" || nm == "dg" ? wg
                                  : nm == "o" || nm == "dout" ? wo : nm == "lse" ? wl : wdq;
            PATH_CHECK(vc::check_shape(views[i], w, &why_));
        }
    }

    // ---- GQA heads, head dims ----
    PATH_FAIL_IF(H == 0 && HQ > 0, FATTN_ERR_GQA_HEADS, "k: ne[2] (heads) is 0 but q has " + S(HQ) + " heads");
    PATH_FAIL_IF(H > 0 && HQ % H != 0, FATTN_ERR_GQA_HEADS,
                 "q: ne[2] (heads) is " + S(HQ) + ", not a multiple of k's " + S(H) +
                     " heads (Hq % Hkv must be 0)");
    PATH_FAIL_IF(K == 0, FATTN_ERR_BAD_HEAD_DIM, "q: ne[3] (head dim) is 0, must be >= 1");
    PATH_FAIL_IF(V == 0, FATTN_ERR_BAD_HEAD_DIM, "v: ne[3] (head dim) is 0, must be >= 1");

    // ---- strides and sizes (also of the outputs a size query does not see) ----
    for (int i = 0; i < n; ++i) PATH_CHECK(vc::check_strides(views[i], &why_));
    PATH_CHECK(vc::check_implied_size("o: [B, T, Hq, V] =", {B, T, HQ, V}, fattn_dtype_size(q.dtype), &why_));
    PATH_CHECK(vc::check_implied_size("lse: [B, Hq, T] =", {B, HQ, T}, 4, &why_));

    // ---- data: NULL, alignment (size queries may describe shapes without memory) ----
    if (op != PathOp::QUERY)
        for (int i = 0; i < n; ++i) PATH_CHECK(vc::check_data(views[i], &why_));

    // ---- overlap: outputs pairwise, and every output against every input ----
    if (op != PathOp::QUERY) PATH_CHECK(vc::check_overlaps(views, n, &why_));

    // ---- scalars ----
    PATH_FAIL_IF(!std::isfinite(pp->scale), FATTN_ERR_BAD_VALUE,
                 "scale: is " + std::to_string(pp->scale) + ", must be finite (0 = 1/sqrt(K))");
    PATH_FAIL_IF(!(pp->check_tol >= 0) || !std::isfinite(pp->check_tol), FATTN_ERR_BAD_VALUE,
                 "check_tol: must be finite and >= 0");
    // ---- varlen ----
    int64_t nseq = B;
    if (pp->cu_seqlens) {
        PATH_FAIL_IF(pp->num_seqs < 1 || pp->num_seqs > INT32_MAX, FATTN_ERR_BAD_SEQLENS,
                     "num_seqs: is " + S(pp->num_seqs) + ", must be >= 1 (and < 2^31) with cu_seqlens");
        PATH_FAIL_IF(B != 1, FATTN_ERR_BAD_SEQLENS,
                     "q: ne[0] (batch) is " + S(B) + " but varlen (cu_seqlens) requires B = 1");
        PATH_FAIL_IF(T > INT32_MAX, FATTN_ERR_BAD_SEQLENS,
                     "cu_seqlens: int32 offsets cannot index " + S(T) + " tokens");
        // The kernels read cu_seqlens while they write the outputs: no byte may be shared.
        PATH_CHECK(vc::check_int32_array("cu_seqlens", pp->cu_seqlens, pp->num_seqs + 1, views,
                                         op == PathOp::QUERY ? 0 : n, &why_));
        int64_t max_len = 0;
        PATH_CHECK(vc::check_cu_seqlens("cu_seqlens", pp->cu_seqlens, pp->num_seqs, T, "q", &max_len, &why_));
        nseq = pp->num_seqs;
    }

    PathBwdParams &p = out->p;
    p = PathBwdParams{};
    p.B = B, p.T = T, p.hq = HQ, p.h = H, p.dk = K, p.dv = V, p.dtype = q.dtype;
    p.scale = pp->scale != 0.f ? pp->scale : float(1.0 / std::sqrt(double(K)));
    p.history = pp->history;
    p.q = q.data, p.q_sb = vc::step(q, 0), p.q_ss = vc::step(q, 1), p.q_sh = vc::step(q, 2);
    p.k = k.data, p.k_sb = vc::step(k, 0), p.k_ss = vc::step(k, 1), p.k_sh = vc::step(k, 2);
    p.v = v.data, p.v_sb = vc::step(v, 0), p.v_ss = vc::step(v, 1), p.v_sh = vc::step(v, 2);
    p.w = static_cast<const float *>(vw.w->data), p.w_sb = vc::step(*vw.w, 0), p.w_ss = vc::step(*vw.w, 1), p.w_sh = vc::step(*vw.w, 2);
    p.beta = static_cast<const float *>(vw.beta->data);
    p.beta_sb = vc::step(*vw.beta, 0), p.beta_ss = vc::step(*vw.beta, 1), p.beta_sh = vc::step(*vw.beta, 2);
    if (has_g)
        p.g = static_cast<const float *>(g->data), p.g_sb = vc::step(*g, 0), p.g_ss = vc::step(*g, 1), p.g_sh = vc::step(*g, 2);
    if (vw.o) p.o = vw.o->data, p.o_sb = vc::step(*vw.o, 0), p.o_ss = vc::step(*vw.o, 1), p.o_sh = vc::step(*vw.o, 2);
    if (vw.lse) p.lse = static_cast<float *>(vw.lse->data), p.lse_sb = vc::step(*vw.lse, 0), p.lse_sh = vc::step(*vw.lse, 1);
    if (op == PathOp::BWD) {
        p.dout = vw.dout->data, p.do_sb = vc::step(*vw.dout, 0), p.do_ss = vc::step(*vw.dout, 1), p.do_sh = vc::step(*vw.dout, 2);
        p.dq = vw.dq->data, p.dq_sb = vc::step(*vw.dq, 0), p.dq_ss = vc::step(*vw.dq, 1), p.dq_sh = vc::step(*vw.dq, 2);
        p.dk_ = vw.dk->data, p.dk_sb = vc::step(*vw.dk, 0), p.dk_ss = vc::step(*vw.dk, 1), p.dk_sh = vc::step(*vw.dk, 2);
        p.dv_ = vw.dv->data, p.dv_sb = vc::step(*vw.dv, 0), p.dv_ss = vc::step(*vw.dv, 1), p.dv_sh = vc::step(*vw.dv, 2);
        p.dw = static_cast<float *>(vw.dw->data), p.dw_sb = vc::step(*vw.dw, 0), p.dw_ss = vc::step(*vw.dw, 1), p.dw_sh = vc::step(*vw.dw, 2);
        p.dbeta = static_cast<float *>(vw.dbeta->data);
        p.dbeta_sb = vc::step(*vw.dbeta, 0), p.dbeta_ss = vc::step(*vw.dbeta, 1), p.dbeta_sh = vc::step(*vw.dbeta, 2);
        if (has_g)
            p.dg = static_cast<float *>(vw.dg->data), p.dg_sb = vc::step(*vw.dg, 0), p.dg_ss = vc::step(*vw.dg, 1), p.dg_sh = vc::step(*vw.dg, 2);
    }
    p.cu_seqlens = pp->cu_seqlens;
    p.num_seqs = nseq;
    p.nthreads = ctx->nthreads;
    p.check = pp->check;
    p.check_tol = pp->check_tol > 0 ? pp->check_tol : 1e-3f;
    out->empty = B == 0 || T == 0 || HQ == 0;
    if (!out->empty) {
        string why;
        fattn_status s = path_backend_select(ctx, p, &why);
        PATH_FAIL_IF(s != FATTN_OK, s, why);
    }
    return {FATTN_OK, ""};
}

fattn_status fail(fattn_ctx *ctx, const Fail &f) {
    return f.s == FATTN_OK ? FATTN_OK : set_error(ctx, f.s, f.why);
}

template <class Fn>
fattn_status guarded(fattn_ctx *ctx, Fn &&fn) {
    if (!ctx) return set_error(nullptr, FATTN_ERR_NULL_POINTER, "ctx: pointer is NULL");
    try {
        return fn();
    } catch (const std::bad_alloc &) {
        return set_error(ctx, FATTN_ERR_OUT_OF_MEMORY, "PaTH: host allocation failed");
    } catch (...) {
        return set_error(ctx, FATTN_ERR_INTERNAL, "PaTH: internal error");
    }
}

PathViews inputs(const fattn_tensor *q, const fattn_tensor *k, const fattn_tensor *v,
                 const fattn_tensor *w, const fattn_tensor *beta, const fattn_tensor *g) {
    PathViews vw;
    vw.q = q, vw.k = k, vw.v = v, vw.w = w, vw.beta = beta, vw.g = g;
    return vw;
}

// The size queries' start: out given, then validate (QUERY).
fattn_status query(fattn_ctx *ctx, const void *out, const fattn_path_params *pp, const PathViews &vw,
                   Resolved *r) {
    if (!out) return set_error(ctx, FATTN_ERR_NULL_POINTER, "out: pointer is NULL");
    return fail(ctx, validate(ctx, pp, PathOp::QUERY, vw, r));
}

// A run: validate, the workspace (the caller's, checked for size, or the context allocator's),
// then the backend's fwd or bwd.
fattn_status run(fattn_ctx *ctx, const fattn_path_params *pp, PathOp op, const PathViews &vw, void *ws,
                 size_t ws_bytes) {
    Resolved r;
    Fail f = validate(ctx, pp, op, vw, &r);
    if (f.s != FATTN_OK) return fail(ctx, f);
    if (r.empty) return FATTN_OK;
    const fattn_dir dir = op == PathOp::FWD ? FATTN_DIR_FWD : FATTN_DIR_BWD;
    const size_t need = path_backend_workspace(ctx, r.p, dir, nullptr);
    void *mine = nullptr;
    if (ws) {
        if (ws_bytes < need)
            return set_error(ctx, FATTN_ERR_WORKSPACE_TOO_SMALL,
                             "workspace: " + std::to_string(ws_bytes) + " bytes given, " +
                                 std::to_string(need) + " needed");
    } else {
        ws = mine = ctx_alloc(ctx, need ? need : 64);
        if (!mine) return set_error(ctx, FATTN_ERR_OUT_OF_MEMORY, "workspace: allocation of " + std::to_string(need) + " bytes failed");
    }
    string err;
    fattn_status s;
    try {
        s = dir == FATTN_DIR_FWD ? path_backend_fwd(ctx, r.p, ws, &err) : path_backend_bwd(ctx, r.p, ws, &err);
    } catch (...) {
        ctx_free(ctx, mine);
        throw;
    }
    ctx_free(ctx, mine);
    return s == FATTN_OK ? s : set_error(ctx, s, err);
}

// Bytes of the [B, T, H, D] extent a view describes (validated: fits in 2^63).
uint64_t dense_bytes(const fattn_tensor *t) {
    if (!t) return 0;
    return sat_prod({t->ne[0], t->ne[1], t->ne[2], t->ne[3], int64_t(fattn_dtype_size(t->dtype))});
}

}  // namespace
}  // namespace fattn

using namespace fattn;

extern "C" {

fattn_path_params fattn_path_params_default(void) {
    fattn_path_params p;
    std::memset(&p, 0, sizeof p);
    p.history = FATTN_PATH_HISTORY_PACKED;
    p.check = FATTN_PATH_CHECK_STRICT;
    return p;
}

fattn_status fattn_path_supports(fattn_ctx_t *ctx, const fattn_path_params *p, const fattn_tensor *q,
                                 const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *w,
                                 const fattn_tensor *beta, const fattn_tensor *g, char *why,
                                 size_t why_len) {
    if (why && why_len) why[0] = 0;
    return guarded(ctx, [&] {
        Resolved r;
        Fail f = validate(ctx, p, PathOp::QUERY, inputs(q, k, v, w, beta, g), &r);
        if (f.s != FATTN_OK && why && why_len) {
            std::strncpy(why, f.why.c_str(), why_len - 1);
            why[why_len - 1] = 0;
        }
        return fail(ctx, f);
    });
}

fattn_status fattn_path_workspace_size(fattn_ctx_t *ctx, const fattn_path_params *p,
                                       const fattn_tensor *q, const fattn_tensor *k,
                                       const fattn_tensor *v, const fattn_tensor *w,
                                       const fattn_tensor *beta, const fattn_tensor *g, fattn_dir dir,
                                       fattn_path_workspace_info *out) {
    return guarded(ctx, [&] {
        Resolved r;
        fattn_status s = query(ctx, out, p, inputs(q, k, v, w, beta, g), &r);
        if (s != FATTN_OK) return s;
        const int64_t rdir = raw_enum(dir);  // a C caller may pass any int
        if (rdir != FATTN_DIR_FWD && rdir != FATTN_DIR_BWD)
            return set_error(ctx, FATTN_ERR_BAD_VALUE, "dir: " + S(rdir) + " is not a fattn_dir");
        *out = {0, 0};
        if (r.empty) return FATTN_OK;
        size_t hist = 0;
        out->total_bytes = path_backend_workspace(ctx, r.p, dir, &hist);
        out->history_bytes = hist;
        return FATTN_OK;
    });
}

fattn_status fattn_path_fwd(fattn_ctx_t *ctx, const fattn_path_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *w,
                            const fattn_tensor *beta, const fattn_tensor *g, const fattn_tensor *o,
                            const fattn_tensor *lse, void *workspace, size_t workspace_bytes) {
    return guarded(ctx, [&] {
        PathViews vw = inputs(q, k, v, w, beta, g);
        vw.o = o, vw.lse = lse;
        return run(ctx, p, PathOp::FWD, vw, workspace, workspace_bytes);
    });
}

fattn_status fattn_path_bwd(fattn_ctx_t *ctx, const fattn_path_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *w,
                            const fattn_tensor *beta, const fattn_tensor *g, const fattn_tensor *o,
                            const fattn_tensor *lse, const fattn_tensor *dout, const fattn_tensor *dq,
                            const fattn_tensor *dk, const fattn_tensor *dv, const fattn_tensor *dw,
                            const fattn_tensor *dbeta, const fattn_tensor *dg, void *workspace,
                            size_t workspace_bytes) {
    return guarded(ctx, [&] {
        PathViews vw = inputs(q, k, v, w, beta, g);
        vw.o = o, vw.lse = lse, vw.dout = dout, vw.dq = dq, vw.dk = dk, vw.dv = dv, vw.dw = dw;
        vw.dbeta = dbeta, vw.dg = dg;
        return run(ctx, p, PathOp::BWD, vw, workspace, workspace_bytes);
    });
}

fattn_status fattn_path_memory(fattn_ctx_t *ctx, const fattn_path_params *p, const fattn_tensor *q,
                               const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *w,
                               const fattn_tensor *beta, const fattn_tensor *g,
                               fattn_path_memory_info *out) {
    return guarded(ctx, [&] {
        Resolved r;
        fattn_status s = query(ctx, out, p, inputs(q, k, v, w, beta, g), &r);
        if (s != FATTN_OK) return s;
        std::memset(out, 0, sizeof *out);
        const bool has_g = r.p.g != nullptr || (g && (g->ne[0] | g->ne[1] | g->ne[2] | g->ne[3]) != 0);
        const fattn_tensor none = fattn_tensor_none();
        const fattn_tensor *gg = has_g ? g : &none;
        // Sums saturate (size_math.h): the model may over-predict, never wrap below the truth.
        const uint64_t o_bytes = sat_prod({q->ne[0], q->ne[1], q->ne[2], v->ne[3],
                                           int64_t(fattn_dtype_size(q->dtype))});
        const uint64_t lse_bytes = sat_prod({q->ne[0], q->ne[1], q->ne[2], 4});
        uint64_t in = 0;
        for (const fattn_tensor *t : {q, k, v, w, beta, gg}) in = sat_add(in, dense_bytes(t));
        out->inputs_bytes = in;
        out->saved_bytes = sat_add(o_bytes, lse_bytes);
        out->grads_bytes = sat_add(o_bytes /* dout */, in);  // dq, dk, dv, dw, dbeta, dg: like inputs
        if (!r.empty) {
            PathFwdParams pp = r.p;
            // The workspace (fattn_path_workspace_size: the backend's buffers, the CPU's per-thread
            // scratch slots, alignment slack) plus the small host heap a CPU call takes itself.
            const uint64_t host = path_backend_host_bytes(ctx, pp);
            out->fwd_workspace_bytes = sat_add(path_backend_workspace(ctx, pp, FATTN_DIR_FWD, nullptr), host);
            out->bwd_workspace_bytes = sat_add(path_backend_workspace(ctx, pp, FATTN_DIR_BWD, nullptr), host);
            size_t h = 0;
            pp.history = FATTN_PATH_HISTORY_PACKED;
            path_backend_workspace(ctx, pp, FATTN_DIR_BWD, &h);
            out->history_packed_bytes = h;
            pp.history = FATTN_PATH_HISTORY_RECTANGULAR;
            path_backend_workspace(ctx, pp, FATTN_DIR_BWD, &h);
            out->history_rectangular_bytes = h;
        }
        out->fwd_peak_bytes = sat_add(sat_add(out->inputs_bytes, out->saved_bytes), out->fwd_workspace_bytes);
        out->bwd_peak_bytes = sat_add(sat_add(sat_add(out->inputs_bytes, out->saved_bytes), out->grads_bytes),
                                      out->bwd_workspace_bytes);
        return FATTN_OK;
    });
}

}  // extern "C"
