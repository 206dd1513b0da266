// attn_validate.cpp — the softmax-attention support surface (see attn_validate.h).
//
// Rules run in a fixed order and the first broken one is reported, with a status of its own and a
// message that names the argument, the dim and both values. Order: null pointers, enum values,
// dtypes, shapes, GQA heads, head dims, strides, NULL data, overlap, bias, masks, varlen, scale,
// then the backend's selection function. Only after all of them are the params filled.
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

#include "core/enum_raw.h"
#include "core/attn_dispatch.h"

namespace fattn {
namespace {

using i128 = __int128;
using std::string;

string S(int64_t x) { return std::to_string(x); }

// Dim names of the two layouts, for messages.
const char *const kDimNames[4] = {"batch", "seq", "heads", "head dim"};
const char *const kLseDimNames[4] = {"batch", "heads", "seq", "unit"};

bool valid_dtype(const fattn_dtype &t) {
    int64_t v = raw_enum(t);
    return v == FATTN_F32 || v == FATTN_F16 || v == FATTN_BF16;
}

int64_t numel(const fattn_tensor &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

// Expected value of one dim: `src` names where it comes from (nullptr: free).
struct Want {
    int64_t val;
    const char *src;
};

// One named view of the call, with its role.
struct View {
    const char *name;
    const fattn_tensor *t;
    bool output;
    bool lse_layout;  // [B, Hq, Sq, 1]: innermost stride is nb[2], nb[3] ignored
};

// ---------------------------------------------------------------- overlap
//
// Two views overlap iff some element of one shares a byte with some element of the other. Exact
// test for equal element size: with δ the base difference (in elements), they overlap iff
// δ = Σ_d i_d·nbA_d − Σ_d j_d·nbB_d for some in-range indices i, j. A dim with the same stride in
// both views becomes one digit t_d = i_d − j_d in [−(neB_d−1), neA_d−1]; a dim whose strides differ
// (q, k, v or dq, dk, dv as views of one fused buffer with D != Dv) becomes two digits, one per view.
// Searched digit by digit from the largest stride inward; each level keeps only the t that the
// inner digits can still compensate (at most 2 candidates for nested strides). A pathological
// layout that blows the search budget is reported as overlapping: never a false "no".

struct Digit {
    i128 nb, lo, hi;
};

i128 floor_div(i128 a, i128 b) {  // b > 0
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
i128 ceil_div(i128 a, i128 b) { return -floor_div(-a, b); }

// Is `target` = Σ_{e >= k} t_e·nb_e with t_e in [lo_e, hi_e]? inner_lo/hi[k] = reach of dims >= k.
bool representable(i128 target, const Digit *dg, const i128 *inner_lo, const i128 *inner_hi, int k,
                   int n, int *budget) {
    if (k == n) return target == 0;
    if (--*budget < 0) return true;  // conservative
    const Digit &d = dg[k];
    i128 tmin = std::max(d.lo, ceil_div(target - inner_hi[k + 1], d.nb));
    i128 tmax = std::min(d.hi, floor_div(target - inner_lo[k + 1], d.nb));
    for (i128 t = tmin; t <= tmax; ++t)
        if (representable(target - t * d.nb, dg, inner_lo, inner_hi, k + 1, n, budget)) return true;
    return false;
}

// Byte span [begin, end) of a non-empty view with non-negative strides.
void byte_span(const fattn_tensor &t, int ndim, i128 *begin, i128 *end) {
    i128 es = i128(fattn_dtype_size(t.dtype));
    i128 last = 0;
    for (int d = 0; d < ndim; ++d) last += i128(t.ne[d] - 1) * t.nb[d];
    *begin = i128(reinterpret_cast<uintptr_t>(t.data));
    *end = *begin + (last + 1) * es;
}

bool views_overlap(const View &a, const View &b) {
    const fattn_tensor &ta = *a.t, &tb = *b.t;
    if (numel(ta) == 0 || numel(tb) == 0) return false;
    int na = a.lse_layout ? 3 : 4, nbd = b.lse_layout ? 3 : 4;
    i128 a0, a1, b0, b1;
    byte_span(ta, na, &a0, &a1);
    byte_span(tb, nbd, &b0, &b1);
    if (a1 <= b0 || b1 <= a0) return false;  // disjoint extents
    i128 es = i128(fattn_dtype_size(ta.dtype));
    if (es != i128(fattn_dtype_size(tb.dtype))) return true;
    // Effective per-dim strides: a dim of size 1 takes the other view's stride (its own is never
    // used); a dim beyond a view's rank has size 1.
    Digit dg[8];
    int n = 0;
    for (int d = 0; d < 4; ++d) {
        int64_t nea = d < na ? ta.ne[d] : 1, neb = d < nbd ? tb.ne[d] : 1;
        if (nea == 1 && neb == 1) continue;
        int64_t sa = ta.nb[d], sb = tb.nb[d];
        if (nea > 1 && neb > 1 && sa != sb) {  // different layouts: one digit per view
            if (sa != 0) dg[n++] = Digit{i128(sa), 0, i128(nea - 1)};
            if (sb != 0) dg[n++] = Digit{i128(sb), -i128(neb - 1), 0};
            continue;
        }
        int64_t s = nea == 1 ? sb : sa;
        if (s == 0) continue;  // broadcast dim of an input: irrelevant
        dg[n++] = Digit{i128(s), -i128(neb - 1), i128(nea - 1)};
    }
    for (int i = 1; i < n; ++i)  // largest stride first (insertion sort: n <= 8)
        for (int j = i; j > 0 && dg[j - 1].nb < dg[j].nb; --j) std::swap(dg[j - 1], dg[j]);
    i128 inner_lo[9], inner_hi[9];
    inner_lo[n] = inner_hi[n] = 0;
    for (int k = n - 1; k >= 0; --k) {
        inner_lo[k] = inner_lo[k + 1] + dg[k].lo * dg[k].nb;
        inner_hi[k] = inner_hi[k + 1] + dg[k].hi * dg[k].nb;
    }
    i128 delta = b0 - a0;  // bytes
    int budget = 1 << 14;
    i128 lo = floor_div(delta, es), hi = ceil_div(delta, es);  // equal when δ is a multiple of es
    for (i128 m = lo; m <= hi; ++m)
        if (representable(m, dg, inner_lo, inner_hi, 0, n, &budget)) return true;
    return false;
}

// ---------------------------------------------------------------- the checker

struct Checker {
    string *why;
    fattn_status fail(fattn_status s, const string &msg) {
        *why = msg;
        return s;
    }
};

#define FATTN_RETURN_IF(cond, status, msg) \
    do {                                   \
        if (cond) return ck.fail(status, msg); \
    } while (0)

fattn_status check_shape(Checker &ck, const View &v, const Want (&want)[4]) {
    const char *const *names = v.lse_layout ? kLseDimNames : kDimNames;
    for (int d = 0; d < 4; ++d) {
        int64_t got = v.t->ne[d];
        FATTN_RETURN_IF(got < 0, FATTN_ERR_SHAPE_MISMATCH,
                        string(v.name) + ": ne[" + S(d) + "] (" + names[d] + ") is " + S(got) +
                            ", must not be negative");
        if (!want[d].src || got == want[d].val) continue;
        const string head = string(v.name) + ": ne[" + S(d) + "] (" + names[d] + ") is " + S(got);
        if (!*want[d].src)  // a fixed size, not another tensor's
            return ck.fail(FATTN_ERR_SHAPE_MISMATCH, head + ", must be " + S(want[d].val));
        return ck.fail(FATTN_ERR_SHAPE_MISMATCH,
                       head + " but " + want[d].src + " has " + S(want[d].val));
    }
    return FATTN_OK;
}

fattn_status check_strides(Checker &ck, const View &v) {
    const fattn_tensor &t = *v.t;
    int inner = v.lse_layout ? 2 : 3;
    for (int d = 0; d <= inner; ++d)
        FATTN_RETURN_IF(t.nb[d] < 0, FATTN_ERR_BAD_STRIDE,
                        string(v.name) + ": nb[" + S(d) + "] is " + S(t.nb[d]) +
                            ", strides must not be negative");
    FATTN_RETURN_IF(t.nb[inner] != 1, FATTN_ERR_BAD_STRIDE,
                    string(v.name) + ": nb[" + S(inner) + "] (innermost stride) is " +
                        S(t.nb[inner]) + ", must be 1");
    if (v.output && numel(t) > 0)  // an empty view writes nothing, whatever its strides
        for (int d = 0; d < inner; ++d)
            FATTN_RETURN_IF(t.nb[d] == 0 && t.ne[d] > 1, FATTN_ERR_BAD_STRIDE,
                            string(v.name) + ": nb[" + S(d) + "] is 0 on a dim of size " +
                                S(t.ne[d]) + ": an output element would be written twice");
    // The view's byte span must be addressable with 64-bit offsets.
    i128 last = 0;
    for (int d = 0; d <= inner; ++d) last += i128(t.ne[d] > 0 ? t.ne[d] - 1 : 0) * t.nb[d];
    FATTN_RETURN_IF((last + 1) * i128(fattn_dtype_size(t.dtype)) > i128(INT64_MAX),
                    FATTN_ERR_BAD_STRIDE,
                    string(v.name) + ": the view spans more than 2^63 bytes");
    return FATTN_OK;
}

// Checks one cu_seqlens array in host memory; *max_len gets the longest sequence.
fattn_status check_cu_seqlens(Checker &ck, const char *name, const int32_t *cu, int64_t num_seqs,
                              int64_t total, const char *tensor, int64_t *max_len) {
    FATTN_RETURN_IF(cu[0] != 0, FATTN_ERR_BAD_SEQLENS,
                    string(name) + "[0] is " + S(cu[0]) + ", must be 0");
    int64_t mx = 0;
    for (int64_t i = 0; i < num_seqs; ++i) {
        FATTN_RETURN_IF(cu[i + 1] < cu[i], FATTN_ERR_BAD_SEQLENS,
                        string(name) + "[" + S(i + 1) + "] is " + S(cu[i + 1]) + " < " + name +
                            "[" + S(i) + "] = " + S(cu[i]) + ", must be non-decreasing");
        mx = std::max<int64_t>(mx, int64_t(cu[i + 1]) - cu[i]);
    }
    FATTN_RETURN_IF(cu[num_seqs] != total, FATTN_ERR_BAD_SEQLENS,
                    string(name) + "[" + S(num_seqs) + "] (last) is " + S(cu[num_seqs]) + " but " +
                        tensor + " has ne[1] = " + S(total) + " tokens");
    *max_len = mx;
    return FATTN_OK;
}

}  // namespace

bool tensors_overlap(const fattn_tensor &a, const fattn_tensor &b) {
    return views_overlap(View{"", &a, false, false}, View{"", &b, false, false});
}

fattn_status attn_check_buffers(AttnOp op, const AttnViews &vw, const fattn_attn_params &params,
                                const void *saved, size_t saved_bytes, const void *workspace,
                                size_t workspace_bytes, string *why) {
    struct Buf {
        const char *name;
        i128 begin, end;
    };
    Buf bufs[2];
    int nb = 0;
    auto addr = [](const void *p) { return i128(reinterpret_cast<uintptr_t>(p)); };
    if (saved && saved_bytes > 0)
        bufs[nb++] = Buf{"saved", addr(saved), addr(saved) + i128(saved_bytes)};
    if (workspace && workspace_bytes > 0)
        bufs[nb++] = Buf{"workspace", addr(workspace), addr(workspace) + i128(workspace_bytes)};
    if (nb == 2 && bufs[0].begin < bufs[1].end && bufs[1].begin < bufs[0].end) {
        *why = "workspace: overlaps saved";
        return FATTN_ERR_OVERLAP;
    }
    // `output`: written by this op. The workspace is written, so it clashes with every view; the
    // backward only reads `saved`, so there it clashes only with the gradients it writes.
    const bool bwd = op == AttnOp::BWD;
    const View views[] = {
        {"q", vw.q, false, false},      {"k", vw.k, false, false},     {"v", vw.v, false, false},
        {"o", vw.o, !bwd, false},       {"lse", vw.lse, !bwd, true},   {"dout", vw.dout, false, false},
        {"dq", vw.dq, true, false},     {"dk", vw.dk, true, false},    {"dv", vw.dv, true, false},
        {"bias", params.bias.data ? &params.bias : nullptr, false, false},
    };
    for (int b = 0; b < nb; ++b)
        for (const View &v : views) {
            if (!v.t || !v.t->data || numel(*v.t) == 0) continue;
            if (bwd && string(bufs[b].name) == "saved" && !v.output) continue;
            i128 v0, v1;
            byte_span(*v.t, v.lse_layout ? 3 : 4, &v0, &v1);
            if (bufs[b].begin < v1 && v0 < bufs[b].end) {
                *why = string(bufs[b].name) + ": overlaps " + v.name;
                return FATTN_ERR_OVERLAP;
            }
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
    Checker ck{why};
    const bool fwd_outs = op != AttnOp::QUERY;
    const bool bwd = op == AttnOp::BWD;

    // ---- null pointers (structs) ----
    FATTN_RETURN_IF(!ctx, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    FATTN_RETURN_IF(!params, FATTN_ERR_NULL_POINTER, "params: is NULL");
    View views[9];
    int nviews = 0;
    views[nviews++] = View{"q", vw.q, false, false};
    views[nviews++] = View{"k", vw.k, false, false};
    views[nviews++] = View{"v", vw.v, false, false};
    if (fwd_outs) {
        views[nviews++] = View{"o", vw.o, !bwd, false};
        views[nviews++] = View{"lse", vw.lse, !bwd, true};
    }
    if (bwd) {
        views[nviews++] = View{"dout", vw.dout, false, false};
        views[nviews++] = View{"dq", vw.dq, true, false};
        views[nviews++] = View{"dk", vw.dk, true, false};
        views[nviews++] = View{"dv", vw.dv, true, false};
    }
    for (int i = 0; i < nviews; ++i)
        FATTN_RETURN_IF(!views[i].t, FATTN_ERR_NULL_POINTER,
                        string(views[i].name) + ": tensor pointer is NULL");
    const fattn_attn_params &p = *params;
    const fattn_tensor &q = *vw.q, &k = *vw.k, &v = *vw.v;
    const bool has_bias = p.bias.data != nullptr;

    // ---- enum values ----
    for (int i = 0; i < nviews; ++i)
        FATTN_RETURN_IF(!valid_dtype(views[i].t->dtype), FATTN_ERR_BAD_VALUE,
                        string(views[i].name) + ": dtype " + S(raw_enum(views[i].t->dtype)) +
                            " is not a fattn_dtype");
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
        if (x.lse_layout) {
            FATTN_RETURN_IF(x.t->dtype != FATTN_F32, FATTN_ERR_DTYPE_MISMATCH,
                            string(x.name) + ": dtype is " + fattn_dtype_name(x.t->dtype) +
                                ", must be f32");
        } else {
            FATTN_RETURN_IF(x.t->dtype != q.dtype, FATTN_ERR_DTYPE_MISMATCH,
                            string(x.name) + ": dtype is " + fattn_dtype_name(x.t->dtype) +
                                " but q is " + fattn_dtype_name(q.dtype));
        }
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
            fattn_status s = check_shape(ck, views[i], w);
            if (s != FATTN_OK) return s;
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

    // ---- strides ----
    for (int i = 0; i < nviews; ++i) {
        fattn_status s = check_strides(ck, views[i]);
        if (s != FATTN_OK) return s;
    }

    // ---- NULL data (size queries may describe shapes without memory) ----
    if (op != AttnOp::QUERY)
        for (int i = 0; i < nviews; ++i)
            FATTN_RETURN_IF(!views[i].t->data && numel(*views[i].t) > 0, FATTN_ERR_NULL_POINTER,
                            string(views[i].name) + ": data is NULL in a tensor of " +
                                S(numel(*views[i].t)) + " elements");

    // ---- bias (shape/dtype/strides; before overlap, which needs its strides sane) ----
    View bias_view{"bias", &p.bias, false, false};
    if (has_bias) {
        const fattn_tensor &b = p.bias;
        FATTN_RETURN_IF(!valid_dtype(b.dtype), FATTN_ERR_BAD_BIAS,
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
        fattn_status s = check_strides(ck, bias_view);
        if (s != FATTN_OK) return s;
    }

    // ---- overlap: outputs pairwise, and every output against every input ----
    if (op != AttnOp::QUERY) {
        View all[10];
        int n = 0;
        for (int i = 0; i < nviews; ++i) all[n++] = views[i];
        if (has_bias) all[n++] = bias_view;
        for (int i = 0; i < n; ++i) {
            if (!all[i].output) continue;
            for (int j = 0; j < n; ++j) {
                if (j == i || (all[j].output && j < i)) continue;  // each output pair once
                FATTN_RETURN_IF(views_overlap(all[i], all[j]), FATTN_ERR_OVERLAP,
                                string(all[i].name) + ": overlaps " +
                                    (all[j].output ? "output " : "input ") + all[j].name);
            }
        }
    }

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
        FATTN_RETURN_IF(p.num_seqs < 1, FATTN_ERR_BAD_SEQLENS,
                        "num_seqs: is " + S(p.num_seqs) + ", must be >= 1 with cu_seqlens");
        FATTN_RETURN_IF(B != 1, FATTN_ERR_BAD_SEQLENS,
                        "q: ne[0] (batch) is " + S(B) + " but varlen (cu_seqlens) requires B = 1");
        FATTN_RETURN_IF(Sq > INT32_MAX || Skv > INT32_MAX, FATTN_ERR_BAD_SEQLENS,
                        "cu_seqlens: int32 offsets cannot index " + S(std::max(Sq, Skv)) +
                            " tokens");
        FATTN_RETURN_IF(p.max_seqlen_q < 0, FATTN_ERR_BAD_SEQLENS,
                        "max_seqlen_q: is " + S(p.max_seqlen_q) + ", must be >= 0");
        FATTN_RETURN_IF(p.max_seqlen_kv < 0, FATTN_ERR_BAD_SEQLENS,
                        "max_seqlen_kv: is " + S(p.max_seqlen_kv) + ", must be >= 0");
        if (ctx->backend == FATTN_BACKEND_CPU) {
            fattn_status s = check_cu_seqlens(ck, "cu_seqlens_q", p.cu_seqlens_q, p.num_seqs, Sq,
                                              "q", &max_q);
            if (s != FATTN_OK) return s;
            s = check_cu_seqlens(ck, "cu_seqlens_kv", p.cu_seqlens_kv, p.num_seqs, Skv, "k",
                                 &max_kv);
            if (s != FATTN_OK) return s;
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
    r.q = q.data; r.q_sb = q.nb[0]; r.q_ss = q.nb[1]; r.q_sh = q.nb[2];
    r.k = k.data; r.k_sb = k.nb[0]; r.k_ss = k.nb[1]; r.k_sh = k.nb[2];
    r.v = v.data; r.v_sb = v.nb[0]; r.v_ss = v.nb[1]; r.v_sh = v.nb[2];
    if (fwd_outs) {
        const fattn_tensor &o = *vw.o, &lse = *vw.lse;
        r.o = o.data; r.o_sb = o.nb[0]; r.o_ss = o.nb[1]; r.o_sh = o.nb[2];
        r.lse = static_cast<float *>(lse.data); r.lse_sb = lse.nb[0]; r.lse_sh = lse.nb[1];
    }
    if (has_bias) {
        const fattn_tensor &b = p.bias;
        r.bias = b.data;
        r.bias_dtype = b.dtype;
        // A dim of size 1 broadcasts: its stride is normalized to 0 so kernels need no branch.
        r.bias_sb = b.ne[0] == 1 ? 0 : b.nb[0];
        r.bias_sh = b.ne[1] == 1 ? 0 : b.nb[1];
        r.bias_si = b.ne[2] == 1 ? 0 : b.nb[2];
    }
    // A window wider than Sq + Skv allows the same keys as an unbounded one (diag - left < 0 and
    // diag + right >= Skv for every row); clamping keeps key_range()'s diag ± w free of overflow.
    const int64_t wlim = r.total_q + r.total_kv;
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
    r.nthreads = ctx->nthreads;
    r.stream = ctx->stream;
    if (bwd) {
        const fattn_tensor &g = *vw.dout, &dq = *vw.dq, &dk = *vw.dk, &dv = *vw.dv;
        r.dout = g.data; r.do_sb = g.nb[0]; r.do_ss = g.nb[1]; r.do_sh = g.nb[2];
        r.dq = dq.data; r.dq_sb = dq.nb[0]; r.dq_ss = dq.nb[1]; r.dq_sh = dq.nb[2];
        r.dk = dk.data; r.dk_sb = dk.nb[0]; r.dk_ss = dk.nb[1]; r.dk_sh = dk.nb[2];
        r.dv = dv.data; r.dv_sb = dv.nb[0]; r.dv_ss = dv.nb[1]; r.dv_sh = dv.nb[2];
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
        if (s != FATTN_OK) return ck.fail(s, reason.empty() ? string("backend: unsupported") : reason);
    }

    out->p = r;
    out->work = work;
    return FATTN_OK;
}

}  // namespace fattn
