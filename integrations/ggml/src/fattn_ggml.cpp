// fattn_ggml.cpp — fattn's softmax attention as ggml custom ops (forward and backward) and the
// backward hook that makes the forward differentiable in ggml_build_backward_expand.
//
// Graph shape of one op:
//   fa  = GGML_OP_CUSTOM, F32 [n_o + n_lse]: O [Dv, Sq, Hq, B] then LSE [Sq, Hq, B], contiguous;
//         srcs q, k, v (, mask); fattn_attn_fwd writes both parts.
//   o   = view of fa's O part (what the caller gets).
//   bwd = GGML_OP_CUSTOM, F32 [n_q + n_k + n_v (+ n_o)]: dQ, dK, dV (contiguous, shaped like q,
//         k, v; F32 for every input type); srcs q, k, v, fa, dO (a 4-d view), (mask),
//         (cu_seqlens_q, cu_seqlens_kv); fattn_attn_bwd writes all three.
// 16-bit q, k, v (F16, BF16): fattn's outputs have q's dtype. The forward has fattn write O in T
// into the upper half of fa's O part and widens it in place; the backward rounds O and dO to T
// in the n_o-float tail of its node, has fattn write dQ, dK, dV in T into the upper half of the
// gradient part and widens them in place (widen_in_place: ascending, each value read before the
// float that overlaps it is written).
// ggml's VIEW backward turns o's gradient into fa's (acc into a zero copy of fa), so the hook on fa
// reads dO from the first n_o elements of that gradient; the LSE part of it is never read.
//
// Threads: ggml calls a custom op's function on every thread of the graph (ith = 0 .. nth-1).
// Thread 0 makes a CPU fattn context of nth threads whose parallel loops run on all of them
// (fattn_ctx_set_parallel); threads 1.. wait for loops and take items until thread 0 is done.
#include "fattn_ggml.h"
#include "fattn_ggml_common.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#ifdef FATTN_GGML_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fattn_ggml_detail {

thread_local string t_last_error;

fattn_status fail(fattn_status s, string msg) {
    t_last_error = std::move(msg);
    return s;
}

// Compute-time failures (the op has no status to return from inside ggml_graph_compute).
std::mutex g_compute_mu;
int g_compute_failures = 0;
string g_compute_first;

void record_compute_failure(const string &msg) {
    std::lock_guard<std::mutex> lock(g_compute_mu);
    if (g_compute_failures++ == 0) g_compute_first = msg;
}

const string &last_error() { return t_last_error; }

}  // namespace fattn_ggml_detail

namespace {

using namespace fattn_ggml_detail;

// ------------------------------------------------------------------ the op record

constexpr uint32_t kMagicFwd = 0x46414631u;  // "FAF1"
constexpr uint32_t kMagicBwd = 0x46414231u;  // "FAB1"

// What a node computes, besides its tensors.
struct Settings {
    fattn_attn_params base;   // scale, causal, prec (requested), window, algo; no bias, no seqlens
    bool has_mask = false;    // a mask src follows the fixed srcs
    bool has_varlen = false;  // cu_seqlens_q, cu_seqlens_kv srcs follow (after the mask)
};

struct Op {
    uint32_t magic;
    Settings set;
    fattn_prec resolved;  // what runs
    ggml_tensor *o;       // forward: the view handed to the caller
    Pool pool;
};

Op *new_op(ggml_context *ctx, uint32_t magic, const Op *from) {
    void *mem = ggml_new_buffer(ctx, record_bytes<Op>());
    Op *op = new (mem) Op();
    op->magic = magic;
    op->set = from->set;
    op->resolved = from->resolved;
    op->o = nullptr;
    return op;
}

void fwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata);
void bwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata);
void attn_backward(ggml_context *ctx, ggml_tensor *fa, ggml_tensor *grad, const bool *needs_grad,
                   ggml_tensor **src_grads, void *userdata);

// The forward record of o (nullptr unless o is an fattn_ggml_attn output).
const Op *fwd_of_o(const ggml_tensor *o) {
    if (!o || !o->view_src) return nullptr;
    const Op *op = record_of<Op>(o->view_src, fwd_compute, kMagicFwd);
    return op && op->o == o ? op : nullptr;
}

// ------------------------------------------------------------------ views

// 16-bit values <-> f32 (ggml's conversions: round to nearest even).
float half_to_f32(uint16_t h, fattn_dtype dt) {
    if (dt == FATTN_BF16) {
        ggml_bf16_t b;
        b.bits = h;
        return ggml_bf16_to_fp32(b);
    }
    return ggml_fp16_to_fp32(h);
}

uint16_t f32_to_half(float x, fattn_dtype dt) {
    if (dt == FATTN_BF16) return ggml_fp32_to_bf16(x).bits;
    return ggml_fp32_to_fp16(x);
}

// n 16-bit values stored at byte offset 2n of base become n floats base[0..n). Ascending: float i
// occupies bytes [4i, 4i + 4), which hold only the 16-bit values 2i - n and 2i - n + 1, both <= i
// and so already read (value i just before). Byte copies: the compiler keeps the order.
void widen_in_place(float *base, int64_t n, fattn_dtype dt) {
    unsigned char *b = reinterpret_cast<unsigned char *>(base);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * n + 2 * i, sizeof h);
        const float f = half_to_f32(h, dt);
        std::memcpy(b + 4 * i, &f, sizeof f);
    }
}

