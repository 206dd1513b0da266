// attn_validate.cpp — the softmax-attention support surface (see attn_validate.h).
//
// Rules run in a fixed order and the first broken one is reported, with a status of its own and a
// message that names the argument, the dim and both values. Order: null pointers, enum values,
// dtypes, shapes, GQA heads, head dims, strides and sizes, data (NULL, alignment), bias,
// overlap, masks, varlen (cu_seqlens overlap, then contents), scale, then the backend's selection
// function. Only after all of them are the params filled. The view rules themselves live in
// view_check.cpp, shared with the PaTH family so both give the same status and message.
//
// cu_seqlens live in the context's memory space: on a CPU context their contents are checked
// (start 0, non-decreasing, last = tokens of q / k); on a CUDA context they are device memory the
// host cannot read here, so only what the host knows is checked (both given, num_seqs >= 1,
// B = 1, max_seqlen_q/kv > 0) and the contents are the caller's promise.
#include "core/attn_validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/attn_dispatch.h"
#include "core/enum_raw.h"
#include "core/view_check.h"

namespace fattn {
namespace {

using i128 = __int128;
using std::string;
using vc::View;
using vc::Want;

string S(int64_t x) { return std::to_string(x); }

#define FATTN_RETURN_IF(cond, status, msg) \
    do {                                   \
        if (cond) {                        \
            *why = (msg);                  \
            return status;                 \
        }                                  \
    } while (0)

#define FATTN_RETURN_ON(expr)              \
    do {                                   \
        const fattn_status s_ = (expr);    \
        if (s_ != FATTN_OK) return s_;     \
    } while (0)

}  // namespace

fattn_status attn_check_buffers(AttnOp op, const AttnViews &vw, const fattn_attn_params &params,
                                const void *saved, size_t saved_bytes, const void *workspace,
                                size_t workspace_bytes, string *why) {
    struct Buf {
        const char *name;
        const void *p;
        size_t bytes;
    };
    Buf bufs[2];
    int nb = 0;
    if (saved && saved_bytes > 0) bufs[nb++] = Buf{"saved", saved, saved_bytes};
    if (workspace && workspace_bytes > 0) bufs[nb++] = Buf{"workspace", workspace, workspace_bytes};
    // EXACT's saved buffer holds f32 probabilities, read and written as floats.
    FATTN_RETURN_IF(saved && saved_bytes > 0 && reinterpret_cast<uintptr_t>(saved) % 4 != 0,
                    FATTN_ERR_BAD_VALUE, "saved: pointer is not 4-byte aligned (it holds f32)");
    if (nb == 2) {
        const uintptr_t s0 = reinterpret_cast<uintptr_t>(saved), w0 = reinterpret_cast<uintptr_t>(workspace);
        FATTN_RETURN_IF(s0 < w0 + workspace_bytes && w0 < s0 + saved_bytes, FATTN_ERR_OVERLAP,
                        "workspace: overlaps saved");
    }
    // `output`: written by this op. The workspace is written, so it clashes with every view and
    // with the cu_seqlens arrays; the backward only reads `saved`, so there it clashes only with
    // the gradients it writes.
    const bool bwd = op == AttnOp::BWD;
    const int64_t ncu = params.num_seqs > 0 && params.num_seqs < INT64_MAX / 4 ? params.num_seqs + 1 : 0;
    const fattn_tensor cu_q = fattn_tensor_4d(const_cast<int32_t *>(params.cu_seqlens_q), FATTN_F32,
                                              1, 1, 1, params.cu_seqlens_q ? ncu : 0, 0, 0, 0, 1);
    const fattn_tensor cu_kv = fattn_tensor_4d(const_cast<int32_t *>(params.cu_seqlens_kv), FATTN_F32,
                                               1, 1, 1, params.cu_seqlens_kv ? ncu : 0, 0, 0, 0, 1);
    const View views[] = {
        {"q", vw.q, false},      {"k", vw.k, false},         {"v", vw.v, false},
        {"o", vw.o, !bwd},       {"lse", vw.lse, !bwd, 2},   {"dout", vw.dout, false},
        {"dq", vw.dq, true},     {"dk", vw.dk, true},        {"dv", vw.dv, true},
        {"bias", params.bias.data ? &params.bias : nullptr, false},
        {"dbias", bwd && vw.dbias && vw.dbias->data ? vw.dbias : nullptr, true},
        {"cu_seqlens_q", &cu_q, false}, {"cu_seqlens_kv", &cu_kv, false},
    };
    for (int b = 0; b < nb; ++b)
        for (const View &v : views) {
            if (bwd && string(bufs[b].name) == "saved" && !v.output) continue;
            FATTN_RETURN_IF(vc::view_touches(v, bufs[b].p, bufs[b].bytes), FATTN_ERR_OVERLAP,
                            string(bufs[b].name) + ": overlaps " + v.name);
        }
    return FATTN_OK;
}

fattn_prec attn_resolve_prec(const fattn_ctx *ctx, fattn_prec requested, fattn_dtype dtype) {
    if (requested != FATTN_PREC_AUTO) return requested;  // explicit: as is, judged by the backend
    bool cuda = ctx && ctx->backend == FATTN_BACKEND_CUDA;
    if (dtype == FATTN_F32) return (cuda && ctx->sm_major >= 8) ? FATTN_PREC_TF32 : FATTN_PREC_F32;
    return cuda ? FATTN_PREC_NATIVE : FATTN_PREC_F32;
}

fattn_status attn_validate(const fattn_ctx *ctx, const fattn_attn_params *params, AttnOp op,
                           const AttnViews &vw, bool select, AttnResolved *out, string *why) {
    const bool fwd_outs = op != AttnOp::QUERY;
    const bool bwd = op == AttnOp::BWD;

    // ---- null pointers (structs) ----
    FATTN_RETURN_IF(!ctx, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    FATTN_RETURN_IF(!params, FATTN_ERR_NULL_POINTER, "params: is NULL");
    View views[10];
    int nviews = 0;
    views[nviews++] = View{"q", vw.q, false};
    views[nviews++] = View{"k", vw.k, false};
    views[nviews++] = View{"v", vw.v, false};
    if (fwd_outs) {
        views[nviews++] = View{"o", vw.o, !bwd};
        views[nviews++] = View{"lse", vw.lse, !bwd, 2};
    }
    if (bwd) {
        views[nviews++] = View{"dout", vw.dout, false};
        views[nviews++] = View{"dq", vw.dq, true};
        views[nviews++] = View{"dk", vw.dk, true};
        views[nviews++] = View{"dv", vw.dv, true};
    }
    for (int i = 0; i < nviews; ++i)
        FATTN_RETURN_IF(!views[i].t, FATTN_ERR_NULL_POINTER,
                        string(views[i].name) + ": tensor pointer is NULL");
    const fattn_attn_params &p = *params;
    const fattn_tensor &q = *vw.q, &k = *vw.k, &v = *vw.v;
    const bool has_bias = p.bias.data != nullptr;

    // ---- enum values ----
    for (int i = 0; i < nviews; ++i) FATTN_RETURN_ON(vc::check_dtype_valid(views[i], why));
    // Read raw: an out-of-range value must be reported, not loaded through the enum type.
    const int64_t prec = raw_enum(p.prec), algo = raw_enum(p.algo);
    const int64_t causal_raw = raw_enum(p.causal), align = raw_enum(p.window_align);
    FATTN_RETURN_IF(prec < FATTN_PREC_AUTO || prec > FATTN_PREC_NATIVE, FATTN_ERR_BAD_VALUE,
                    "prec: " + S(prec) + " is not a fattn_prec");
    FATTN_RETURN_IF(algo != FATTN_ALGO_FUSED && algo != FATTN_ALGO_EXACT, FATTN_ERR_BAD_VALUE,
                    "algo: " + S(algo) + " is not a fattn_algo");
    FATTN_RETURN_IF(causal_raw < FATTN_CAUSAL_NONE || causal_raw > FATTN_CAUSAL_BOTTOM_RIGHT,
                    FATTN_ERR_BAD_VALUE, "causal: " + S(causal_raw) + " is not a fattn_causal");
    FATTN_RETURN_IF(align != FATTN_ALIGN_TOP_LEFT && align != FATTN_ALIGN_BOTTOM_RIGHT,
                    FATTN_ERR_BAD_VALUE, "window_align: " + S(align) + " is not a fattn_align");

    // ---- dtypes ----
    for (int i = 0; i < nviews; ++i) {
        const View &x = views[i];
        FATTN_RETURN_ON(x.inner == 2 ? vc::check_dtype_is(x, FATTN_F32, nullptr, why)
                                     : vc::check_dtype_is(x, q.dtype, "q", why));
    }

    // ---- shapes ----
    const int64_t B = q.ne[0], Sq = q.ne[1], Hq = q.ne[2], D = q.ne[3];
    const int64_t Skv = k.ne[1], Hkv = k.ne[2], Dv = v.ne[3];
    {
        const Want free{0, nullptr};
        const Want wq[4] = {free, free, free, free};
        const Want wk[4] = {{B, "q"}, free, free, {D, "q"}};
        const Want wv[4] = {{B, "q"}, {Skv, "k"}, {Hkv, "k"}, free};
        const Want wo[4] = {{B, "q"}, {Sq, "q"}, {Hq, "q"}, {Dv, "v"}};
        const Want wl[4] = {{B, "q"}, {Hq, "q"}, {Sq, "q"}, {1, ""}};
        const Want wdk[4] = {{B, "q"}, {Skv, "k"}, {Hkv, "k"}, {D, "k"}};
        const Want wdv[4] = {{B, "q"}, {Skv, "k"}, {Hkv, "k"}, {Dv, "v"}};
        const Want wdq[4] = {{B, "q"}, {Sq, "q"}, {Hq, "q"}, {D, "q"}};
        for (int i = 0; i < nviews; ++i) {
            string n = views[i].name;
            const Want(&w)[4] = n == "q" ? wq : n == "k" ? wk : n == "v" ? wv
                              : n == "o" || n == "dout" ? wo : n == "lse" ? wl
                              : n == "dq" ? wdq : n == "dk" ? wdk : wdv;
            FATTN_RETURN_ON(vc::check_shape(views[i], w, why));
        }
    }

    // ---- GQA heads ----
    FATTN_RETURN_IF(Hkv == 0 && Hq > 0, FATTN_ERR_GQA_HEADS,
                    "k: ne[2] (heads) is 0 but q has " + S(Hq) + " heads");
    FATTN_RETURN_IF(Hkv > 0 && Hq % Hkv != 0, FATTN_ERR_GQA_HEADS,
                    "q: ne[2] (heads) is " + S(Hq) + ", not a multiple of k's " + S(Hkv) +
                        " heads (Hq % Hkv must be 0)");

    // ---- head dims ----
    FATTN_RETURN_IF(D == 0, FATTN_ERR_BAD_HEAD_DIM, "q: ne[3] (head dim) is 0, must be >= 1");
    FATTN_RETURN_IF(Dv == 0, FATTN_ERR_BAD_HEAD_DIM, "v: ne[3] (head dim) is 0, must be >= 1");

    // ---- strides and sizes (also of the outputs a size query does not see) ----
    for (int i = 0; i < nviews; ++i) FATTN_RETURN_ON(vc::check_strides(views[i], why));
    const size_t es = fattn_dtype_size(q.dtype);
    FATTN_RETURN_ON(vc::check_implied_size("o: [B, Sq, Hq, Dv] =", {B, Sq, Hq, Dv}, es, why));
    FATTN_RETURN_ON(vc::check_implied_size("lse: [B, Hq, Sq] =", {B, Hq, Sq}, 4, why));
    FATTN_RETURN_ON(vc::check_implied_size("dk: [B, Skv, Hkv, D] =", {B, Skv, Hkv, D}, es, why));
    FATTN_RETURN_ON(vc::check_implied_size("dv: [B, Skv, Hkv, Dv] =", {B, Skv, Hkv, Dv}, es, why));

    // ---- data: NULL, alignment (size queries may describe shapes without memory) ----
    if (op != AttnOp::QUERY)
        for (int i = 0; i < nviews; ++i) FATTN_RETURN_ON(vc::check_data(views[i], why));

    // ---- bias (shape/dtype/strides; before overlap, which needs its strides sane) ----
    View bias_view{"bias", &p.bias, false, 3, /*sized=*/false};
    if (has_bias) {
        const fattn_tensor &b = p.bias;
        FATTN_RETURN_IF(!vc::valid_dtype(b.dtype), FATTN_ERR_BAD_BIAS,
                        "bias: dtype " + S(raw_enum(b.dtype)) + " is not f32, f16 or bf16");
        for (int d = 0; d < 4; ++d)
            FATTN_RETURN_IF(b.ne[d] < 0, FATTN_ERR_BAD_BIAS,
                            "bias: ne[" + S(d) + "] is " + S(b.ne[d]) + ", must not be negative");
        FATTN_RETURN_IF(b.ne[0] != B && b.ne[0] != 1, FATTN_ERR_BAD_BIAS,
                        "bias: ne[0] (batch) is " + S(b.ne[0]) + ", must be 1 or q's " + S(B));
        FATTN_RETURN_IF(b.ne[1] != Hq && b.ne[1] != 1, FATTN_ERR_BAD_BIAS,
                        "bias: ne[1] (heads) is " + S(b.ne[1]) + ", must be 1 or q's " + S(Hq));
        FATTN_RETURN_IF(b.ne[2] != Sq, FATTN_ERR_BAD_BIAS,
                        "bias: ne[2] (query rows) is " + S(b.ne[2]) + " but q has " + S(Sq) +
                            " (use stride 0 to broadcast)");
        FATTN_RETURN_IF(b.ne[3] != Skv, FATTN_ERR_BAD_BIAS,
                        "bias: ne[3] (keys) is " + S(b.ne[3]) + " but k has " + S(Skv));
        FATTN_RETURN_ON(vc::check_strides(bias_view, why));
        FATTN_RETURN_ON(vc::check_data(bias_view, why));
    }

    // ---- dbias (the bias gradient): requested by a BWD's view or a QUERY's want bit ----
    FATTN_RETURN_IF((vw.want & ~uint32_t(FATTN_ATTN_WANT_DBIAS)) != 0, FATTN_ERR_BAD_VALUE,
                    "want: " + std::to_string(vw.want) + " has bits other than FATTN_ATTN_WANT_DBIAS");
    const bool has_dbias = bwd ? (vw.dbias && vw.dbias->data) : (vw.want & FATTN_ATTN_WANT_DBIAS) != 0;
    View dbias_view{"dbias", vw.dbias, true};
    FATTN_RETURN_IF(has_dbias && !has_bias, FATTN_ERR_BAD_BIAS,
                    "dbias: the bias gradient is requested but params has no bias (bias.data is NULL)");
    if (bwd && has_dbias) {
        const fattn_tensor &db = *vw.dbias, &b = p.bias;
        FATTN_RETURN_ON(vc::check_dtype_valid(dbias_view, why));
        FATTN_RETURN_IF(db.dtype != FATTN_F32, FATTN_ERR_DTYPE_MISMATCH,
                        string("dbias: dtype is ") + fattn_dtype_name(db.dtype) +
                            ", must be f32 (the bias gradient is a float32 reduction)");
        // The bias's shape, reduced to 1 where the bias steps by 0 (extent 1 or stride 0).
        static const char *const kBiasDims[4] = {"batch", "heads", "query rows", "keys"};
        const int64_t full[4] = {B, Hq, Sq, Skv};
        for (int d = 0; d < 4; ++d) {
            const bool bcast = d < 3 && vc::step(b, d) == 0;
            const int64_t want = bcast ? 1 : full[d];
            FATTN_RETURN_IF(db.ne[d] != want, FATTN_ERR_SHAPE_MISMATCH,
                            "dbias: ne[" + S(d) + "] (" + kBiasDims[d] + ") is " + S(db.ne[d]) +
                                ", must be " + S(want) +
                                (bcast ? " (the bias broadcasts this dim: its gradient is summed over it)"
                                       : " (the bias's extent)"));
        }
        FATTN_RETURN_ON(vc::check_strides(dbias_view, why));
        FATTN_RETURN_ON(vc::check_data(dbias_view, why));
    }

    // ---- overlap: outputs pairwise, and every output against every input ----
    View all[11];
    int nall = 0;
    for (int i = 0; i < nviews; ++i) all[nall++] = views[i];
    if (has_bias) all[nall++] = bias_view;
    if (bwd && has_dbias) all[nall++] = dbias_view;
    if (op != AttnOp::QUERY) FATTN_RETURN_ON(vc::check_overlaps(all, nall, why));

    // ---- masks ----
    FATTN_RETURN_IF(p.window_left < -1, FATTN_ERR_BAD_MASK,
                    "window_left: is " + S(p.window_left) + ", must be >= -1 (-1 = unbounded)");
    FATTN_RETURN_IF(p.window_right < -1, FATTN_ERR_BAD_MASK,
                    "window_right: is " + S(p.window_right) + ", must be >= -1 (-1 = unbounded)");
    const bool causal = p.causal != FATTN_CAUSAL_NONE;
    const bool causal_br = p.causal == FATTN_CAUSAL_BOTTOM_RIGHT;
    FATTN_RETURN_IF(causal && p.window_right > 0, FATTN_ERR_BAD_MASK,
                    "window_right: is " + S(p.window_right) +
                        " with causal set; must be -1 or 0 (causal already bounds the right side)");
    const bool window = p.window_left >= 0 || p.window_right >= 0;
    FATTN_RETURN_IF(causal && window && (p.window_align == FATTN_ALIGN_BOTTOM_RIGHT) != causal_br,
                    FATTN_ERR_BAD_MASK,
                    string("window_align: is ") +
                        (p.window_align == FATTN_ALIGN_BOTTOM_RIGHT ? "BOTTOM_RIGHT" : "TOP_LEFT") +
                        " but causal is " + (causal_br ? "BOTTOM_RIGHT" : "TOP_LEFT") +
                        "; a window combined with causal must use the causal diagonal");

    // ---- varlen ----
    const bool varlen = p.cu_seqlens_q || p.cu_seqlens_kv;
    int64_t max_q = Sq, max_kv = Skv;
    if (varlen) {
        FATTN_RETURN_IF(!p.cu_seqlens_kv, FATTN_ERR_BAD_SEQLENS,
                        "cu_seqlens_kv: is NULL but cu_seqlens_q is given (varlen needs both)");
        FATTN_RETURN_IF(!p.cu_seqlens_q, FATTN_ERR_BAD_SEQLENS,
                        "cu_seqlens_q: is NULL but cu_seqlens_kv is given (varlen needs both)");
        FATTN_RETURN_IF(p.num_seqs < 1 || p.num_seqs > INT32_MAX, FATTN_ERR_BAD_SEQLENS,
                        "num_seqs: is " + S(p.num_seqs) + ", must be >= 1 (and < 2^31) with cu_seqlens");
        FATTN_RETURN_IF(B != 1, FATTN_ERR_BAD_SEQLENS,
                        "q: ne[0] (batch) is " + S(B) + " but varlen (cu_seqlens) requires B = 1");
        FATTN_RETURN_IF(Sq > INT32_MAX || Skv > INT32_MAX, FATTN_ERR_BAD_SEQLENS,
                        "cu_seqlens: int32 offsets cannot index " + S(std::max(Sq, Skv)) +
                            " tokens");
        FATTN_RETURN_IF(p.max_seqlen_q < 0, FATTN_ERR_BAD_SEQLENS,
                        "max_seqlen_q: is " + S(p.max_seqlen_q) + ", must be >= 0");
        FATTN_RETURN_IF(p.max_seqlen_kv < 0, FATTN_ERR_BAD_SEQLENS,
                        "max_seqlen_kv: is " + S(p.max_seqlen_kv) + ", must be >= 0");
        // The kernels read cu_seqlens while they write the outputs: no byte may be shared.
        const int64_t nq = op == AttnOp::QUERY ? 0 : nall;  // a query writes nothing
        FATTN_RETURN_ON(vc::check_int32_array("cu_seqlens_q", p.cu_seqlens_q, p.num_seqs + 1, all,
                                              int(nq), why));
        FATTN_RETURN_ON(vc::check_int32_array("cu_seqlens_kv", p.cu_seqlens_kv, p.num_seqs + 1, all,
                                              int(nq), why));
        if (ctx->backend == FATTN_BACKEND_CPU) {
            FATTN_RETURN_ON(vc::check_cu_seqlens("cu_seqlens_q", p.cu_seqlens_q, p.num_seqs, Sq,
                                                 "q", &max_q, why));
            FATTN_RETURN_ON(vc::check_cu_seqlens("cu_seqlens_kv", p.cu_seqlens_kv, p.num_seqs, Skv,
                                                 "k", &max_kv, why));
            FATTN_RETURN_IF(p.max_seqlen_q > 0 && p.max_seqlen_q < max_q, FATTN_ERR_BAD_SEQLENS,
                            "max_seqlen_q: is " + S(p.max_seqlen_q) + " but cu_seqlens_q holds a " +
                                "sequence of " + S(max_q));
            FATTN_RETURN_IF(p.max_seqlen_kv > 0 && p.max_seqlen_kv < max_kv,
                            FATTN_ERR_BAD_SEQLENS,
                            "max_seqlen_kv: is " + S(p.max_seqlen_kv) +
                                " but cu_seqlens_kv holds a sequence of " + S(max_kv));
        } else {
            FATTN_RETURN_IF(p.max_seqlen_q <= 0, FATTN_ERR_BAD_SEQLENS,
                            "max_seqlen_q: must be given (> 0) for varlen on a CUDA context "
                            "(cu_seqlens are device memory)");
            FATTN_RETURN_IF(p.max_seqlen_kv <= 0, FATTN_ERR_BAD_SEQLENS,
                            "max_seqlen_kv: must be given (> 0) for varlen on a CUDA context "
                            "(cu_seqlens are device memory)");
            max_q = p.max_seqlen_q;
            max_kv = p.max_seqlen_kv;
        }
    }

    // ---- scale ----
    FATTN_RETURN_IF(!std::isfinite(p.scale), FATTN_ERR_BAD_VALUE,
                    "scale: is " + std::to_string(p.scale) + ", must be finite (0 = 1/sqrt(D))");
    // The kernels fold log2(e) into the scale; past 2^126 that product overflows and every score,
    // 0 included, would come out NaN. No attention scale is near it.
    FATTN_RETURN_IF(std::fabs(p.scale) > 0x1p126f, FATTN_ERR_BAD_VALUE,
                    "scale: |scale| = " + std::to_string(p.scale) + " is above 2^126 (8.5e37)");

    // ---- fill the resolved params ----
    AttnBwdParams r{};
    r.batch = varlen ? p.num_seqs : B;
    r.seqlen_q = max_q;
    r.seqlen_kv = max_kv;
    r.total_q = Sq;
    r.total_kv = Skv;
    r.hq = Hq;
    r.hkv = Hkv;
    r.d = D;
    r.dim_v = Dv;
    r.dtype = q.dtype;
    r.prec = attn_resolve_prec(ctx, p.prec, q.dtype);
    r.algo = p.algo;
    r.scale = p.scale != 0.0f ? p.scale : float(1.0 / std::sqrt(double(D)));
    r.q = q.data; r.q_sb = vc::step(q, 0); r.q_ss = vc::step(q, 1); r.q_sh = vc::step(q, 2);
    r.k = k.data; r.k_sb = vc::step(k, 0); r.k_ss = vc::step(k, 1); r.k_sh = vc::step(k, 2);
    r.v = v.data; r.v_sb = vc::step(v, 0); r.v_ss = vc::step(v, 1); r.v_sh = vc::step(v, 2);
    if (fwd_outs) {
        const fattn_tensor &o = *vw.o, &lse = *vw.lse;
        r.o = o.data; r.o_sb = vc::step(o, 0); r.o_ss = vc::step(o, 1); r.o_sh = vc::step(o, 2);
        r.lse = static_cast<float *>(lse.data); r.lse_sb = vc::step(lse, 0); r.lse_sh = vc::step(lse, 1);
    }
    if (has_bias) {
        const fattn_tensor &b = p.bias;
        r.bias = b.data;
        r.bias_dtype = b.dtype;
        // A dim of size 1 broadcasts: its stride is normalized to 0 so kernels need no branch.
        r.bias_sb = vc::step(b, 0);
        r.bias_sh = vc::step(b, 1);
        r.bias_si = vc::step(b, 2);
    }
    // A window wider than Sq + Skv allows the same keys as an unbounded one (diag - left < 0 and
    // diag + right >= Skv for every row); clamping keeps key_range()'s diag ± w free of overflow.
    // (Sq + Skv itself may not fit: an empty view, Hkv = 0, can carry any Skv.)
    const int64_t wlim = int64_t(std::min<i128>(i128(r.total_q) + r.total_kv, INT64_MAX / 4));
    auto clampw = [wlim](int64_t w) { return w > wlim ? wlim : w; };
    if (causal) {
        r.win_left = clampw(p.window_left);
        r.win_right = 0;
        r.bottom_right = causal_br;
    } else {
        r.win_left = clampw(p.window_left);
        r.win_right = clampw(p.window_right);
        r.bottom_right = p.window_align == FATTN_ALIGN_BOTTOM_RIGHT;
    }
    r.cu_seqlens_q = varlen ? p.cu_seqlens_q : nullptr;
    r.cu_seqlens_kv = varlen ? p.cu_seqlens_kv : nullptr;
    r.want_dbias = has_dbias;
    r.nthreads = ctx->nthreads;
    r.stream = ctx->stream;
    if (bwd) {
        const fattn_tensor &g = *vw.dout, &dq = *vw.dq, &dk = *vw.dk, &dv = *vw.dv;
        r.dout = g.data; r.do_sb = vc::step(g, 0); r.do_ss = vc::step(g, 1); r.do_sh = vc::step(g, 2);
        r.dq = dq.data; r.dq_sb = vc::step(dq, 0); r.dq_ss = vc::step(dq, 1); r.dq_sh = vc::step(dq, 2);
        r.dk = dk.data; r.dk_sb = vc::step(dk, 0); r.dk_ss = vc::step(dk, 1); r.dk_sh = vc::step(dk, 2);
        r.dv = dv.data; r.dv_sb = vc::step(dv, 0); r.dv_ss = vc::step(dv, 1); r.dv_sh = vc::step(dv, 2);
        if (has_dbias) {  // dims of extent 1 step by 0: exactly the bias's broadcast dims
            const fattn_tensor &db = *vw.dbias;
            r.dbias = static_cast<float *>(db.data);
            r.dbias_sb = vc::step(db, 0); r.dbias_sh = vc::step(db, 1); r.dbias_si = vc::step(db, 2);
        }
    }

    // ---- how much work: B, S or H of 0 ----
    // A query (supports / sizes) answers for fwd and bwd together, so it classifies like BWD.
    const i128 q_rows = i128(B) * Sq * Hq, kv_rows = i128(B) * Skv * Hkv;
    const i128 out_rows = op == AttnOp::FWD ? q_rows : q_rows + kv_rows;
    const i128 pairs = i128(B) * Hq * Sq * Skv;
    AttnWork work = out_rows == 0 ? AttnWork::NONE : pairs == 0 ? AttnWork::FILL : AttnWork::COMPUTE;
    if (work == AttnWork::FILL && ctx->backend == FATTN_BACKEND_CUDA) {
        // The core cannot write device memory itself: a CUDA kernel defines the empty-side
        // outputs (fully-masked rows, or dk/dv of keys no query sees). With no query heads
        // there is no kernel grid to do it.
        FATTN_RETURN_IF(Hq == 0, FATTN_ERR_UNSUPPORTED,
                        "q: ne[2] (heads) is 0 while k/v are non-empty: zero-filling dk/dv "
                        "without query heads is not run on a CUDA context");
        work = AttnWork::COMPUTE;
    }

    // ---- the backend's one selection function ----
    if (select && work == AttnWork::COMPUTE) {
        string reason;
        const fattn_status s = attn_backend_select(ctx, r, &reason);
        FATTN_RETURN_IF(s != FATTN_OK, s, reason.empty() ? string("backend: unsupported") : reason);
    }

    out->p = r;
    out->work = work;
    return FATTN_OK;
}

}  // namespace fattn
