// path_api.cpp — the C entry points of PaTH attention: params defaults, validation (the one
// support surface: every entry goes through path_validate), workspace and memory model, and
// fwd / bwd dispatch to the CPU backend. A CUDA context is FATTN_ERR_UNSUPPORTED (never a CPU run).
// Every C++ exception is caught here (std::bad_alloc -> OUT_OF_MEMORY, else INTERNAL).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/attn_validate.h"
#include "core/context.h"
#include "core/path_params.h"
#include "cpu/path/path_cpu.h"

namespace fattn {
namespace {

static_assert(sizeof(fattn_path_history) == sizeof(int) && sizeof(fattn_path_check) == sizeof(int),
              "enums are read as int");

using std::string;
string S(int64_t x) { return std::to_string(x); }

enum class PathOp { QUERY, FWD, BWD };

struct PathViews {
    const fattn_tensor *q = nullptr, *k = nullptr, *v = nullptr, *w = nullptr, *beta = nullptr,
                       *g = nullptr, *o = nullptr, *lse = nullptr, *dout = nullptr, *dq = nullptr,
                       *dk = nullptr, *dv = nullptr, *dw = nullptr, *dbeta = nullptr, *dg = nullptr;
};

bool given(const fattn_tensor *t) { return t && t->data; }
bool valid_dtype(fattn_dtype t) { return t == FATTN_F32 || t == FATTN_F16 || t == FATTN_BF16; }

struct Fail {
    fattn_status s;
    string why;
};

#define PATH_FAIL_IF(cond, status, msg)      \
    do {                                     \
        if (cond) return Fail{status, msg};  \
    } while (0)

// One view against its expected dims, dtype, and stride rules.
Fail check_view(const char *name, const fattn_tensor *t, const int64_t (&want)[4], fattn_dtype dt,
                bool output, bool need_data, int inner_dim) {
    PATH_FAIL_IF(!t, FATTN_ERR_NULL_POINTER, string(name) + ": tensor pointer is NULL");
    PATH_FAIL_IF(need_data && !t->data, FATTN_ERR_NULL_POINTER, string(name) + ": data is NULL");
    PATH_FAIL_IF(t->dtype != dt, FATTN_ERR_DTYPE_MISMATCH,
                 string(name) + ": dtype is " + fattn_dtype_name(t->dtype) + " but must be " +
                     fattn_dtype_name(dt));
    static const char *dims[4] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};
    for (int i = 0; i < 4; ++i)
        PATH_FAIL_IF(t->ne[i] != want[i], FATTN_ERR_SHAPE_MISMATCH,
                     string(name) + ": " + dims[i] + " is " + S(t->ne[i]) + " but must be " + S(want[i]));
    for (int i = 0; i < 4; ++i) {
        PATH_FAIL_IF(t->nb[i] < 0, FATTN_ERR_BAD_STRIDE, string(name) + ": nb[" + S(i) + "] is negative");
        PATH_FAIL_IF(output && t->nb[i] == 0 && t->ne[i] > 1, FATTN_ERR_BAD_STRIDE,
                     string(name) + ": nb[" + S(i) + "] is 0 (an output cannot broadcast)");
    }
    PATH_FAIL_IF(t->nb[inner_dim] != 1 && t->ne[inner_dim] > 1, FATTN_ERR_BAD_STRIDE,
                 string(name) + ": nb[" + S(inner_dim) + "] (innermost) must be 1, is " + S(t->nb[inner_dim]));
    return {FATTN_OK, ""};
}

// Byte extent [lo, hi) of a view's data (every element it can address); empty when a dim is 0.
// Strides are validated non-negative before this is used.
bool byte_span(const fattn_tensor *t, unsigned __int128 *lo, unsigned __int128 *hi) {
    if (!t || !t->data) return false;
    unsigned __int128 last = 0;
    for (int i = 0; i < 4; ++i) {
        if (t->ne[i] <= 0) return false;
        last += (unsigned __int128)(t->ne[i] - 1) * (unsigned __int128)t->nb[i];
    }
    const unsigned __int128 es = fattn_dtype_size(t->dtype);
    *lo = (unsigned __int128)reinterpret_cast<uintptr_t>(t->data);
    *hi = *lo + (last + 1) * es;
    return true;
}

// FATTN_ERR_OVERLAP (fattn.h: outputs may share no memory with each other or with an input):
// every output against every other output and every input, with the softmax family's exact test
// (tensors_overlap, attn_validate.h): disjoint interleaved views of one fused buffer are legal.
Fail check_overlap(const fattn_tensor *const *outs, const char *const *onames, int nout,
                   const fattn_tensor *const *ins, const char *const *inames, int nin) {
    for (int i = 0; i < nout; ++i) {
        unsigned __int128 a0, a1, b0, b1;
        if (!byte_span(outs[i], &a0, &a1)) continue;
        for (int j = 0; j < nout + nin; ++j) {
            if (j < nout && j <= i) continue;  // each output pair once
            const fattn_tensor *o = j < nout ? outs[j] : ins[j - nout];
            if (!byte_span(o, &b0, &b1)) continue;
            if (a1 <= b0 || b1 <= a0 || !tensors_overlap(*outs[i], *o)) continue;
            return Fail{FATTN_ERR_OVERLAP, string(onames[i]) + ": overlaps " +
                                               (j < nout ? "output " : "input ") +
                                               (j < nout ? onames[j] : inames[j - nout])};
        }
    }
    return {FATTN_OK, ""};
}

struct Resolved {
    PathBwdParams p{};
    bool empty = false;  // nothing to compute (a dim is 0)
};

Fail validate(const fattn_ctx *ctx, const fattn_path_params *pp, PathOp op, const PathViews &vw,
              Resolved *out) {
    PATH_FAIL_IF(!pp, FATTN_ERR_NULL_POINTER, "params: pointer is NULL");
    PATH_FAIL_IF(!vw.q || !vw.k || !vw.v || !vw.w || !vw.beta, FATTN_ERR_NULL_POINTER,
                 string(!vw.q ? "q" : !vw.k ? "k" : !vw.v ? "v" : !vw.w ? "w" : "beta") +
                     ": tensor pointer is NULL");
    const fattn_tensor &q = *vw.q, &k = *vw.k, &v = *vw.v;
    PATH_FAIL_IF(!valid_dtype(q.dtype), FATTN_ERR_DTYPE_MISMATCH, "q: unknown dtype");
    const fattn_dtype dt = q.dtype;
    const int64_t B = q.ne[0], T = q.ne[1], HQ = q.ne[2], K = q.ne[3];
    const int64_t H = k.ne[2], V = v.ne[3];
    for (int i = 0; i < 4; ++i)
        PATH_FAIL_IF(q.ne[i] < 0, FATTN_ERR_SHAPE_MISMATCH, "q: ne[" + S(i) + "] is negative");
    PATH_FAIL_IF(K <= 0, FATTN_ERR_BAD_HEAD_DIM, "q: ne[3] (head dim K) is " + S(K));
    PATH_FAIL_IF(V <= 0, FATTN_ERR_BAD_HEAD_DIM, "v: ne[3] (head dim V) is " + S(V));
    PATH_FAIL_IF(H <= 0 && HQ > 0, FATTN_ERR_SHAPE_MISMATCH, "k: ne[2] (kv heads) is " + S(H));
    PATH_FAIL_IF(H > 0 && HQ % H != 0, FATTN_ERR_GQA_HEADS,
                 "q: ne[2] (query heads) is " + S(HQ) + ", not a multiple of k's " + S(H) + " kv heads");
    const bool data = op != PathOp::QUERY;
    const bool has_g = vw.g && (vw.g->data || (op == PathOp::QUERY && vw.g->ne[0] + vw.g->ne[1] > 0));
    Fail f{FATTN_OK, ""};
#define CHECK(expr)                          \
    do {                                     \
        f = (expr);                          \
        if (f.s != FATTN_OK) return f;       \
    } while (0)
    CHECK(check_view("q", vw.q, {B, T, HQ, K}, dt, false, data, 3));
    CHECK(check_view("k", vw.k, {B, T, H, K}, dt, false, data, 3));
    CHECK(check_view("v", vw.v, {B, T, H, V}, dt, false, data, 3));
    CHECK(check_view("w", vw.w, {B, T, H, K}, FATTN_F32, false, data, 3));
    CHECK(check_view("beta", vw.beta, {B, T, H, 1}, FATTN_F32, false, data, 3));
    if (has_g) CHECK(check_view("g", vw.g, {B, T, HQ, 1}, FATTN_F32, false, data, 3));
    if (op != PathOp::QUERY) {
        CHECK(check_view("o", vw.o, {B, T, HQ, V}, dt, op == PathOp::FWD, true, 3));
        CHECK(check_view("lse", vw.lse, {B, HQ, T, 1}, FATTN_F32, op == PathOp::FWD, true, 2));
    }
    if (op == PathOp::BWD) {
        CHECK(check_view("dout", vw.dout, {B, T, HQ, V}, dt, false, true, 3));
        CHECK(check_view("dq", vw.dq, {B, T, HQ, K}, dt, true, true, 3));
        CHECK(check_view("dk", vw.dk, {B, T, H, K}, dt, true, true, 3));
        CHECK(check_view("dv", vw.dv, {B, T, H, V}, dt, true, true, 3));
        CHECK(check_view("dw", vw.dw, {B, T, H, K}, FATTN_F32, true, true, 3));
        CHECK(check_view("dbeta", vw.dbeta, {B, T, H, 1}, FATTN_F32, true, true, 3));
        PATH_FAIL_IF(has_g && !given(vw.dg), FATTN_ERR_NULL_POINTER, "dg: g was given, so dg is required");
        PATH_FAIL_IF(!has_g && given(vw.dg), FATTN_ERR_BAD_VALUE, "dg: given but g is not");
        if (has_g) CHECK(check_view("dg", vw.dg, {B, T, HQ, 1}, FATTN_F32, true, true, 3));
        // Outputs must not overlap each other or an input (byte extents).
        const fattn_tensor *outs[] = {vw.dq, vw.dk, vw.dv, vw.dw, vw.dbeta, has_g ? vw.dg : nullptr};
        const char *onames[] = {"dq", "dk", "dv", "dw", "dbeta", "dg"};
        const fattn_tensor *ins[] = {vw.q, vw.k, vw.v, vw.w, vw.beta, has_g ? vw.g : nullptr, vw.o,
                                     vw.lse, vw.dout};
        const char *inames[] = {"q", "k", "v", "w", "beta", "g", "o", "lse", "dout"};
        CHECK(check_overlap(outs, onames, 6, ins, inames, 9));
    } else if (op == PathOp::FWD) {
        const fattn_tensor *outs[] = {vw.o, vw.lse};
        const char *onames[] = {"o", "lse"};
        const fattn_tensor *ins[] = {vw.q, vw.k, vw.v, vw.w, vw.beta, has_g ? vw.g : nullptr};
        const char *inames[] = {"q", "k", "v", "w", "beta", "g"};
        CHECK(check_overlap(outs, onames, 2, ins, inames, 6));
    }
#undef CHECK
    PATH_FAIL_IF(!std::isfinite(pp->scale), FATTN_ERR_BAD_VALUE, "scale: not finite");
    // Enums are read through their bytes: a C caller may store any int there, and loading an
    // out-of-range value as the C++ enum type would itself be undefined behaviour.
    int hist_raw = 0, check_raw = 0;
    std::memcpy(&hist_raw, &pp->history, sizeof hist_raw);
    std::memcpy(&check_raw, &pp->check, sizeof check_raw);
    PATH_FAIL_IF(hist_raw != FATTN_PATH_HISTORY_PACKED && hist_raw != FATTN_PATH_HISTORY_RECTANGULAR,
                 FATTN_ERR_BAD_VALUE, "history: unknown layout " + S(hist_raw));
    PATH_FAIL_IF(check_raw != FATTN_PATH_CHECK_STRICT && check_raw != FATTN_PATH_CHECK_NONE,
                 FATTN_ERR_BAD_VALUE, "check: unknown mode " + S(check_raw));
    PATH_FAIL_IF(!(pp->check_tol >= 0) || !std::isfinite(pp->check_tol), FATTN_ERR_BAD_VALUE,
                 "check_tol: must be finite and >= 0");
    // Before anything reads cu_seqlens or values: on a CUDA context they are device memory.
    PATH_FAIL_IF(ctx->backend != FATTN_BACKEND_CPU, FATTN_ERR_UNSUPPORTED,
                 "PaTH runs on the CPU backend only in this version");
    int64_t nseq = B;
    if (pp->cu_seqlens) {
        const int32_t *cu = pp->cu_seqlens;
        PATH_FAIL_IF(B != 1, FATTN_ERR_BAD_SEQLENS, "cu_seqlens: requires B == 1, q has B = " + S(B));
        PATH_FAIL_IF(pp->num_seqs < 1, FATTN_ERR_BAD_SEQLENS, "cu_seqlens: num_seqs is " + S(pp->num_seqs));
        PATH_FAIL_IF(cu[0] != 0, FATTN_ERR_BAD_SEQLENS, "cu_seqlens: [0] is " + S(cu[0]) + ", must be 0");
        for (int64_t s = 0; s < pp->num_seqs; ++s)
            PATH_FAIL_IF(cu[s + 1] < cu[s], FATTN_ERR_BAD_SEQLENS,
                         "cu_seqlens: decreases at index " + S(s + 1));
        PATH_FAIL_IF(cu[pp->num_seqs] != T, FATTN_ERR_BAD_SEQLENS,
                     "cu_seqlens: [num_seqs] is " + S(cu[pp->num_seqs]) + " but q has T = " + S(T));
        nseq = pp->num_seqs;
    }

    PathBwdParams &p = out->p;
    p = PathBwdParams{};
    p.B = B, p.T = T, p.hq = HQ, p.h = H, p.dk = K, p.dv = V, p.dtype = dt;
    p.scale = pp->scale != 0.f ? pp->scale : float(1.0 / std::sqrt(double(K)));
    p.history = pp->history;
    p.q = q.data, p.q_sb = q.nb[0], p.q_ss = q.nb[1], p.q_sh = q.nb[2];
    p.k = k.data, p.k_sb = k.nb[0], p.k_ss = k.nb[1], p.k_sh = k.nb[2];
    p.v = v.data, p.v_sb = v.nb[0], p.v_ss = v.nb[1], p.v_sh = v.nb[2];
    p.w = static_cast<const float *>(vw.w->data), p.w_sb = vw.w->nb[0], p.w_ss = vw.w->nb[1], p.w_sh = vw.w->nb[2];
    p.beta = static_cast<const float *>(vw.beta->data);
    p.beta_sb = vw.beta->nb[0], p.beta_ss = vw.beta->nb[1], p.beta_sh = vw.beta->nb[2];
    if (has_g)
        p.g = static_cast<const float *>(vw.g->data), p.g_sb = vw.g->nb[0], p.g_ss = vw.g->nb[1], p.g_sh = vw.g->nb[2];
    if (vw.o) p.o = vw.o->data, p.o_sb = vw.o->nb[0], p.o_ss = vw.o->nb[1], p.o_sh = vw.o->nb[2];
    if (vw.lse) p.lse = static_cast<float *>(vw.lse->data), p.lse_sb = vw.lse->nb[0], p.lse_sh = vw.lse->nb[1];
    if (op == PathOp::BWD) {
        p.dout = vw.dout->data, p.do_sb = vw.dout->nb[0], p.do_ss = vw.dout->nb[1], p.do_sh = vw.dout->nb[2];
        p.dq = vw.dq->data, p.dq_sb = vw.dq->nb[0], p.dq_ss = vw.dq->nb[1], p.dq_sh = vw.dq->nb[2];
        p.dk_ = vw.dk->data, p.dk_sb = vw.dk->nb[0], p.dk_ss = vw.dk->nb[1], p.dk_sh = vw.dk->nb[2];
        p.dv_ = vw.dv->data, p.dv_sb = vw.dv->nb[0], p.dv_ss = vw.dv->nb[1], p.dv_sh = vw.dv->nb[2];
        p.dw = static_cast<float *>(vw.dw->data), p.dw_sb = vw.dw->nb[0], p.dw_ss = vw.dw->nb[1], p.dw_sh = vw.dw->nb[2];
        p.dbeta = static_cast<float *>(vw.dbeta->data);
        p.dbeta_sb = vw.dbeta->nb[0], p.dbeta_ss = vw.dbeta->nb[1], p.dbeta_sh = vw.dbeta->nb[2];
        if (has_g)
            p.dg = static_cast<float *>(vw.dg->data), p.dg_sb = vw.dg->nb[0], p.dg_ss = vw.dg->nb[1], p.dg_sh = vw.dg->nb[2];
    }
    p.cu_seqlens = pp->cu_seqlens;
    p.num_seqs = nseq;
    p.nthreads = ctx->nthreads;
    out->empty = B == 0 || T == 0 || HQ == 0;
    if (!out->empty) {
        string why;
        fattn_status s = cpu::path_select(p, &why);
        PATH_FAIL_IF(s != FATTN_OK, s, why);
    }
    return {FATTN_OK, ""};
}

// STRICT mode: |w_t| = 1 (within tol) and beta_t in [0, 2], every value finite.
Fail check_w_beta(const fattn_path_params *pp, const PathFwdParams &p) {
    if (pp->check == FATTN_PATH_CHECK_NONE) return {FATTN_OK, ""};
    const double tol = pp->check_tol > 0 ? pp->check_tol : 1e-3;
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t t = 0; t < p.T; ++t)
            for (int64_t h = 0; h < p.h; ++h) {
                const float *w = p.w + b * p.w_sb + t * p.w_ss + h * p.w_sh;
                double n2 = 0;
                for (int64_t d = 0; d < p.dk; ++d) n2 += double(w[d]) * w[d];
                const double nrm = std::sqrt(n2);
                const float be = p.beta[b * p.beta_sb + t * p.beta_ss + h * p.beta_sh];
                // built only for the message (a string per token would allocate T*H times)
                auto at = [&] { return " at (b " + S(b) + ", t " + S(t) + ", h " + S(h) + ")"; };
                PATH_FAIL_IF(!(std::fabs(nrm - 1.0) <= tol), FATTN_ERR_BAD_VALUE,
                             "w: |w| = " + std::to_string(nrm) + at() + " is not 1 (check STRICT, tol " +
                                 std::to_string(tol) + "; L2-normalize w or use FATTN_PATH_CHECK_NONE)");
                PATH_FAIL_IF(!(be >= 0.f && be <= 2.f), FATTN_ERR_BAD_VALUE,
                             "beta: " + std::to_string(be) + at() + " is outside [0, 2] (check STRICT)");
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

// Runs fn(workspace) with the caller's workspace or one from the context's allocator.
template <class Fn>
fattn_status with_workspace(fattn_ctx *ctx, size_t need, void *ws, size_t ws_bytes, Fn &&fn) {
    if (ws) {
        if (ws_bytes < need)
            return set_error(ctx, FATTN_ERR_WORKSPACE_TOO_SMALL,
                             "workspace: " + std::to_string(ws_bytes) + " bytes given, " +
                                 std::to_string(need) + " needed");
        return fn(ws);
    }
    void *mine = ctx_alloc(ctx, need ? need : 64);
    if (!mine) return set_error(ctx, FATTN_ERR_OUT_OF_MEMORY, "workspace: allocation of " + std::to_string(need) + " bytes failed");
    fattn_status s;
    try {
        s = fn(mine);
    } catch (...) {
        ctx_free(ctx, mine);
        throw;
    }
    ctx_free(ctx, mine);
    return s;
}

// Host heap a CPU call takes besides its workspace (all on the calling thread: the layout's
// per-sequence bases, twice, the chunk index, thread handles, the slot pool). The memory model's
// workspace fields add it, as the softmax family's does (attn_memory.cpp), so that its peaks
// never under-predict a measured call (tests/test_path_memory.cpp).
uint64_t host_allowance(int nthreads, int64_t num_seqs) {
    return 16384 + 1024 * uint64_t(std::max(nthreads, 1)) + 64 * uint64_t(std::max<int64_t>(num_seqs, 0));
}

uint64_t dense_bytes(const fattn_tensor *t) {
    if (!t) return 0;
    return uint64_t(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]) * fattn_dtype_size(t->dtype);
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
        if (!out) return set_error(ctx, FATTN_ERR_NULL_POINTER, "out: pointer is NULL");
        Resolved r;
        Fail f = validate(ctx, p, PathOp::QUERY, inputs(q, k, v, w, beta, g), &r);
        if (f.s != FATTN_OK) return fail(ctx, f);
        if (dir != FATTN_DIR_FWD && dir != FATTN_DIR_BWD)
            return set_error(ctx, FATTN_ERR_BAD_VALUE, "dir: unknown direction");
        *out = {0, 0};
        if (r.empty) return FATTN_OK;
        PathLayout lay = path_layout(r.p);
        PathWorkspace ws = path_workspace(r.p, lay, dir);
        out->total_bytes = ws.total;
        out->history_bytes = ws.history_bytes;
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
        Resolved r;
        Fail f = validate(ctx, p, PathOp::FWD, vw, &r);
        if (f.s != FATTN_OK) return fail(ctx, f);
        if (r.empty) return FATTN_OK;
        f = check_w_beta(p, r.p);
        if (f.s != FATTN_OK) return fail(ctx, f);
        PathLayout lay = path_layout(r.p);
        const size_t need = path_workspace(r.p, lay, FATTN_DIR_FWD).total;
        return with_workspace(ctx, need, workspace, workspace_bytes, [&](void *ws) {
            string err;
            fattn_status s = cpu::path_fwd(r.p, ws, &err);
            return s == FATTN_OK ? s : set_error(ctx, s, err);
        });
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
        Resolved r;
        Fail f = validate(ctx, p, PathOp::BWD, vw, &r);
        if (f.s != FATTN_OK) return fail(ctx, f);
        if (r.empty) return FATTN_OK;
        f = check_w_beta(p, r.p);
        if (f.s != FATTN_OK) return fail(ctx, f);
        PathLayout lay = path_layout(r.p);
        const size_t need = path_workspace(r.p, lay, FATTN_DIR_BWD).total;
        return with_workspace(ctx, need, workspace, workspace_bytes, [&](void *ws) {
            string err;
            fattn_status s = cpu::path_bwd(r.p, ws, &err);
            return s == FATTN_OK ? s : set_error(ctx, s, err);
        });
    });
}