// A (strided) F32 ggml tensor of t's shape rounded to dt into a contiguous 16-bit block.
void narrow_to(const ggml_tensor *t, uint16_t *dst, fattn_dtype dt) {
    const char *d = static_cast<const char *>(t->data);
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
                const char *row = d + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                    float x;
                    std::memcpy(&x, row + i0 * t->nb[0], sizeof x);
                    *dst++ = f32_to_half(x, dt);
                }
            }
}

// mask [Skv, Sq', Hm, Bm] as fattn's bias [Bm, Hm, Sq, Skv]; size-1 dims broadcast (stride 0).
fattn_tensor bias_view(const ggml_tensor *m, void *data, int64_t Sq) {
    const int64_t es = (int64_t)ggml_type_size(m->type);
    const fattn_dtype dt = dtype_of(m->type);
    return fattn_tensor_4d(data, dt, m->ne[3], m->ne[2], Sq, m->ne[0],
                           m->ne[3] == 1 ? 0 : (int64_t)m->nb[3] / es,
                           m->ne[2] == 1 ? 0 : (int64_t)m->nb[2] / es, (int64_t)m->nb[1] / es,
                           (int64_t)m->nb[0] / es);
}

// Varlen offsets: a node's cu_seqlens tensors (data read at compute time), or, for the
// graph-building calls (the contents are graph data, unknown then), stand-in offsets of the same
// num_seqs: one sequence of all tokens, the others empty.
struct Seqlens {
    const int32_t *q = nullptr, *kv = nullptr;
    int64_t num_seqs = 0;
    std::vector<int32_t> stand_q, stand_kv;
};

Seqlens stand_in_seqlens(const ggml_tensor *cu, int64_t Sq, int64_t Skv) {
    Seqlens sl;
    if (!cu) return sl;
    sl.num_seqs = cu->ne[0] - 1;
    sl.stand_q.assign(size_t(cu->ne[0]), int32_t(Sq));
    sl.stand_kv.assign(size_t(cu->ne[0]), int32_t(Skv));
    sl.stand_q[0] = sl.stand_kv[0] = 0;
    sl.q = sl.stand_q.data();
    sl.kv = sl.stand_kv.data();
    return sl;
}

Seqlens node_seqlens(const ggml_tensor *cuq, const ggml_tensor *cukv) {
    Seqlens sl;
    sl.num_seqs = cuq->ne[0] - 1;
    sl.q = static_cast<const int32_t *>(cuq->data);
    sl.kv = static_cast<const int32_t *>(cukv->data);
    return sl;
}

fattn_attn_params make_params(const Settings &st, const ggml_tensor *mask, void *mask_data,
                              int64_t Sq, const Seqlens &sl) {
    fattn_attn_params p = st.base;
    if (mask) p.bias = bias_view(mask, mask_data, Sq);
    if (sl.q) {
        p.cu_seqlens_q = sl.q;
        p.cu_seqlens_kv = sl.kv;
        p.num_seqs = sl.num_seqs;
    }
    return p;
}

Settings settings_of(const fattn_ggml_attn_opts &o) {
    Settings st;
    st.base = fattn_attn_params_default();
    st.base.scale = o.scale;
    st.base.causal = o.causal;
    st.base.prec = o.prec;
    st.base.window_left = o.window_left;
    st.base.window_right = o.window_right;
    st.base.window_align = o.window_align;
    st.base.algo = FATTN_ALGO_FUSED;
    st.has_mask = o.mask != nullptr;
    st.has_varlen = o.cu_seqlens_q != nullptr || o.cu_seqlens_kv != nullptr;
    return st;
}

// ------------------------------------------------------------------ input rules (ggml's terms)

