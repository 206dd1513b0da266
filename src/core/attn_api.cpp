// attn_api.cpp — the C entry points of softmax attention: params defaults, precision resolution,
// supports / workspace / saved-size queries, and fwd / bwd dispatch. Every entry goes through
// attn_validate (the one support surface), then the backend; every C++ exception is caught here so
// nothing crosses the C boundary (std::bad_alloc -> OUT_OF_MEMORY, anything else -> INTERNAL).
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "core/attn_dispatch.h"
#include "core/backend.h"
#include "core/attn_validate.h"
#include "core/dtype.h"
#include "core/enum_raw.h"
#include "core/parallel.h"

namespace fattn {

// Each entry asks the context's table; a backend the library lacks refuses at selection (validate
// calls it first), and sizes of 0 / BACKEND_UNAVAILABLE stand for it elsewhere.
fattn_status attn_backend_select(const fattn_ctx *ctx, const AttnFwdParams &p, std::string *why) {
    const BackendTable *b = backend_of(ctx, why);
    return b ? b->attn_select(ctx, p, why) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

size_t attn_backend_workspace_size(const fattn_ctx *ctx, const AttnFwdParams &p, fattn_dir dir) {
    const BackendTable *b = backend_of(ctx, nullptr);
    return b ? b->attn_workspace_size(ctx, p, dir) : 0;
}

size_t attn_backend_saved_size(const fattn_ctx *ctx, const AttnFwdParams &p) {
    const BackendTable *b = backend_of(ctx, nullptr);
    return b ? b->attn_saved_size(ctx, p) : 0;
}

fattn_status attn_backend_fwd(const fattn_ctx *ctx, const AttnFwdParams &p, void *saved,
                              void *workspace, std::string *err) {
    const BackendTable *b = backend_of(ctx, err);
    return b ? b->attn_fwd(ctx, p, saved, workspace, err) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

fattn_status attn_backend_bwd(const fattn_ctx *ctx, const AttnBwdParams &p, const void *saved,
                              void *workspace, std::string *err) {
    const BackendTable *b = backend_of(ctx, err);
    return b ? b->attn_bwd(ctx, p, saved, workspace, err) : FATTN_ERR_BACKEND_UNAVAILABLE;
}

}  // namespace fattn

namespace {

using fattn::AttnOp;
using fattn::AttnResolved;
using fattn::AttnViews;
using fattn::AttnWork;

using fattn::guarded;

// Validate (and select) with the error recorded on ctx (or the thread when ctx is NULL).
fattn_status validate(fattn_ctx *ctx, const fattn_attn_params *p, AttnOp op, const AttnViews &v,
                      AttnResolved *r) {
    std::string why;
    fattn_status s = fattn::attn_validate(ctx, p, op, v, /*select=*/true, r, &why);
    if (s != FATTN_OK) return fattn::set_error(ctx, s, why);
    return FATTN_OK;
}

// Host fill of a strided [n0, n1, n2, n3] view (innermost stride 1) with one value.
void fill_view(void *base, fattn_dtype t, const int64_t ne[4], int64_t s0, int64_t s1, int64_t s2,
               float value) {
    for (int64_t a = 0; a < ne[0]; ++a)
        for (int64_t b = 0; b < ne[1]; ++b)
            for (int64_t c = 0; c < ne[2]; ++c) {
                int64_t off = a * s0 + b * s1 + c * s2;
                for (int64_t d = 0; d < ne[3]; ++d) fattn::store_f32(base, t, off + d, value);
            }
}

// Outputs of a call in which nothing attends (Sq, Skv or Hq is 0 while other outputs are not
// empty), on a CPU context: the defined values of fully-masked rows and of unseen keys.
void fill_fwd(const fattn::AttnFwdParams &p) {
    const int64_t B = p.cu_seqlens_q ? 1 : p.batch;
    const int64_t ne_o[4] = {B, p.total_q, p.hq, p.dim_v};
    fill_view(p.o, p.dtype, ne_o, p.o_sb, p.o_ss, p.o_sh, 0.0f);
    const int64_t ne_l[4] = {B, p.hq, p.total_q, 1};
    fill_view(p.lse, FATTN_F32, ne_l, p.lse_sb, p.lse_sh, 1, -std::numeric_limits<float>::infinity());
}

void fill_bwd(const fattn::AttnBwdParams &p) {
    const int64_t B = p.cu_seqlens_q ? 1 : p.batch;
    const int64_t ne_q[4] = {B, p.total_q, p.hq, p.d};
    fill_view(p.dq, p.dtype, ne_q, p.dq_sb, p.dq_ss, p.dq_sh, 0.0f);
    const int64_t ne_k[4] = {B, p.total_kv, p.hkv, p.d};
    fill_view(p.dk, p.dtype, ne_k, p.dk_sb, p.dk_ss, p.dk_sh, 0.0f);
    const int64_t ne_v[4] = {B, p.total_kv, p.hkv, p.dim_v};
    fill_view(p.dv, p.dtype, ne_v, p.dv_sb, p.dv_ss, p.dv_sh, 0.0f);
    if (p.dbias) {  // nothing attends: every bias entry's gradient is 0
        const int64_t ne_b[4] = {p.bias_sb ? B : 1, p.bias_sh ? p.hq : 1, p.bias_si ? p.total_q : 1,
                                 p.total_kv};
        fill_view(p.dbias, FATTN_F32, ne_b, p.dbias_sb, p.dbias_sh, p.dbias_si, 0.0f);
    }
}

// Workspace: the caller's (checked for size) or the context allocator's (freed on scope exit).
struct Workspace {
    fattn_ctx *ctx;
    void *ptr = nullptr;
    bool owned = false;
    ~Workspace() {
        if (owned) fattn::ctx_free(ctx, ptr);
    }
    fattn_status acquire(void *given, size_t given_bytes, size_t need) {
        if (given) {
            if (given_bytes < need)
                return fattn::set_error(ctx, FATTN_ERR_WORKSPACE_TOO_SMALL,
                                        "workspace: " + std::to_string(given_bytes) +
                                            " bytes given but the call needs " + std::to_string(need));
            ptr = given;
            return FATTN_OK;
        }
        if (need == 0) return FATTN_OK;
        ptr = fattn::ctx_alloc(ctx, need);
        if (!ptr)
            return fattn::set_error(ctx, FATTN_ERR_OUT_OF_MEMORY,
                                    "workspace: the context allocator failed to provide " +
                                        std::to_string(need) + " bytes");
        owned = true;
        return FATTN_OK;
    }
};

// A run (op FWD or BWD): validate, the empty-call fills (CPU), the saved buffer and the buffers'
// checks, the workspace, then the backend. `saved` is written by the forward (the caller passed it
// non-const) and read by the backward.
fattn_status run(fattn_ctx *ctx, const fattn_attn_params *p, AttnOp op, const AttnViews &vw,
                 const void *saved, void *workspace, size_t workspace_bytes) {
    const bool fwd = op == AttnOp::FWD;
    AttnResolved r;
    fattn_status s = validate(ctx, p, op, vw, &r);
    if (s != FATTN_OK) return s;
    if (r.work == AttnWork::NONE) return FATTN_OK;
    if (r.work == AttnWork::FILL) {  // CPU only: validate turns it into COMPUTE on CUDA
        if (fwd) fill_fwd(r.p);
        else fill_bwd(r.p);
        return FATTN_OK;
    }
    size_t saved_bytes = fattn::attn_backend_saved_size(ctx, r.p);
    if (saved_bytes > 0 && !saved)
        return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER,
                                "saved: is NULL but algo " + std::string(fattn_algo_name(r.p.algo)) +
                                    (fwd ? " keeps " : " reads ") + std::to_string(saved_bytes) +
                                    (fwd ? " bytes for the backward (query fattn_attn_saved_size)"
                                         : " bytes the forward kept"));
    {
        std::string why;
        s = fattn::attn_check_buffers(op, vw, *p, saved, saved_bytes, workspace,
                                      workspace ? workspace_bytes : 0, &why);
        if (s != FATTN_OK) return fattn::set_error(ctx, s, why);
    }
    Workspace ws{ctx};
    s = ws.acquire(workspace, workspace_bytes,
                   fattn::attn_backend_workspace_size(ctx, r.p, fwd ? FATTN_DIR_FWD : FATTN_DIR_BWD));
    if (s != FATTN_OK) return s;
    std::string err;
    if (fwd) s = fattn::attn_backend_fwd(ctx, r.p, const_cast<void *>(saved), ws.ptr, &err);
    else s = fattn::attn_backend_bwd(ctx, r.p, saved, ws.ptr, &err);
    if (s != FATTN_OK && err.empty()) err = fwd ? "fwd: backend failed" : "bwd: backend failed";
    if (s != FATTN_OK) return fattn::set_error(ctx, s, err);
    return FATTN_OK;
}

}  // namespace

extern "C" {

fattn_attn_params fattn_attn_params_default(void) {
    // Zero: scale (1/sqrt(D)), causal NONE, window_align TOP_LEFT, dense (no cu_seqlens,
    // num_seqs and max_seqlen 0), prec AUTO, algo FUSED.
    static_assert(FATTN_CAUSAL_NONE == 0 && FATTN_ALIGN_TOP_LEFT == 0 && FATTN_PREC_AUTO == 0 &&
                      FATTN_ALGO_FUSED == 0,
                  "the zeroed defaults");
    fattn_attn_params p;
    std::memset(&p, 0, sizeof p);
    p.bias = fattn_tensor_none();
    p.window_left = -1;  // unbounded
    p.window_right = -1;
    return p;
}

fattn_prec fattn_resolve_prec(const fattn_ctx_t *ctx, const fattn_attn_params *p,
                              const fattn_tensor *q) {
    // Missing or invalid arguments resolve as AUTO for f32 would: the answer is never AUTO.
    const int64_t rp = p ? fattn::raw_enum(p->prec) : int64_t(FATTN_PREC_AUTO);
    const int64_t rd = q ? fattn::raw_enum(q->dtype) : int64_t(FATTN_F32);
    fattn_prec req = rp >= FATTN_PREC_AUTO && rp <= FATTN_PREC_NATIVE ? fattn_prec(rp) : FATTN_PREC_AUTO;
    fattn_dtype dt = rd == FATTN_F16 || rd == FATTN_BF16 ? fattn_dtype(rd) : FATTN_F32;
    return fattn::attn_resolve_prec(ctx, req, dt);
}

fattn_status fattn_attn_supports_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                    const fattn_tensor *q, const fattn_tensor *k,
                                    const fattn_tensor *v, uint32_t want, char *why,
                                    size_t why_len) {
    fattn_status s = guarded(ctx, "fattn_attn_supports", [&] {
        AttnViews vw;
        vw.q = q; vw.k = k; vw.v = v;
        vw.want = want;
        AttnResolved r;
        return validate(ctx, p, AttnOp::QUERY, vw, &r);
    });
    if (why && why_len > 0) {
        const char *msg = s == FATTN_OK ? "" : fattn_ctx_last_error(ctx);
        std::strncpy(why, msg, why_len - 1);
        why[why_len - 1] = '\0';
    }
    return s;
}

fattn_status fattn_attn_supports(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                 const fattn_tensor *q, const fattn_tensor *k,
                                 const fattn_tensor *v, char *why, size_t why_len) {
    return fattn_attn_supports_ex(ctx, p, q, k, v, 0, why, why_len);
}

namespace {
// Both workspace-size entry points: `dir` read as raw bits by each (a value outside fattn_dir
// must not be passed on as a fattn_dir: that load is undefined behaviour in C++).
fattn_status workspace_size(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, uint32_t want, int64_t rdir,
                            size_t *bytes);
}  // namespace

fattn_status fattn_attn_workspace_size(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                       const fattn_tensor *q, const fattn_tensor *k,
                                       const fattn_tensor *v, fattn_dir dir, size_t *bytes) {
    return workspace_size(ctx, p, q, k, v, 0, fattn::raw_enum(dir), bytes);
}

// The CPU's dbias needs no workspace of its own (it accumulates in dbias, with the backward's
// scratch slots), so the sizes do not depend on `want` there; the parameter lets a backend that
// does need some say so without another entry point.
fattn_status fattn_attn_workspace_size_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                          const fattn_tensor *q, const fattn_tensor *k,
                                          const fattn_tensor *v, uint32_t want, fattn_dir dir,
                                          size_t *bytes) {
    return workspace_size(ctx, p, q, k, v, want, fattn::raw_enum(dir), bytes);
}