fattn_status fattn_path_memory(fattn_ctx_t *ctx, const fattn_path_params *p, const fattn_tensor *q,
                               const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *w,
                               const fattn_tensor *beta, const fattn_tensor *g,
                               fattn_path_memory_info *out) {
    return guarded(ctx, [&] {
        if (!out) return set_error(ctx, FATTN_ERR_NULL_POINTER, "out: pointer is NULL");
        Resolved r;
        Fail f = validate(ctx, p, PathOp::QUERY, inputs(q, k, v, w, beta, g), &r);
        if (f.s != FATTN_OK) return fail(ctx, f);
        std::memset(out, 0, sizeof *out);
        const bool has_g = g && (g->data || g->ne[0] + g->ne[1] > 0);
        const uint64_t elem = fattn_dtype_size(q->dtype);
        const uint64_t rows = uint64_t(q->ne[0] * q->ne[1]), HQ = uint64_t(q->ne[2]);
        const uint64_t V = uint64_t(v->ne[3]);
        out->inputs_bytes = dense_bytes(q) + dense_bytes(k) + dense_bytes(v) + dense_bytes(w) +
                            dense_bytes(beta) + (has_g ? dense_bytes(g) : 0);
        const uint64_t o_bytes = rows * HQ * V * elem, lse_bytes = rows * HQ * 4;
        out->saved_bytes = o_bytes + lse_bytes;
        out->grads_bytes = o_bytes /* dout */ + dense_bytes(q) + dense_bytes(k) + dense_bytes(v) +
                           dense_bytes(w) + dense_bytes(beta) + (has_g ? dense_bytes(g) : 0);
        if (!r.empty) {
            PathFwdParams pp = r.p;
            PathLayout lay = path_layout(pp);
            // The workspace (fattn_path_workspace_size: buffers, per-thread scratch slots, alignment
            // slack) plus the small host heap the call takes itself.
            const uint64_t host = host_allowance(pp.nthreads, pp.num_seqs);
            out->fwd_workspace_bytes = path_workspace(pp, lay, FATTN_DIR_FWD).total + host;
            out->bwd_workspace_bytes = path_workspace(pp, lay, FATTN_DIR_BWD).total + host;
            pp.history = FATTN_PATH_HISTORY_PACKED;
            out->history_packed_bytes = path_workspace(pp, path_layout(pp), FATTN_DIR_BWD).history_bytes;
            pp.history = FATTN_PATH_HISTORY_RECTANGULAR;
            out->history_rectangular_bytes = path_workspace(pp, path_layout(pp), FATTN_DIR_BWD).history_bytes;
        }
        out->fwd_peak_bytes = out->inputs_bytes + out->saved_bytes + out->fwd_workspace_bytes;
        out->bwd_peak_bytes = out->inputs_bytes + out->saved_bytes + out->grads_bytes + out->bwd_workspace_bytes;
        return FATTN_OK;
    });
}

}  // extern "C"