fattn_status check_inputs(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v,
                          const fattn_ggml_attn_opts &opt) {
    const ggml_tensor *mask = opt.mask;
    const float scale = opt.scale;
    if (!q) return fail(FATTN_ERR_NULL_POINTER, "q: is NULL");
    if (!k) return fail(FATTN_ERR_NULL_POINTER, "k: is NULL");
    if (!v) return fail(FATTN_ERR_NULL_POINTER, "v: is NULL");
    const ggml_tensor *qkv[3] = {q, k, v};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
        const ggml_type t = qkv[i]->type;
        if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16)
            return fail(FATTN_ERR_DTYPE_MISMATCH, string(names[i]) + ": type is " +
                                                      ggml_type_name(t) +
                                                      "; q, k and v must be F32, F16 or BF16");
        fattn_status s = check_layout(names[i], qkv[i]);
        if (s != FATTN_OK) return s;
    }
    // Extents that must agree: a's ne[dim] with b's.
    const struct {
        const char *a;
        const ggml_tensor *ta;
        const char *b;
        const ggml_tensor *tb;
        int dim;
        const char *what;
    } same[] = {
        {"k", k, "q", q, 0, "head dim D"}, {"k", k, "q", q, 3, "batch"}, {"v", v, "q", q, 3, "batch"},
        {"v", v, "k", k, 1, "keys"},       {"v", v, "k", k, 2, "kv heads"},
    };
    for (const auto &e : same)
        if (e.ta->ne[e.dim] != e.tb->ne[e.dim])
            return fail(FATTN_ERR_SHAPE_MISMATCH, string(e.a) + ": ne" + S(e.dim) + " (" + e.what +
                                                      ") is " + S(e.ta->ne[e.dim]) + " but " + e.b +
                                                      " has " + S(e.tb->ne[e.dim]));
    if (k->ne[2] <= 0 || q->ne[2] % k->ne[2] != 0)
        return fail(FATTN_ERR_GQA_HEADS, "k: ne2 (kv heads) is " + S(k->ne[2]) +
                                             ", must divide q's ne2 (query heads) " + S(q->ne[2]));
    if (mask) {
        if (mask->type != GGML_TYPE_F32 && mask->type != GGML_TYPE_F16 &&
            mask->type != GGML_TYPE_BF16)
            return fail(FATTN_ERR_BAD_BIAS, string("mask: type is ") + ggml_type_name(mask->type) +
                                                ", must be F32, F16 or BF16");
        fattn_status s = check_layout("mask", mask);
        if (s != FATTN_OK) return s == FATTN_ERR_BAD_STRIDE ? FATTN_ERR_BAD_BIAS : s;
        if (mask->ne[0] != k->ne[1])
            return fail(FATTN_ERR_BAD_BIAS, "mask: ne0 is " + S(mask->ne[0]) + " but k has " +
                                                S(k->ne[1]) + " keys (ne1)");
        if (mask->ne[1] < q->ne[1])
            return fail(FATTN_ERR_BAD_BIAS, "mask: ne1 is " + S(mask->ne[1]) +
                                                ", must be at least q's " + S(q->ne[1]) +
                                                " query rows (ne1)");
        if (mask->ne[2] != 1 && mask->ne[2] != q->ne[2])
            return fail(FATTN_ERR_BAD_BIAS, "mask: ne2 is " + S(mask->ne[2]) +
                                                ", must be 1 or q's " + S(q->ne[2]) + " heads");
        if (mask->ne[3] != 1 && mask->ne[3] != q->ne[3])
            return fail(FATTN_ERR_BAD_BIAS, "mask: ne3 is " + S(mask->ne[3]) +
                                                ", must be 1 or q's batch " + S(q->ne[3]));
    }
    if (!std::isfinite(scale))
        return fail(FATTN_ERR_BAD_VALUE, "scale: is not finite");
    const int c = raw_enum(opt.causal);
    if (c != FATTN_CAUSAL_NONE && c != FATTN_CAUSAL_TOP_LEFT && c != FATTN_CAUSAL_BOTTOM_RIGHT)
        return fail(FATTN_ERR_BAD_MASK, "causal: " + S(c) + " is not a fattn_causal");
    const int pr = raw_enum(opt.prec);
    if (pr != FATTN_PREC_AUTO && pr != FATTN_PREC_F32 && pr != FATTN_PREC_TF32 &&
        pr != FATTN_PREC_NATIVE)
        return fail(FATTN_ERR_BAD_VALUE, "prec: " + S(pr) +
                                             " is not FATTN_PREC_AUTO, FATTN_PREC_F32, "
                                             "FATTN_PREC_TF32 or FATTN_PREC_NATIVE");
    const int wa = raw_enum(opt.window_align);
    if (wa != FATTN_ALIGN_TOP_LEFT && wa != FATTN_ALIGN_BOTTOM_RIGHT)
        return fail(FATTN_ERR_BAD_MASK, "window_align: " + S(wa) + " is not a fattn_align");
    if (!opt.cu_seqlens_q != !opt.cu_seqlens_kv)
        return fail(FATTN_ERR_BAD_SEQLENS, opt.cu_seqlens_q
                                               ? "cu_seqlens_kv: is NULL but cu_seqlens_q is given "
                                                 "(varlen needs both)"
                                               : "cu_seqlens_q: is NULL but cu_seqlens_kv is given "
                                                 "(varlen needs both)");
    if (opt.cu_seqlens_q) {
        fattn_status s = check_seqlens("cu_seqlens_q", opt.cu_seqlens_q);
        if (s == FATTN_OK) s = check_seqlens("cu_seqlens_kv", opt.cu_seqlens_kv);
        if (s != FATTN_OK) return s;
        if (opt.cu_seqlens_kv->ne[0] != opt.cu_seqlens_q->ne[0])
            return fail(FATTN_ERR_BAD_SEQLENS, "cu_seqlens_kv: has " + S(opt.cu_seqlens_kv->ne[0]) +
                                                   " offsets but cu_seqlens_q has " +
                                                   S(opt.cu_seqlens_q->ne[0]));
    }
    return FATTN_OK;
}

// What the build-time queries ask fattn with: a CPU context, the views of q, k, v (data stand-ins
// where a tensor has none yet), stand-in offsets of the real count for varlen, and the params.
struct Probe {
    CpuCtx c;
    fattn_tensor tq, tk, tv;
    Seqlens sl;
    fattn_attn_params p;
    Probe(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const fattn_ggml_attn_opts &opt)
        : tq(bshd(q, data_or_fake(q, 0))), tk(bshd(k, data_or_fake(k, 1))), tv(bshd(v, data_or_fake(v, 2))),
          sl(stand_in_seqlens(opt.cu_seqlens_q, q->ne[1], k->ne[1])),
          p(make_params(settings_of(opt), opt.mask, opt.mask ? data_or_fake(opt.mask, 3) : nullptr, q->ne[1], sl)) {}
    Probe(const Probe &) = delete;
    Probe &operator=(const Probe &) = delete;
};

fattn_ggml_attn_opts opts_of(float scale, const ggml_tensor *mask, fattn_causal causal,
                             fattn_prec prec) {
    fattn_ggml_attn_opts o = fattn_ggml_attn_opts_default();
    o.mask = const_cast<ggml_tensor *>(mask);
    o.scale = scale;
    std::memcpy(&o.causal, &causal, sizeof causal);  // bits: check_inputs judges the value
    std::memcpy(&o.prec, &prec, sizeof prec);
    return o;
}