namespace {
fattn_status workspace_size(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, uint32_t want, int64_t rdir,
                            size_t *bytes) {
    return guarded(ctx, "fattn_attn_workspace_size", [&] {
        if (!bytes) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "bytes: is NULL");
        *bytes = 0;
        if (rdir != FATTN_DIR_FWD && rdir != FATTN_DIR_BWD)
            return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE,
                                    "dir: " + std::to_string(rdir) + " is not a fattn_dir");
        AttnViews vw;
        vw.q = q; vw.k = k; vw.v = v;
        vw.want = want;
        AttnResolved r;
        fattn_status s = validate(ctx, p, AttnOp::QUERY, vw, &r);
        if (s != FATTN_OK) return s;
        if (r.work == AttnWork::COMPUTE)
            *bytes = fattn::attn_backend_workspace_size(ctx, r.p, static_cast<fattn_dir>(rdir));
        return FATTN_OK;
    });
}
}  // namespace

fattn_status fattn_attn_saved_size(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                   const fattn_tensor *q, const fattn_tensor *k,
                                   const fattn_tensor *v, size_t *bytes) {
    return guarded(ctx, "fattn_attn_saved_size", [&] {
        if (!bytes) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "bytes: is NULL");
        *bytes = 0;
        AttnViews vw;
        vw.q = q; vw.k = k; vw.v = v;
        AttnResolved r;
        fattn_status s = validate(ctx, p, AttnOp::QUERY, vw, &r);
        if (s != FATTN_OK) return s;
        if (r.work == AttnWork::COMPUTE) *bytes = fattn::attn_backend_saved_size(ctx, r.p);
        return FATTN_OK;
    });
}