// ggml-side rules, then fattn_attn_supports() at these shapes and dtypes; on success *resolved
// (if given).
fattn_status supports(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v,
                      const fattn_ggml_attn_opts &opt, fattn_prec *resolved) {
    fattn_status s = check_inputs(q, k, v, opt);
    if (s != FATTN_OK) return s;
    const Probe pr(q, k, v, opt);
    if (!pr.c.ctx) return fail(FATTN_ERR_OUT_OF_MEMORY, "fattn: a CPU context could not be made");
    char why[512];
    s = fattn_attn_supports(pr.c.ctx, &pr.p, &pr.tq, &pr.tk, &pr.tv, why, sizeof why);
    if (s != FATTN_OK)
        return fail(s, string("fattn (views [B, S, H, D] = ggml ne3, ne1, ne2, ne0): ") + why);
    if (resolved) *resolved = fattn_resolve_prec(pr.c.ctx, &pr.p, &pr.tq);
    return FATTN_OK;
}

// ------------------------------------------------------------------ compute functions

// The call's params for a node: the op's settings, then its mask and cu_seqlens srcs (those it
// has, from src[first] on).
fattn_attn_params node_params(const Settings &st, const ggml_tensor *dst, int first) {
    const ggml_tensor *mask = st.has_mask ? dst->src[first] : nullptr;
    const int iv = first + (st.has_mask ? 1 : 0);
    const Seqlens sl = st.has_varlen ? node_seqlens(dst->src[iv], dst->src[iv + 1]) : Seqlens();
    return make_params(st, mask, mask ? mask->data : nullptr, dst->src[0]->ne[1], sl);
}

void fwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata) {
    Op *op = static_cast<Op *>(userdata);
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t Dv = v->ne[0], Sq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t n_o = Dv * Sq * Hq * B;
    const fattn_dtype dt = dtype_of(q->type);
    float *base = static_cast<float *>(dst->data);
    drive(&op->pool, dst, ith, nth, "fattn_attn_fwd", [&](fattn_ctx_t *fc) {
        const fattn_tensor tq = bshd(q, q->data), tk = bshd(k, k->data), tv = bshd(v, v->data);
        // 16-bit: O in T in the upper half of the O part, widened below.
        void *o_data = dt == FATTN_F32 ? (void *)base : (void *)(reinterpret_cast<uint16_t *>(base) + n_o);
        const fattn_tensor to = bshd_contiguous(o_data, Dv, Sq, Hq, B, dt);
        const fattn_tensor tl = lse_view(base + n_o, Sq, Hq, B);
        const fattn_attn_params p = node_params(op->set, dst, 3);
        fattn_status s = fattn_attn_fwd(fc, &p, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0);
        if (s == FATTN_OK && dt != FATTN_F32) widen_in_place(base, n_o, dt);
        return s;
    });
}

void bwd_compute(ggml_tensor *dst, int ith, int nth, void *userdata) {
    Op *op = static_cast<Op *>(userdata);
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *fa = dst->src[3],
                      *dout = dst->src[4];
    const int64_t D = q->ne[0], Dv = v->ne[0], Sq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t Skv = k->ne[1], Hkv = k->ne[2];
    const int64_t n_o = Dv * Sq * Hq * B;
    const fattn_dtype dt = dtype_of(q->type);
    float *fab = static_cast<float *>(fa->data);
    float *g = static_cast<float *>(dst->data);
    drive(&op->pool, dst, ith, nth, "fattn_attn_bwd", [&](fattn_ctx_t *fc) {
        const fattn_tensor tq = bshd(q, q->data), tk = bshd(k, k->data), tv = bshd(v, v->data);
        const fattn_tensor tl = lse_view(fab + n_o, Sq, Hq, B);
        const int64_t nq = D * Sq * Hq * B, nk = D * Skv * Hkv * B, nv = Dv * Skv * Hkv * B;
        const fattn_attn_params p = node_params(op->set, dst, 5);
        if (dt == FATTN_F32) {
            const fattn_tensor to = bshd_contiguous(fab, Dv, Sq, Hq, B);
            const fattn_tensor tdo = bshd(dout, dout->data);
            const fattn_tensor tdq = bshd_contiguous(g, D, Sq, Hq, B);
            const fattn_tensor tdk = bshd_contiguous(g + nq, D, Skv, Hkv, B);
            const fattn_tensor tdv = bshd_contiguous(g + nq + nk, Dv, Skv, Hkv, B);
            return fattn_attn_bwd(fc, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk,
                                  &tdv, nullptr, 0);
        }
        // 16-bit: dQ, dK, dV in T at halves [N, 2N), O and dO in T at halves [2N, 2N + 2 n_o).
        const int64_t N = nq + nk + nv;
        uint16_t *h = reinterpret_cast<uint16_t *>(g);
        uint16_t *o16 = h + 2 * N, *do16 = o16 + n_o;
        for (int64_t i = 0; i < n_o; ++i) o16[i] = f32_to_half(fab[i], dt);  // exact: O is T-valued
        narrow_to(dout, do16, dt);
        const fattn_tensor to = bshd_contiguous(o16, Dv, Sq, Hq, B, dt);
        const fattn_tensor tdo = bshd_contiguous(do16, Dv, Sq, Hq, B, dt);
        const fattn_tensor tdq = bshd_contiguous(h + N, D, Sq, Hq, B, dt);
        const fattn_tensor tdk = bshd_contiguous(h + N + nq, D, Skv, Hkv, B, dt);
        const fattn_tensor tdv = bshd_contiguous(h + N + nq + nk, Dv, Skv, Hkv, B, dt);
        fattn_status s = fattn_attn_bwd(fc, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq,
                                        &tdk, &tdv, nullptr, 0);
        if (s == FATTN_OK) widen_in_place(g, N, dt);
        return s;
    });
}

// ------------------------------------------------------------------ the CUDA backend
// With FATTN_GGML_CUDA, fa and bwd nodes of F32 q, k, v also carry a CUDA function (ggml patch
// 0003): on ggml's CUDA backend fattn's CUDA kernels run on ggml's stream, reading and writing
// the tensors where ggml put them. Same node layout as above; F32 only (the 16-bit forms widen
// O and the gradients in place on the host), so for F16 / BF16 the CUDA backend's supports_op
// says no and ggml would run the node on the CPU: fattn_ggml_backend_check names such nodes.
#ifdef FATTN_GGML_WITH_CUDA

// One fattn CUDA context per (device, stream) and thread, kept for the thread's life: making a
// context queries the device, too slow for every node.
fattn_ctx_t *cuda_ctx(int device, void *stream) {
    struct Entry {
        int device;
        void *stream;
        fattn_ctx_t *ctx;
    };
    struct Cache {
        std::vector<Entry> e;
        ~Cache() {
            for (Entry &x : e) fattn_ctx_free(x.ctx);
        }
    };
    thread_local Cache cache;
    for (const Entry &x : cache.e)
        if (x.device == device && x.stream == stream) return x.ctx;
    fattn_ctx_t *ctx = nullptr;
    if (fattn_ctx_init_cuda(device, stream, &ctx) != FATTN_OK) return nullptr;
    cache.e.push_back({device, stream, ctx});
    return ctx;
}

int current_device() {
    int d = 0;
    return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}

// Varlen on CUDA: the offsets are device data the host cannot read, and fattn's CUDA path sizes
// its grid by max_seqlen_q / _kv, which it then needs given; the packed totals bound every
// sequence (correct for any packing; with many short sequences most CTAs find nothing to do).
void cuda_seqlen_bounds(fattn_attn_params *p, const ggml_tensor *dst) {
    if (!p->cu_seqlens_q) return;
    p->max_seqlen_q = dst->src[0]->ne[1];
    p->max_seqlen_kv = dst->src[1]->ne[1];
}

// The node's fattn views and params with stand-ins where ggml has not placed a tensor yet
// (supports_op may ask before allocation), as the build-time probe does.
struct NodeProbe {
    fattn_tensor tq, tk, tv;
    Seqlens sl;
    fattn_attn_params p;
    NodeProbe(const Op *op, const ggml_tensor *dst, int first) {
        const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
        tq = bshd(q, data_or_fake(q, 0)), tk = bshd(k, data_or_fake(k, 1)), tv = bshd(v, data_or_fake(v, 2));
        const ggml_tensor *mask = op->set.has_mask ? dst->src[first] : nullptr;
        const int iv = first + (op->set.has_mask ? 1 : 0);
        sl = op->set.has_varlen ? stand_in_seqlens(dst->src[iv], q->ne[1], k->ne[1]) : Seqlens();
        p = make_params(op->set, mask, mask ? data_or_fake(mask, 3) : nullptr, q->ne[1], sl);
        cuda_seqlen_bounds(&p, dst);
    }
};

// ggml_custom_cuda_supports_t of both nodes: F32 q, k, v, and fattn_attn_supports on the device.
bool cuda_supports(const ggml_tensor *dst, int device, void *userdata) {
    const Op *op = static_cast<const Op *>(userdata);
    if (dst->src[0]->type != GGML_TYPE_F32) return false;
    fattn_ctx_t *fc = cuda_ctx(device, nullptr);
    if (!fc) return false;
    const NodeProbe pr(op, dst, op->magic == kMagicFwd ? 3 : 5);
    return fattn_attn_supports(fc, &pr.p, &pr.tq, &pr.tk, &pr.tv, nullptr, 0) == FATTN_OK;
}

// A failed call: the node's output becomes NaN (all bits set) on the stream, and the message is
// kept for fattn_ggml_compute_error.
void cuda_fail(ggml_tensor *dst, void *stream, const char *what, fattn_status s, fattn_ctx_t *fc) {
    cudaMemsetAsync(dst->data, 0xFF, ggml_nbytes(dst), static_cast<cudaStream_t>(stream));
    record_compute_failure(string(what) + " (" + (dst->name[0] ? dst->name : "?") + ", CUDA): " +
                           fattn_status_string(s) + ": " +
                           (fc ? fattn_ctx_last_error(fc) : "no fattn CUDA context for the device"));
}

void fwd_cuda(ggml_tensor *dst, void *stream, void *userdata) {
    const Op *op = static_cast<const Op *>(userdata);
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t Dv = v->ne[0], Sq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    float *base = static_cast<float *>(dst->data);
    fattn_ctx_t *fc = cuda_ctx(current_device(), stream);
    fattn_status s = FATTN_ERR_BACKEND_UNAVAILABLE;
    if (fc) {
        const fattn_tensor tq = bshd(q, q->data), tk = bshd(k, k->data), tv = bshd(v, v->data);
        const fattn_tensor to = bshd_contiguous(base, Dv, Sq, Hq, B);
        const fattn_tensor tl = lse_view(base + Dv * Sq * Hq * B, Sq, Hq, B);
        fattn_attn_params p = node_params(op->set, dst, 3);
        cuda_seqlen_bounds(&p, dst);
        s = fattn_attn_fwd(fc, &p, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0);
    }
    if (s != FATTN_OK) cuda_fail(dst, stream, "fattn_attn_fwd", s, fc);
}