fattn_status fattn_attn_fwd(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *o,
                            const fattn_tensor *lse, void *saved, void *workspace,
                            size_t workspace_bytes) {
    return guarded(ctx, "fattn_attn_fwd", [&] {
        AttnViews vw;
        vw.q = q; vw.k = k; vw.v = v; vw.o = o; vw.lse = lse;
        return run(ctx, p, AttnOp::FWD, vw, saved, workspace, workspace_bytes);
    });
}

fattn_status fattn_attn_bwd(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                            const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *o,
                            const fattn_tensor *lse, const void *saved, const fattn_tensor *dout,
                            const fattn_tensor *dq, const fattn_tensor *dk, const fattn_tensor *dv,
                            void *workspace, size_t workspace_bytes) {
    return fattn_attn_bwd_ex(ctx, p, q, k, v, o, lse, saved, dout, dq, dk, dv, nullptr, workspace,
                             workspace_bytes);
}

fattn_status fattn_attn_bwd_ex(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                               const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *o,
                               const fattn_tensor *lse, const void *saved, const fattn_tensor *dout,
                               const fattn_tensor *dq, const fattn_tensor *dk, const fattn_tensor *dv,
                               const fattn_tensor *dbias, void *workspace, size_t workspace_bytes) {
    return guarded(ctx, "fattn_attn_bwd", [&] {
        AttnViews vw;
        vw.q = q; vw.k = k; vw.v = v; vw.o = o; vw.lse = lse;
        vw.dout = dout; vw.dq = dq; vw.dk = dk; vw.dv = dv;
        vw.dbias = dbias;
        return run(ctx, p, AttnOp::BWD, vw, saved, workspace, workspace_bytes);
    });
}

}  // extern "C"