void bwd_cuda(ggml_tensor *dst, void *stream, void *userdata) {
    const Op *op = static_cast<const Op *>(userdata);
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *fa = dst->src[3],
                      *dout = dst->src[4];
    const int64_t D = q->ne[0], Dv = v->ne[0], Sq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t Skv = k->ne[1], Hkv = k->ne[2];
    const int64_t nq = D * Sq * Hq * B, nk = D * Skv * Hkv * B;
    float *fab = static_cast<float *>(fa->data), *g = static_cast<float *>(dst->data);
    fattn_ctx_t *fc = cuda_ctx(current_device(), stream);
    fattn_status s = FATTN_ERR_BACKEND_UNAVAILABLE;
    if (fc) {
        const fattn_tensor tq = bshd(q, q->data), tk = bshd(k, k->data), tv = bshd(v, v->data);
        const fattn_tensor to = bshd_contiguous(fab, Dv, Sq, Hq, B);
        const fattn_tensor tl = lse_view(fab + Dv * Sq * Hq * B, Sq, Hq, B);
        const fattn_tensor tdo = bshd(dout, dout->data);
        const fattn_tensor tdq = bshd_contiguous(g, D, Sq, Hq, B);
        const fattn_tensor tdk = bshd_contiguous(g + nq, D, Skv, Hkv, B);
        const fattn_tensor tdv = bshd_contiguous(g + nq + nk, Dv, Skv, Hkv, B);
        fattn_attn_params p = node_params(op->set, dst, 5);
        cuda_seqlen_bounds(&p, dst);
        s = fattn_attn_bwd(fc, &p, &tq, &tk, &tv, &to, &tl, nullptr, &tdo, &tdq, &tdk, &tdv, nullptr, 0);
    }
    if (s != FATTN_OK) cuda_fail(dst, stream, "fattn_attn_bwd", s, fc);
}

// Give a node its CUDA function (F32 q, k, v only).
void offer_cuda(ggml_tensor *node, bool fwd) {
    if (node->src[0]->type == GGML_TYPE_F32) ggml_custom_set_cuda(node, fwd ? fwd_cuda : bwd_cuda, cuda_supports);
}
#else
void offer_cuda(ggml_tensor *, bool) {}
#endif

// ------------------------------------------------------------------ backward graph

// Elements of the bwd node of fa: the gradients, plus the 16-bit scratch (O, dO) for F16 / BF16.
int64_t back_elements(const ggml_tensor *fa) {
    const ggml_tensor *q = fa->src[0], *k = fa->src[1], *v = fa->src[2];
    const int64_t n = ggml_nelements(q) + ggml_nelements(k) + ggml_nelements(v);
    const int64_t n_o = v->ne[0] * q->ne[1] * q->ne[2] * q->ne[3];
    return q->type == GGML_TYPE_F32 ? n : n + n_o;
}

// The bwd node for fa and a dO view [Dv, Sq, Hq, B]; dq, dk, dv views of it (any may be NULL).
void build_back(ggml_context *ctx, ggml_tensor *fa, const Op *fop, ggml_tensor *dout,
                ggml_tensor **dq, ggml_tensor **dk, ggml_tensor **dv) {
    ggml_tensor *q = fa->src[0], *k = fa->src[1], *v = fa->src[2];
    const int64_t nq = ggml_nelements(q), nk = ggml_nelements(k);
    Op *bop = new_op(ctx, kMagicBwd, fop);
    // srcs q, k, v, fa, dO, then fa's own extras (mask, cu_seqlens) in fa's order
    ggml_tensor *args[GGML_MAX_SRC] = {q, k, v, fa, dout};
    int n_args = 5;
    for (int j = 3; j < GGML_MAX_SRC && fa->src[j]; ++j) args[n_args++] = fa->src[j];
    ggml_tensor *g = ggml_custom_4d(ctx, GGML_TYPE_F32, back_elements(fa), 1, 1, 1, args, n_args,
                                    bwd_compute, GGML_N_TASKS_MAX, bop);
    ggml_format_name(g, "fattn_attn_back");
    offer_cuda(g, false);
    auto part = [&](const ggml_tensor *like, int64_t offset) {
        const size_t es = sizeof(float);
        return ggml_view_4d(ctx, g, like->ne[0], like->ne[1], like->ne[2], like->ne[3],
                            like->ne[0] * es, like->ne[0] * like->ne[1] * es,
                            like->ne[0] * like->ne[1] * like->ne[2] * es, offset * es);
    };
    if (dq) *dq = part(q, 0);
    if (dk) *dk = part(k, nq);
    if (dv) *dv = part(v, nq + nk);
}

// ggml_custom_backward_t of fa: grad is fa's gradient ([n_o + n_lse]); its O part is dO.
void attn_backward(ggml_context *ctx, ggml_tensor *fa, ggml_tensor *grad, const bool *needs_grad,
                   ggml_tensor **src_grads, void *userdata) {
    const Op *fop = static_cast<const Op *>(userdata);
    if (!needs_grad[0] && !needs_grad[1] && !needs_grad[2]) return;  // only the mask: none
    ggml_tensor *g = grad;
    if (g->type != GGML_TYPE_F32) g = ggml_cast(ctx, g, GGML_TYPE_F32);
    if (!ggml_is_contiguous(g)) g = ggml_cont(ctx, g);
    const ggml_tensor *o = fop->o;
    const size_t es = sizeof(float);
    ggml_tensor *dout = ggml_view_4d(ctx, g, o->ne[0], o->ne[1], o->ne[2], o->ne[3], o->ne[0] * es,
                                     o->ne[0] * o->ne[1] * es, o->ne[0] * o->ne[1] * o->ne[2] * es, 0);
    ggml_tensor *d[3] = {nullptr, nullptr, nullptr};
    build_back(ctx, fa, fop, dout, &d[0], &d[1], &d[2]);
    for (int j = 0; j < 3; ++j)
        if (needs_grad[j]) src_grads[j] = d[j];
}

}  // namespace

// ------------------------------------------------------------------ C API

extern "C" {

fattn_ggml_attn_opts fattn_ggml_attn_opts_default(void) {
    fattn_ggml_attn_opts o;
    o.mask = nullptr;
    o.scale = 0.0f;
    o.causal = FATTN_CAUSAL_NONE;
    o.prec = FATTN_PREC_AUTO;
    o.window_left = -1;
    o.window_right = -1;
    o.window_align = FATTN_ALIGN_TOP_LEFT;
    o.cu_seqlens_q = nullptr;
    o.cu_seqlens_kv = nullptr;
    return o;
}

struct ggml_tensor *fattn_ggml_attn(struct ggml_context *ctx, struct ggml_tensor *q,
                                    struct ggml_tensor *k, struct ggml_tensor *v,
                                    struct ggml_tensor *mask, float scale, fattn_causal causal,
                                    fattn_prec prec) {
    const fattn_ggml_attn_opts o = opts_of(scale, mask, causal, prec);
    return fattn_ggml_attn_ex(ctx, q, k, v, &o);
}

struct ggml_tensor *fattn_ggml_attn_ex(struct ggml_context *ctx, struct ggml_tensor *q,
                                       struct ggml_tensor *k, struct ggml_tensor *v,
                                       const fattn_ggml_attn_opts *opts) {
    if (!ctx) {
        fail(FATTN_ERR_NULL_POINTER, "ctx: is NULL");
        return nullptr;
    }
    const fattn_ggml_attn_opts opt = opts ? *opts : fattn_ggml_attn_opts_default();
    struct ggml_tensor *mask = opt.mask;
    fattn_prec resolved = FATTN_PREC_AUTO;
    if (supports(q, k, v, opt, &resolved) != FATTN_OK) return nullptr;
    const int64_t Dv = v->ne[0], Sq = q->ne[1], Hq = q->ne[2], B = q->ne[3];
    const int64_t n_o = Dv * Sq * Hq * B, n_lse = Sq * Hq * B;
    if (!ctx_has_room(ctx, 2, size_t(n_o + n_lse) * sizeof(float), record_bytes<Op>())) return nullptr;
    Op proto{};
    proto.set = settings_of(opt);
    proto.resolved = resolved;
    Op *op = new_op(ctx, kMagicFwd, &proto);
    ggml_tensor *args[6] = {q, k, v};
    int n_args = 3;
    if (mask) args[n_args++] = mask;
    if (opt.cu_seqlens_q) {
        args[n_args++] = opt.cu_seqlens_q;
        args[n_args++] = opt.cu_seqlens_kv;
    }
    ggml_tensor *fa = ggml_custom_4d(ctx, GGML_TYPE_F32, n_o + n_lse, 1, 1, 1, args, n_args,
                                     fwd_compute, GGML_N_TASKS_MAX, op);
    ggml_format_name(fa, "fattn_attn");
    ggml_custom_set_backward(fa, attn_backward, op);
    offer_cuda(fa, true);
    const size_t es = sizeof(float);
    ggml_tensor *o = ggml_view_4d(ctx, fa, Dv, Sq, Hq, B, Dv * es, Dv * Sq * es, Dv * Sq * Hq * es, 0);
    ggml_format_name(o, "fattn_attn.o");
    op->o = o;
    return o;
}

struct ggml_tensor *fattn_ggml_attn_lse(struct ggml_context *ctx, struct ggml_tensor *o) {
    const Op *op = fwd_of_o(o);
    if (!ctx || !op) {
        fail(ctx ? FATTN_ERR_BAD_VALUE : FATTN_ERR_NULL_POINTER,
             ctx ? "o: is not a tensor returned by fattn_ggml_attn" : "ctx: is NULL");
        return nullptr;
    }
    return lse_part(ctx, o, "fattn_attn.lse");
}

int fattn_ggml_is_attn(const struct ggml_tensor *t) { return fwd_of_o(t) ? 1 : 0; }

fattn_prec fattn_ggml_attn_prec(const struct ggml_tensor *o) {
    const Op *op = fwd_of_o(o);
    return op ? op->resolved : FATTN_PREC_AUTO;
}

fattn_status fattn_ggml_graph_check(struct ggml_cgraph *graph, ggml_backend_t backend, char *why,
                                    size_t why_len) {
    auto put = [&](const string &m) {
        if (why && why_len) std::snprintf(why, why_len, "%s", m.c_str());
    };
    if (!graph || !backend) {
        put(graph ? "backend: is NULL" : "graph: is NULL");
        return fail(FATTN_ERR_NULL_POINTER, graph ? "backend: is NULL" : "graph: is NULL");
    }
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor *n = ggml_graph_node(graph, i);
        const bool path = is_path_node(n);
        if (!path && !record_of<Op>(n, fwd_compute, kMagicFwd) && !record_of<Op>(n, bwd_compute, kMagicBwd)) continue;
        if (ggml_backend_supports_op(backend, n)) continue;
        const ggml_tensor *q = n->src[0];
        const string m = string("fattn_ggml: backend ") + ggml_backend_name(backend) + " does not run node " +
                         (n->name[0] ? n->name : "?") + " (q " + ggml_type_name(q->type) + " [" + S(q->ne[0]) +
                         ", " + S(q->ne[1]) + ", " + S(q->ne[2]) + ", " + S(q->ne[3]) +
                         "]); ggml would run it on the CPU" +
                         (path ? " (the PaTH op has a CPU path only)"
                               : q->type != GGML_TYPE_F32 ? " (the CUDA path takes F32 q, k, v)" : "");
        put(m);
        return fail(FATTN_ERR_UNSUPPORTED, m);
    }
    put("");
    return FATTN_OK;
}

fattn_prec fattn_ggml_attn_prec_cuda(const struct ggml_tensor *o, int device) {
    const Op *op = fwd_of_o(o);
    if (!op) return FATTN_PREC_AUTO;
#ifdef FATTN_GGML_WITH_CUDA
    fattn_ctx_t *fc = cuda_ctx(device, nullptr);
    if (!fc) return FATTN_PREC_AUTO;
    const NodeProbe pr(op, o->view_src, 3);
    return fattn_resolve_prec(fc, &pr.p, &pr.tq);
#else
    (void)device;
    return FATTN_PREC_AUTO;
#endif
}

fattn_status fattn_ggml_attn_back(struct ggml_context *ctx, struct ggml_tensor *o,
                                  struct ggml_tensor *grad_o, struct ggml_tensor **dq,
                                  struct ggml_tensor **dk, struct ggml_tensor **dv) {
    if (!ctx) return fail(FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    if (!grad_o) return fail(FATTN_ERR_NULL_POINTER, "grad_o: is NULL");
    const Op *op = fwd_of_o(o);
    if (!op) return fail(FATTN_ERR_BAD_VALUE, "o: is not a tensor returned by fattn_ggml_attn");
    if (grad_o->type != GGML_TYPE_F32)
        return fail(FATTN_ERR_DTYPE_MISMATCH,
                    string("grad_o: type is ") + ggml_type_name(grad_o->type) + ", must be F32");
    for (int d = 0; d < 4; ++d)
        if (grad_o->ne[d] != o->ne[d])
            return fail(FATTN_ERR_SHAPE_MISMATCH, "grad_o: ne" + S(d) + " is " + S(grad_o->ne[d]) +
                                                      " but o has " + S(o->ne[d]));
    fattn_status s = check_layout("grad_o", grad_o);
    if (s != FATTN_OK) return s;
    const int64_t n = back_elements(o->view_src);
    if (!ctx_has_room(ctx, 4, size_t(n) * sizeof(float), record_bytes<Op>())) return FATTN_ERR_OUT_OF_MEMORY;
    build_back(ctx, o->view_src, op, grad_o, dq, dk, dv);
    return FATTN_OK;
}

fattn_status fattn_ggml_attn_supports(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                      const struct ggml_tensor *v, const struct ggml_tensor *mask,
                                      float scale, fattn_causal causal, fattn_prec prec, char *why,
                                      size_t why_len) {
    const fattn_ggml_attn_opts o = opts_of(scale, mask, causal, prec);
    return fattn_ggml_attn_supports_ex(q, k, v, &o, why, why_len);
}

fattn_status fattn_ggml_attn_supports_ex(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                         const struct ggml_tensor *v,
                                         const fattn_ggml_attn_opts *opts, char *why,
                                         size_t why_len) {
    const fattn_ggml_attn_opts opt = opts ? *opts : fattn_ggml_attn_opts_default();
    fattn_status s = supports(q, k, v, opt, nullptr);
    copy_why(why, why_len, s == FATTN_OK ? "" : last_error().c_str());
    return s;
}

fattn_status fattn_ggml_attn_memory(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                    const struct ggml_tensor *v, const struct ggml_tensor *mask,
                                    float scale, fattn_causal causal, fattn_prec prec,
                                    fattn_attn_memory_info *out) {
    const fattn_ggml_attn_opts o = opts_of(scale, mask, causal, prec);
    return fattn_ggml_attn_memory_ex(q, k, v, &o, out);
}

fattn_status fattn_ggml_attn_memory_ex(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                       const struct ggml_tensor *v,
                                       const fattn_ggml_attn_opts *opts,
                                       fattn_attn_memory_info *out) {
    if (!out) return fail(FATTN_ERR_NULL_POINTER, "out: is NULL");
    const fattn_ggml_attn_opts opt = opts ? *opts : fattn_ggml_attn_opts_default();
    fattn_status s = supports(q, k, v, opt, nullptr);
    if (s != FATTN_OK) return s;
    const Probe pr(q, k, v, opt);
    if (!pr.c.ctx) return fail(FATTN_ERR_OUT_OF_MEMORY, "fattn: a CPU context could not be made");
    s = fattn_attn_memory(pr.c.ctx, &pr.p, &pr.tq, &pr.tk, &pr.tv, out);
    if (s != FATTN_OK) return fail(s, string("fattn: ") + fattn_ctx_last_error(pr.c.ctx));
    return FATTN_OK;
}

const char *fattn_ggml_last_error(void) { return last_error().c_str(); }

int fattn_ggml_compute_error(char *why, size_t why_len) {
    std::lock_guard<std::mutex> lock(g_compute_mu);
    const int n = g_compute_failures;
    copy_why(why, why_len, n ? g_compute_first.c_str() : "");
    g_compute_failures = 0;
    g_compute_first.clear();
    return n;
}

}  // extern "C"
