// test_fattn_ggml.cpp — fattn_ggml_attn against ggml's own attention chain
// (mul_mat -> soft_max_ext -> mul_mat, differentiated by ggml's backward) and against a float64
// reference, forward and gradients; plus masks, GQA, views, threads, the LSE, precision, errors.
//
//   fattn-ggml-test --list      the cases
//   fattn-ggml-test CASE        one case (ctest runs each as ggml.CASE); "all" runs every one
//
// Accuracy: rms(x - ref) / rms(ref) per output, float64 reference on the same inputs; the bound
// for f32 is 1e-5 (fattn vs reference, ggml's chain vs reference, and fattn vs ggml's chain).
// 16-bit q, k, v (F16, BF16): the inputs are rounded to the type first and the reference and
// ggml's chain (in F32) run on those rounded values, so what is left is what the 16-bit path
// itself adds, in units of the type's unit roundoff u (2^-11 f16, 2^-8 bf16): O is fattn's O
// rounded once to the type (every element within u relative, so rms <= u; bound 1.1 u for the
// f32 arithmetic on top); dq, dk, dv come from dO rounded to the type (<= u), the backward's
// delta = rowsum(dO o O) from the rounded O and dO, and the final rounding of each gradient
// (<= u): three roundings, bound 4 u.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "case_runner.h"
#include "fattn_ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

using std::string;
using std::vector;

using fattn_ggml_test::Case;
using fattn_ggml_test::g_failures;

const float kInf = std::numeric_limits<float>::infinity();
constexpr double kTol = 1e-5;

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    float uni() {  // [-1, 1)
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return float((s >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f;
    }
};

// ------------------------------------------------------------------ configuration and inputs

enum MaskKind { MASK_NONE, MASK_F32_BCAST, MASK_F16_PER_HEAD, MASK_F32_PADDED };

struct Cfg {
    int D = 32, Dv = 32, Sq = 24, Skv = 24, Hq = 4, Hkv = 4, B = 2;
    fattn_causal causal = FATTN_CAUSAL_NONE;
    ggml_type dtype = GGML_TYPE_F32;  // q, k, v as the op reads them (ggml_cast of F32 params)
    int64_t window_left = -1, window_right = -1;
    fattn_align window_align = FATTN_ALIGN_TOP_LEFT;
    vector<int32_t> cu_q, cu_kv;  // varlen offsets (B = 1, Sq / Skv = totals); empty = dense
    MaskKind mask = MASK_NONE;
    float scale = 0.0f;        // 0 = 1/sqrt(D)
    bool fused_qkv = false;    // q, k, v are permuted views of one [D, Hq + 2 Hkv, S, B] param
    bool shared_qk = false;    // k is q
    bool permuted = false;     // fattn arm: q, k, v are permutes of [D, H, S, B] params of dtype
    int threads = 2;
    uint64_t seed = 1;
    Cfg() = default;
    // The defaults with Sq queries, Skv keys, Hq query and Hkv kv heads, batch B, q, k, v of type t,
    // mask m and causal mode cz.
    Cfg(int sq, int skv, int hq, int hkv, int b, ggml_type t = GGML_TYPE_F32, MaskKind m = MASK_NONE,
        fattn_causal cz = FATTN_CAUSAL_NONE)
        : Sq(sq), Skv(skv), Hq(hq), Hkv(hkv), B(b), causal(cz), dtype(t), mask(m) {}
    float eff_scale() const { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(D)); }
    int mask_rows() const { return mask == MASK_F32_PADDED ? Sq + 5 : Sq; }
    int mask_heads() const { return mask == MASK_F16_PER_HEAD ? Hq : 1; }
    int mask_batch() const { return mask == MASK_F32_BCAST ? 1 : B; }
};

// Host copies in ggml's contiguous layouts: q [D, Sq, Hq, B], k [D, Skv, Hkv, B],
// v [Dv, Skv, Hkv, B], w = dO [Dv, Sq, Hq, B], mask [Skv, rows, Hm, Bm] (already f16-rounded
// for the f16 mask).
struct Inputs {
    vector<float> q, k, v, w, mask;
};

// Query i may see key j: same sequence (varlen), then causal and window against the diagonal of
// that sequence's own lengths.
bool allowed(const Cfg &c, int i, int j) {
    int Sq = c.Sq, Skv = c.Skv;
    if (!c.cu_q.empty()) {
        size_t s = 0;
        while (i >= c.cu_q[s + 1]) ++s;
        if (j < c.cu_kv[s] || j >= c.cu_kv[s + 1]) return false;
        i -= c.cu_q[s];
        j -= c.cu_kv[s];
        Sq = c.cu_q[s + 1] - c.cu_q[s];
        Skv = c.cu_kv[s + 1] - c.cu_kv[s];
    }
    if (c.causal == FATTN_CAUSAL_TOP_LEFT && j > i) return false;
    if (c.causal == FATTN_CAUSAL_BOTTOM_RIGHT && j > i + Skv - Sq) return false;
    const int diag = c.window_align == FATTN_ALIGN_BOTTOM_RIGHT ? i + Skv - Sq : i;
    if (c.window_left >= 0 && j < diag - c.window_left) return false;
    if (c.window_right >= 0 && j > diag + c.window_right) return false;
    return true;
}

// Round x to the op's 16-bit type (identity for F32).
float round_to(ggml_type t, float x) {
    if (t == GGML_TYPE_F16) return ggml_fp16_to_fp32(ggml_fp32_to_fp16(x));
    if (t == GGML_TYPE_BF16) return ggml_bf16_to_fp32(ggml_fp32_to_bf16(x));
    return x;
}

// The type's unit roundoff (half an ulp at 1): 2^-11 for f16, 2^-8 for bf16; 0 for F32.
double unit_roundoff(ggml_type t) {
    return t == GGML_TYPE_F16 ? std::ldexp(1.0, -11) : t == GGML_TYPE_BF16 ? std::ldexp(1.0, -8) : 0.0;
}

Inputs make_inputs(const Cfg &c) {
    Rng r(c.seed);
    Inputs in;
    auto fill = [&](vector<float> &x, size_t n, float amp) {
        x.resize(n);
        for (auto &e : x) e = amp * r.uni();
    };
    fill(in.q, size_t(c.D) * c.Sq * c.Hq * c.B, 1.0f);
    fill(in.k, size_t(c.D) * c.Skv * c.Hkv * c.B, 1.0f);
    fill(in.v, size_t(c.Dv) * c.Skv * c.Hkv * c.B, 1.0f);
    fill(in.w, size_t(c.Dv) * c.Sq * c.Hq * c.B, 1.0f);
    for (vector<float> *x : {&in.q, &in.k, &in.v})  // the op's inputs hold rounded values
        for (auto &e : *x) e = round_to(c.dtype, e);
    if (c.shared_qk) in.k = in.q;
    if (c.mask != MASK_NONE) {
        const int R = c.mask_rows(), Hm = c.mask_heads(), Bm = c.mask_batch();
        in.mask.resize(size_t(c.Skv) * R * Hm * Bm);
        for (int b = 0; b < Bm; ++b)
            for (int h = 0; h < Hm; ++h)
                for (int i = 0; i < R; ++i)
                    for (int j = 0; j < c.Skv; ++j) {
                        float x = 1.5f * r.uni() - 0.5f;
                        const int keep = std::min(i, c.Skv - 1);  // every row keeps a key
                        if (j != keep && r.uni() > 0.8f) x = -kInf;
                        if (c.mask == MASK_F16_PER_HEAD) x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(x));
                        in.mask[((size_t(b) * Hm + h) * R + i) * c.Skv + j] = x;
                    }
    }
    return in;
}

float mask_at(const Cfg &c, const Inputs &in, int b, int h, int i, int j) {
    if (c.mask == MASK_NONE) return 0.0f;
    const int R = c.mask_rows(), Hm = c.mask_heads(), Bm = c.mask_batch();
    const int bb = Bm == 1 ? 0 : b, hh = Hm == 1 ? 0 : h;
    return in.mask[((size_t(bb) * Hm + hh) * R + i) * c.Skv + j];
}

// ------------------------------------------------------------------ float64 reference

struct Outputs {
    vector<double> o, lse, dq, dk, dv;
};

Outputs reference(const Cfg &c, const Inputs &in) {
    const int D = c.D, Dv = c.Dv, Sq = c.Sq, Skv = c.Skv, Hq = c.Hq, Hkv = c.Hkv, B = c.B;
    const double scale = c.eff_scale();
    Outputs r;
    r.o.assign(size_t(Dv) * Sq * Hq * B, 0.0);
    r.lse.assign(size_t(Sq) * Hq * B, 0.0);
    r.dq.assign(in.q.size(), 0.0);
    r.dk.assign(in.k.size(), 0.0);
    r.dv.assign(in.v.size(), 0.0);
    auto Q = [&](int b, int h, int i, int d) { return size_t(((b * Hq + h) * Sq + i)) * D + d; };
    auto K = [&](int b, int h, int j, int d) { return size_t(((b * Hkv + h) * Skv + j)) * D + d; };
    auto V = [&](int b, int h, int j, int d) { return size_t(((b * Hkv + h) * Skv + j)) * Dv + d; };
    auto O = [&](int b, int h, int i, int d) { return size_t(((b * Hq + h) * Sq + i)) * Dv + d; };
    vector<double> s(Skv), p(Skv), dp(Skv);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hq; ++h) {
            const int kh = h / (Hq / Hkv);
            for (int i = 0; i < Sq; ++i) {
                double m = -INFINITY;
                for (int j = 0; j < Skv; ++j) {
                    double x = 0;
                    for (int d = 0; d < D; ++d) x += double(in.q[Q(b, h, i, d)]) * in.k[K(b, kh, j, d)];
                    x = scale * x + mask_at(c, in, b, h, i, j);
                    if (!allowed(c, i, j)) x = -INFINITY;
                    s[j] = x;
                    m = std::max(m, x);
                }
                double l = 0;
                for (int j = 0; j < Skv; ++j) l += (p[j] = std::exp(s[j] - m));
                for (int j = 0; j < Skv; ++j) p[j] /= l;
                r.lse[(size_t(b) * Hq + h) * Sq + i] = m + std::log(l);
                for (int d = 0; d < Dv; ++d) {
                    double acc = 0;
                    for (int j = 0; j < Skv; ++j) acc += p[j] * in.v[V(b, kh, j, d)];
                    r.o[O(b, h, i, d)] = acc;
                }
                double Di = 0;
                for (int j = 0; j < Skv; ++j) {
                    double x = 0;
                    for (int d = 0; d < Dv; ++d) x += double(in.w[O(b, h, i, d)]) * in.v[V(b, kh, j, d)];
                    dp[j] = x;
                    Di += p[j] * x;
                }
                for (int j = 0; j < Skv; ++j) {
                    const double ds = p[j] * (dp[j] - Di) * scale;
                    for (int d = 0; d < D; ++d) {
                        r.dq[Q(b, h, i, d)] += ds * in.k[K(b, kh, j, d)];
                        r.dk[K(b, kh, j, d)] += ds * in.q[Q(b, h, i, d)];
                    }
                    for (int d = 0; d < Dv; ++d) r.dv[V(b, kh, j, d)] += p[j] * in.w[O(b, h, i, d)];
                }
            }
        }
    if (c.shared_qk) {  // k is q: its gradient is the sum of both
        for (size_t i = 0; i < r.dq.size(); ++i) r.dq[i] += r.dk[i];
        r.dk = r.dq;
    }
    return r;
}

double rel_rms(const vector<float> &x, const vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double e = double(x[i]) - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (x.size() != ref.size()) return INFINITY;
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

vector<double> widen(const vector<float> &x) { return vector<double>(x.begin(), x.end()); }

// ------------------------------------------------------------------ the two graphs

// Logical [ne0, ne1, ne2, ne3] contents of any (strided) f32 tensor with host data.
vector<float> read(const ggml_tensor *t) {
    vector<float> out;
    if (!t) return out;
    out.reserve(size_t(ggml_nelements(t)));
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                    float x;
                    std::memcpy(&x, (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                        i2 * t->nb[2] + i3 * t->nb[3], sizeof x);
                    out.push_back(x);
                }
    return out;
}

struct Graph {
    ggml_context *ctx = nullptr;
    ggml_cgraph *gf = nullptr;
    ggml_tensor *q = nullptr, *k = nullptr, *v = nullptr;  // what the attention reads
    ggml_tensor *pq = nullptr, *pk = nullptr, *pv = nullptr, *pqkv = nullptr;  // params
    ggml_tensor *w = nullptr, *mask = nullptr, *o = nullptr, *loss = nullptr, *attn = nullptr;
    ggml_tensor *cu_q = nullptr, *cu_kv = nullptr;  // varlen offsets (I32)
    bool chain_mask = false;  // mask is the chain's full [Skv, Sq, Hq, B] mask
    bool permuted = false;    // pq, pk, pv are [D, H, S, B] (Cfg::permuted)
    Graph() = default;
    Graph(const Graph &) = delete;
    Graph &operator=(const Graph &) = delete;
    ~Graph() {
        if (ctx) ggml_free(ctx);
    }
};

enum Arm { ARM_FATTN, ARM_CHAIN };

// The attention inputs of c (params, views into a fused param, or shared) in g.
// The chain arm of a fused QKV takes v as a param of its own: ggml's chain differentiates v
// through a transpose, whose gradient ggml's VIEW backward (acc) cannot take (nb[0] != 4).
void build_inputs(Graph &g, const Cfg &c, Arm arm) {
    ggml_context *ctx = g.ctx;
    if (c.fused_qkv) {
        const int S = c.Sq, H = c.Hq + 2 * c.Hkv;
        g.pqkv = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.D, H, S, c.B);
        ggml_set_param(g.pqkv);
        ggml_set_name(g.pqkv, "qkv");
        ggml_tensor *src = g.pqkv;
        if (arm == ARM_FATTN && c.dtype != GGML_TYPE_F32) src = ggml_cast(ctx, g.pqkv, c.dtype);
        const size_t es = ggml_type_size(src->type), nb1 = src->nb[1], nb2 = src->nb[2], nb3 = src->nb[3];
        auto head_view = [&](int nh, int first) {
            ggml_tensor *t = ggml_view_4d(ctx, src, c.D, nh, S, c.B, nb1, nb2, nb3, size_t(first) * c.D * es);
            return ggml_permute(ctx, t, 0, 2, 1, 3);  // [D, S, nh, B], not contiguous
        };
        g.q = head_view(c.Hq, 0);
        g.k = head_view(c.Hkv, c.Hq);
        g.v = head_view(c.Hkv, c.Hq + c.Hkv);
        if (arm == ARM_CHAIN) {
            g.pv = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.Dv, c.Skv, c.Hkv, c.B);
            ggml_set_param(g.pv);
            g.v = g.pv;
        }
    } else if (c.permuted && arm == ARM_FATTN) {
        g.permuted = true;
        // 16-bit params: ggml cannot differentiate a cast followed by a permute (the cast's
        // backward reshapes the permuted, non-contiguous gradient and asserts)
        auto param = [&](int d, int sn, int h) {
            ggml_tensor *t = ggml_new_tensor_4d(ctx, c.dtype, d, h, sn, c.B);
            ggml_set_param(t);
            return t;
        };
        auto seen = [&](ggml_tensor *t) {  // [D, H, S, B] -> [D, S, H, B] strided view
            return ggml_permute(ctx, t, 0, 2, 1, 3);
        };
        g.pq = param(c.D, c.Sq, c.Hq);
        g.pk = param(c.D, c.Skv, c.Hkv);
        g.pv = param(c.Dv, c.Skv, c.Hkv);
        g.q = seen(g.pq);
        g.k = seen(g.pk);
        g.v = seen(g.pv);
    } else {
        g.pq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.D, c.Sq, c.Hq, c.B);
        ggml_set_param(g.pq);
        g.q = g.pq;
        if (c.shared_qk) {
            g.k = g.q;
        } else {
            g.pk = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.D, c.Skv, c.Hkv, c.B);
            ggml_set_param(g.pk);
            g.k = g.pk;
        }
        g.pv = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.Dv, c.Skv, c.Hkv, c.B);
        ggml_set_param(g.pv);
        g.v = g.pv;
        if (arm == ARM_FATTN && c.dtype != GGML_TYPE_F32) {  // the F32 params cast to the type
            g.q = ggml_cast(ctx, g.pq, c.dtype);
            g.k = c.shared_qk ? g.q : ggml_cast(ctx, g.pk, c.dtype);
            g.v = ggml_cast(ctx, g.pv, c.dtype);
        }
    }
    g.w = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.Dv, c.Sq, c.Hq, c.B);
    if (arm == ARM_FATTN && !c.cu_q.empty()) {
        g.cu_q = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, int64_t(c.cu_q.size()));
        g.cu_kv = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, int64_t(c.cu_kv.size()));
    }
}

// [n0, n1, n2, n3] -> [n0, n2, n1, n3] (contiguous host copies)
vector<float> swap12(const vector<float> &x, int n0, int n1, int n2, int n3) {
    vector<float> y(x.size());
    for (int i3 = 0; i3 < n3; ++i3)
        for (int i2 = 0; i2 < n2; ++i2)
            for (int i1 = 0; i1 < n1; ++i1)
                for (int i0 = 0; i0 < n0; ++i0)
                    y[((size_t(i3) * n1 + i1) * n2 + i2) * n0 + i0] = x[((size_t(i3) * n2 + i2) * n1 + i1) * n0 + i0];
    return y;
}

void set_inputs(Graph &g, const Cfg &c, const Inputs &in,
                const std::function<void(ggml_tensor *, const void *, size_t)> &put) {
    if (c.fused_qkv) {
        const int S = c.Sq, H = c.Hq + 2 * c.Hkv;
        vector<float> x(size_t(c.D) * H * S * c.B);
        for (int b = 0; b < c.B; ++b)
            for (int s = 0; s < S; ++s)
                for (int h = 0; h < H; ++h)
                    for (int d = 0; d < c.D; ++d) {
                        float val;
                        if (h < c.Hq) val = in.q[((size_t(b) * c.Hq + h) * S + s) * c.D + d];
                        else if (h < c.Hq + c.Hkv) val = in.k[((size_t(b) * c.Hkv + h - c.Hq) * S + s) * c.D + d];
                        else val = in.v[((size_t(b) * c.Hkv + h - c.Hq - c.Hkv) * S + s) * c.D + d];
                        x[((size_t(b) * S + s) * H + h) * c.D + d] = val;
                    }
        put(g.pqkv, x.data(), x.size() * 4);
        if (g.pv) put(g.pv, in.v.data(), in.v.size() * 4);
    } else if (g.permuted) {
        const vector<float> q = swap12(in.q, c.D, c.Sq, c.Hq, c.B), k = swap12(in.k, c.D, c.Skv, c.Hkv, c.B),
                            v = swap12(in.v, c.Dv, c.Skv, c.Hkv, c.B);
        auto put_as = [&](ggml_tensor *t, const vector<float> &x) {  // in the param's type
            if (t->type == GGML_TYPE_F32) return put(t, x.data(), x.size() * 4);
            vector<uint16_t> h(x.size());
            for (size_t i = 0; i < x.size(); ++i)
                h[i] = t->type == GGML_TYPE_F16 ? ggml_fp32_to_fp16(x[i]) : ggml_fp32_to_bf16(x[i]).bits;
            put(t, h.data(), h.size() * 2);
        };
        put_as(g.pq, q);
        put_as(g.pk, k);
        put_as(g.pv, v);
    } else {
        put(g.pq, in.q.data(), in.q.size() * 4);
        if (g.pk) put(g.pk, in.k.data(), in.k.size() * 4);
        put(g.pv, in.v.data(), in.v.size() * 4);
    }
    put(g.w, in.w.data(), in.w.size() * 4);
    if (g.cu_q) {
        put(g.cu_q, c.cu_q.data(), c.cu_q.size() * 4);
        put(g.cu_kv, c.cu_kv.data(), c.cu_kv.size() * 4);
    }
    if (g.mask) {
        if (g.mask->type == GGML_TYPE_F16) {
            vector<ggml_fp16_t> h(in.mask.size());
            for (size_t i = 0; i < h.size(); ++i) h[i] = ggml_fp32_to_fp16(in.mask[i]);
            put(g.mask, h.data(), h.size() * 2);
        } else if (!g.chain_mask) {
            put(g.mask, in.mask.data(), in.mask.size() * 4);
        } else {  // the chain's full mask: user mask (broadcast) + causal, [Skv, Sq, Hq, B]
            vector<float> m(size_t(c.Skv) * c.Sq * c.Hq * c.B);
            for (int b = 0; b < c.B; ++b)
                for (int h = 0; h < c.Hq; ++h)
                    for (int i = 0; i < c.Sq; ++i)
                        for (int j = 0; j < c.Skv; ++j)
                            m[((size_t(b) * c.Hq + h) * c.Sq + i) * c.Skv + j] =
                                allowed(c, i, j) ? mask_at(c, in, b, h, i, j) : -kInf;
            put(g.mask, m.data(), m.size() * 4);
        }
    }
}

bool chain_needs_mask(const Cfg &c) {
    return c.mask != MASK_NONE || c.causal != FATTN_CAUSAL_NONE || c.window_left >= 0 ||
           c.window_right >= 0 || !c.cu_q.empty();
}

// Builds arm's graph of c in a fresh context (no_alloc: tensors get memory from gallocr later).
bool build(Graph &g, const Cfg &c, Arm arm, bool no_alloc) {
    ggml_init_params ip = {size_t(256) << 20, nullptr, no_alloc};
    if (no_alloc) ip.mem_size = size_t(8) << 20;
    g.ctx = ggml_init(ip);
    ggml_context *ctx = g.ctx;
    build_inputs(g, c, arm);
    if (arm == ARM_FATTN) {
        if (c.mask != MASK_NONE) {
            const ggml_type t = c.mask == MASK_F16_PER_HEAD ? GGML_TYPE_F16 : GGML_TYPE_F32;
            g.mask = ggml_new_tensor_4d(ctx, t, c.Skv, c.mask_rows(), c.mask_heads(), c.mask_batch());
        }
        fattn_ggml_attn_opts opts = fattn_ggml_attn_opts_default();
        opts.mask = g.mask;
        opts.scale = c.scale;
        opts.causal = c.causal;
        opts.window_left = c.window_left;
        opts.window_right = c.window_right;
        opts.window_align = c.window_align;
        opts.cu_seqlens_q = g.cu_q;
        opts.cu_seqlens_kv = g.cu_kv;
        const bool plain = c.window_left < 0 && c.window_right < 0 && c.cu_q.empty();
        g.o = plain ? fattn_ggml_attn(ctx, g.q, g.k, g.v, g.mask, c.scale, c.causal, FATTN_PREC_AUTO)
                    : fattn_ggml_attn_ex(ctx, g.q, g.k, g.v, &opts);
        if (!g.o) {
            std::fprintf(stderr, "  fattn_ggml_attn: %s\n", fattn_ggml_last_error());
            return false;
        }
        g.attn = g.o->view_src;
    } else {
        if (chain_needs_mask(c)) {
            g.mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.Skv, c.Sq, c.Hq, c.B);
            g.chain_mask = true;
        }
        ggml_tensor *kq = ggml_mul_mat(ctx, g.k, g.q);  // [Skv, Sq, Hq, B]
        ggml_tensor *p = ggml_soft_max_ext(ctx, kq, g.mask, c.eff_scale(), 0.0f);
        ggml_tensor *vt = ggml_cont(ctx, ggml_transpose(ctx, g.v));  // [Skv, Dv, Hkv, B]
        g.o = ggml_mul_mat(ctx, vt, p);                               // [Dv, Sq, Hq, B]
    }
    g.loss = ggml_sum(ctx, ggml_mul(ctx, g.o, g.w));
    ggml_set_loss(g.loss);
    g.gf = ggml_new_graph_custom(ctx, 4096, true);
    ggml_build_forward_expand(g.gf, g.loss);
    ggml_build_backward_expand(ctx, g.gf, nullptr);
    return true;
}

struct Result {
    vector<float> o, dq, dk, dv, lse;
};

// Gradients of q, k, v in ggml layouts ([D, S, H, B] contiguous order), from the params.
void collect(const Graph &g, const Cfg &c, Result *r) {
    r->o = read(g.o);
    if (c.fused_qkv) {
        const vector<float> d = read(ggml_graph_get_grad(g.gf, g.pqkv));  // [D, H, S, B]
        const int S = c.Sq, H = c.Hq + 2 * c.Hkv;
        r->dq.assign(size_t(c.D) * S * c.Hq * c.B, 0);
        r->dk.assign(size_t(c.D) * S * c.Hkv * c.B, 0);
        r->dv.assign(size_t(c.D) * S * c.Hkv * c.B, 0);
        if (d.size() != size_t(c.D) * H * S * c.B) return;
        for (int b = 0; b < c.B; ++b)
            for (int s = 0; s < S; ++s)
                for (int h = 0; h < H; ++h)
                    for (int dd = 0; dd < c.D; ++dd) {
                        const float x = d[((size_t(b) * S + s) * H + h) * c.D + dd];
                        if (h < c.Hq) r->dq[((size_t(b) * c.Hq + h) * S + s) * c.D + dd] = x;
                        else if (h < c.Hq + c.Hkv) r->dk[((size_t(b) * c.Hkv + h - c.Hq) * S + s) * c.D + dd] = x;
                        else r->dv[((size_t(b) * c.Hkv + h - c.Hq - c.Hkv) * S + s) * c.D + dd] = x;
                    }
        if (g.pv) r->dv = read(ggml_graph_get_grad(g.gf, g.pv));
    } else if (g.permuted) {  // gradients of [D, H, S, B] params
        r->dq = swap12(read(ggml_graph_get_grad(g.gf, g.pq)), c.D, c.Hq, c.Sq, c.B);
        r->dk = swap12(read(ggml_graph_get_grad(g.gf, g.pk)), c.D, c.Hkv, c.Skv, c.B);
        r->dv = swap12(read(ggml_graph_get_grad(g.gf, g.pv)), c.Dv, c.Hkv, c.Skv, c.B);
    } else {
        r->dq = read(ggml_graph_get_grad(g.gf, g.pq));
        r->dk = g.pk ? read(ggml_graph_get_grad(g.gf, g.pk)) : r->dq;
        r->dv = read(ggml_graph_get_grad(g.gf, g.pv));
    }
}

bool run_ctx(Graph &g, const Cfg &c, const Inputs &in, int threads, Result *r) {
    set_inputs(g, c, in, [](ggml_tensor *t, const void *src, size_t n) { std::memcpy(t->data, src, n); });
    ggml_graph_reset(g.gf);
    if (ggml_graph_compute_with_ctx(g.ctx, g.gf, threads) != GGML_STATUS_SUCCESS) return false;
    collect(g, c, r);
    char why[512];
    const int fails = fattn_ggml_compute_error(why, sizeof why);
    EXPECT(fails == 0, "%d compute failures: %s", fails, why);
    return true;
}

// ggml's MUL_MAT backward broadcasts over heads only when ne3 is 1 (GGML_ASSERT(tmp->ne[3] == 1)
// in ggml_compute_backward): the chain runs GQA with B = 1; with B > 1 fattn meets the reference.
bool chain_runs(const Cfg &c) { return c.Hq == c.Hkv || c.B == 1; }

// Builds and runs both arms of c and checks them against each other and the reference.
bool compare_arms(const Cfg &c, Result *fattn_out = nullptr) {
    const Inputs in = make_inputs(c);
    const Outputs ref = reference(c, in);
    const bool chain = chain_runs(c);
    Graph gf, gc;
    Result rf, rc;
    if (!build(gf, c, ARM_FATTN, false) || (chain && !build(gc, c, ARM_CHAIN, false))) {
        ++g_failures;
        return false;
    }
    if (!run_ctx(gf, c, in, c.threads, &rf) || (chain && !run_ctx(gc, c, in, c.threads, &rc))) {
        std::fprintf(stderr, "  compute failed\n");
        ++g_failures;
        return false;
    }
    std::printf("  D %d Dv %d Sq %d Skv %d Hq %d Hkv %d B %d %s%s\n", c.D, c.Dv, c.Sq, c.Skv, c.Hq,
                c.Hkv, c.B, ggml_type_name(c.dtype),
                chain ? "" : " (GQA with B > 1: no ggml chain, f64 reference only)");
    const double u = unit_roundoff(c.dtype);
    if (c.dtype != GGML_TYPE_F32) {
        EXPECT(gf.o->type == GGML_TYPE_F32, "o is %s", ggml_type_name(gf.o->type));
        EXPECT(gf.attn->src[0]->type == c.dtype, "the op reads %s", ggml_type_name(gf.attn->src[0]->type));
        std::printf("  unit roundoff u %.3g: bounds o %.3g (1.1 u), dq dk dv %.3g (4 u)\n", u, 1.1 * u, 4 * u);
    }
    const char *names[4] = {"o", "dq", "dk", "dv"};
    const vector<float> *fv[4] = {&rf.o, &rf.dq, &rf.dk, &rf.dv};
    const vector<float> *cv[4] = {&rc.o, &rc.dq, &rc.dk, &rc.dv};
    const vector<double> *rv[4] = {&ref.o, &ref.dq, &ref.dk, &ref.dv};
    for (int i = 0; i < 4; ++i) {
        const double tol = c.dtype == GGML_TYPE_F32 ? kTol : (i == 0 ? 1.1 : 4.0) * u;
        const double ef = rel_rms(*fv[i], *rv[i]);
        EXPECT(ef <= tol, "%s: fattn vs f64 %.3g (bound %.3g)", names[i], ef, tol);
        if (!chain) {
            std::printf("  %-2s  fattn vs f64 %.2e\n", names[i], ef);
            continue;
        }
        const double ec = rel_rms(*cv[i], *rv[i]), efc = rel_rms(*fv[i], widen(*cv[i]));
        std::printf("  %-2s  fattn vs f64 %.2e   ggml chain vs f64 %.2e   fattn vs chain %.2e\n",
                    names[i], ef, ec, efc);
        EXPECT(ec <= kTol, "%s: ggml chain vs f64 %.3g", names[i], ec);
        EXPECT(efc <= tol, "%s: fattn vs chain %.3g (bound %.3g)", names[i], efc, tol);
    }
    if (fattn_out) *fattn_out = rf;
    return true;
}

bool bitwise_equal(const vector<float> &a, const vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// build() of the fattn arm, a failure counted when it does not build.
bool built(Graph &g, const Cfg &c, bool no_alloc = false) {
    if (build(g, c, ARM_FATTN, no_alloc)) return true;
    ++g_failures;
    return false;
}

// The fattn arm of c built in g and run on 2 threads into *r, a failure counted when either fails.
bool ran(Graph &g, const Cfg &c, const Inputs &in, Result *r) {
    if (!built(g, c)) return false;
    if (run_ctx(g, c, in, 2, r)) return true;
    ++g_failures;
    return false;
}

// c's inputs and the fattn arm's results on them: the reference a case compares another way of
// running the op with (ok false, a failure counted, when it does not build or run).
struct Reference {
    Inputs in;
    Result r;
    bool ok = false;
};
Reference reference_run(const Cfg &c) {
    Reference ref;
    ref.in = make_inputs(c);
    Graph g;
    ref.ok = ran(g, c, ref.in, &ref.r);
    return ref;
}

// Copy nodes (CONT, CPY, DUP) in the graph's forward part, up to the attention op.
int copies_before_op(const Graph &g) {
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(g.gf); ++i) {
        const ggml_tensor *t = ggml_graph_node(g.gf, i);
        if (t == g.attn) break;
        if (t->op == GGML_OP_CONT || t->op == GGML_OP_CPY || t->op == GGML_OP_DUP) ++n;
    }
    return n;
}

// ------------------------------------------------------------------ cases

void case_basic() { compare_arms(Cfg{}); }

void case_causal_top_left() {
    Cfg c;
    c.causal = FATTN_CAUSAL_TOP_LEFT;
    compare_arms(c);
}

void case_causal_bottom_right() {
    Cfg c(16, 40, 4, 4, 2, GGML_TYPE_F32, MASK_NONE, FATTN_CAUSAL_BOTTOM_RIGHT);
    compare_arms(c);
}

void case_cross_attn() {
    Cfg c(16, 40, 4, 4, 2);
    c.scale = 0.3f;
    compare_arms(c);
}

void case_mask_f32_broadcast() {
    Cfg c;
    c.mask = MASK_F32_BCAST;  // [Skv, Sq, 1, 1]
    c.causal = FATTN_CAUSAL_TOP_LEFT;
    compare_arms(c);
}

void case_mask_f16_per_head() {
    Cfg c(20, 28, 4, 4, 2);
    c.mask = MASK_F16_PER_HEAD;  // [Skv, Sq, Hq, B] f16
    compare_arms(c);
}

void case_mask_rows_padded() {
    Cfg c;
    c.mask = MASK_F32_PADDED;  // [Skv, Sq + 5, 1, B]: the first Sq rows count
    compare_arms(c);
}

void case_gqa() {
    for (int B : {1, 2}) {
        Cfg c(24, 24, 6, 2, B, GGML_TYPE_F32, MASK_NONE, FATTN_CAUSAL_BOTTOM_RIGHT);
        compare_arms(c);
    }
}

void case_mqa() {
    for (int B : {1, 3}) {
        Cfg c(24, 24, 4, 1, B, GGML_TYPE_F32, MASK_F32_BCAST);
        compare_arms(c);
    }
}

void case_dv_ne_d() {
    Cfg c(24, 30, 4, 4, 2);
    c.D = 48;
    c.Dv = 16;
    compare_arms(c);
}

// q, k, v are permuted views into one fused QKV param: read in place (no GGML_OP_CONT before the
// op), gradients reach the fused param through ggml's view/permute backward.
void case_noncontiguous_qkv() {
    Cfg c;
    for (int B : {1, 2}) {
        c = Cfg(20, 20, 4, 2, B);
        c.fused_qkv = true;
        c.causal = FATTN_CAUSAL_TOP_LEFT;
        compare_arms(c);
    }
    Graph g;
    if (!built(g, c)) return;
    EXPECT(!ggml_is_contiguous(g.q) && !ggml_is_contiguous(g.k), "the test views are contiguous");
    EXPECT(g.attn->src[0] == g.q && g.attn->src[1] == g.k && g.attn->src[2] == g.v,
           "the op does not read the views themselves");
    // The forward part (up to the op) holds no copy: the only CONT nodes belong to the backward.
    const int copies = copies_before_op(g);
    EXPECT(copies == 0, "%d copy nodes before the attention op", copies);
}

void case_shared_qk() {
    Cfg c(24, 24, 4, 4, 2);  // k is q: the same lengths and heads
    c.shared_qk = true;              // the hook's two gradients add up
    compare_arms(c);
}

// 16-bit q, k, v: F32 params cast to the type (ggml_cast), read by the op as the type; gradients
// reach the F32 params as F32. Checked against the f64 reference and ggml's chain run in F32 on
// the same rounded inputs (bounds: the file's header). Then q, k, v as strided 16-bit views of
// one fused QKV tensor, read in place.
void dtype_case(ggml_type t) {
    Cfg c(20, 28, 4, 2, 1, t, MASK_F32_BCAST, FATTN_CAUSAL_BOTTOM_RIGHT);
    compare_arms(c);
    // q, k, v: permuted (strided) 16-bit views of [D, H, S, B] tensors, read in place
    Cfg f(20, 20, 4, 4, 2, t);
    f.permuted = true;
    f.causal = FATTN_CAUSAL_TOP_LEFT;
    compare_arms(f);
    Graph g;
    if (!built(g, f)) return;
    EXPECT(g.attn->src[0] == g.q && g.attn->src[1] == g.k && g.attn->src[2] == g.v,
           "the op does not read the views themselves");
    EXPECT(g.q->type == t && !ggml_is_contiguous(g.q) && g.q->nb[0] == 2 &&
               g.q->nb[1] == size_t(2 * f.D * f.Hq),
           "q is not a strided %s view", ggml_type_name(t));
    const int copies = copies_before_op(g);  // before the op: no copy of the views
    EXPECT(copies == 0, "%d copy nodes before the op", copies);
    const ggml_tensor *gq = ggml_graph_get_grad(g.gf, g.pq);
    EXPECT(gq && gq->type == GGML_TYPE_F32, "q's gradient is not F32");
}

void case_dtype_f16() { dtype_case(GGML_TYPE_F16); }
void case_dtype_bf16() { dtype_case(GGML_TYPE_BF16); }

// Sliding windows through fattn_ggml_attn_ex: ggml's chain gets the window as an additive -inf
// mask (and the causal part with it).
void case_window() {
    Cfg a;
    a.window_left = 5;
    a.window_right = 3;
    compare_arms(a);
    Cfg b(24, 24, 4, 2, 1);
    b.causal = FATTN_CAUSAL_TOP_LEFT;
    b.window_left = 6;
    compare_arms(b);
    Cfg c(16, 40, 4, 4, 2, GGML_TYPE_F32, MASK_NONE, FATTN_CAUSAL_BOTTOM_RIGHT);
    c.window_left = 9;
    c.window_right = 0;
    c.window_align = FATTN_ALIGN_BOTTOM_RIGHT;
    c.mask = MASK_F16_PER_HEAD;
    compare_arms(c);
    Cfg d = a;  // a window on 16-bit inputs
    d.dtype = GGML_TYPE_F16;
    compare_arms(d);
}

// Varlen (packed sequences, I32 offsets as graph data): ggml's chain gets an additive mask that
// is -inf between sequences (plus causal / window per sequence).
void case_varlen() {
    Cfg a(30, 30, 4, 2, 1);
    a.cu_q = a.cu_kv = {0, 7, 19, 30};
    a.causal = FATTN_CAUSAL_TOP_LEFT;
    compare_arms(a);
    Cfg b(20, 30, 4, 4, 1);  // cross lengths, bottom-right causal with a window, per sequence
    b.cu_q = {0, 5, 16, 20};
    b.cu_kv = {0, 9, 21, 30};
    b.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
    b.window_left = 4;
    b.window_align = FATTN_ALIGN_BOTTOM_RIGHT;
    compare_arms(b);
    Cfg h = a;  // varlen on bf16 inputs
    h.dtype = GGML_TYPE_BF16;
    compare_arms(h);

    // One graph, new offsets per computation (as under ggml-opt's static graphs).
    Graph g;
    if (!built(g, a)) return;
    for (const vector<int32_t> &cu : {vector<int32_t>{0, 12, 13, 30}, vector<int32_t>{0, 30, 30, 30}}) {
        Cfg n = a;
        n.cu_q = n.cu_kv = cu;
        const Inputs in = make_inputs(n);
        const Outputs ref = reference(n, in);
        Result r;
        EXPECT(run_ctx(g, n, in, 2, &r), "compute");
        const double eo = rel_rms(r.o, ref.o), edq = rel_rms(r.dq, ref.dq), edk = rel_rms(r.dk, ref.dk),
                     edv = rel_rms(r.dv, ref.dv);
        std::printf("  same graph, offsets {%d, %d, %d, %d}: o %.2e dq %.2e dk %.2e dv %.2e vs f64\n",
                    cu[0], cu[1], cu[2], cu[3], eo, edq, edk, edv);
        EXPECT(eo <= kTol && edq <= kTol && edk <= kTol && edv <= kTol, "new offsets");
    }
    // Bad contents (not monotonic): found when computing, output NaN, reported.
    Cfg bad = a;
    bad.cu_q = bad.cu_kv = {0, 19, 7, 30};
    const Inputs in = make_inputs(bad);
    set_inputs(g, bad, in, [](ggml_tensor *t, const void *src, size_t n) { std::memcpy(t->data, src, n); });
    ggml_graph_reset(g.gf);
    EXPECT(ggml_graph_compute_with_ctx(g.ctx, g.gf, 2) == GGML_STATUS_SUCCESS, "compute");
    char why[512];
    const int fails = fattn_ggml_compute_error(why, sizeof why);
    const vector<float> o = read(g.o);
    std::printf("  bad offsets: %d compute failures: %s\n", fails, why);
    EXPECT(fails >= 1 && std::strstr(why, "cu_seqlens") != nullptr && std::isnan(o[0]),
           "bad offsets: %d '%s'", fails, why);
}

// Bitwise the same result for 1, 2, 3 and 4 ggml threads, and on repeat.
void threads_case(ggml_type t) {
    Cfg c(40, 56, 4, 2, 2, t, MASK_F32_BCAST, FATTN_CAUSAL_BOTTOM_RIGHT);
    const Inputs in = make_inputs(c);
    Graph g;
    if (!built(g, c)) return;
    Result base;
    EXPECT(run_ctx(g, c, in, 1, &base), "compute");
    for (int t : {2, 3, 4, 2}) {
        Result r;
        EXPECT(run_ctx(g, c, in, t, &r), "compute");
        EXPECT(bitwise_equal(r.o, base.o) && bitwise_equal(r.dq, base.dq) &&
                   bitwise_equal(r.dk, base.dk) && bitwise_equal(r.dv, base.dv),
               "%d threads differ from 1", t);
    }
    std::printf("  %s: 1, 2, 3, 4, 2 threads: bitwise equal\n", ggml_type_name(t));
}

void case_threads_bitwise() {
    threads_case(GGML_TYPE_F32);
    threads_case(GGML_TYPE_BF16);
}

// fattn_ggml_attn_back by hand (dO a strided view) gives the hook's gradients bit for bit.
void explicit_back_case(ggml_type t) {
    Cfg c(24, 24, 4, 2, 2, t, MASK_NONE, FATTN_CAUSAL_TOP_LEFT);
    const Reference ref = reference_run(c);
    if (!ref.ok) return;
    const Inputs &in = ref.in;
    const Result &rh = ref.r;
    ggml_init_params ip = {size_t(64) << 20, nullptr, false};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *q = ggml_new_tensor_4d(ctx, t, c.D, c.Sq, c.Hq, c.B);
    ggml_tensor *k = ggml_new_tensor_4d(ctx, t, c.D, c.Skv, c.Hkv, c.B);
    ggml_tensor *v = ggml_new_tensor_4d(ctx, t, c.Dv, c.Skv, c.Hkv, c.B);
    // dO as a permuted view of a [Dv, Hq, Sq, B] tensor
    ggml_tensor *wp = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.Dv, c.Hq, c.Sq, c.B);
    ggml_tensor *dout = ggml_permute(ctx, wp, 0, 2, 1, 3);
    for (auto [dst, src] : {std::make_pair(q, &in.q), std::make_pair(k, &in.k), std::make_pair(v, &in.v)}) {
        if (t == GGML_TYPE_F32) {
            std::memcpy(dst->data, src->data(), src->size() * 4);
            continue;
        }
        uint16_t *h = static_cast<uint16_t *>(dst->data);  // the hook arm's cast, by hand
        for (size_t i = 0; i < src->size(); ++i)
            h[i] = t == GGML_TYPE_F16 ? ggml_fp32_to_fp16((*src)[i]) : ggml_fp32_to_bf16((*src)[i]).bits;
    }
    float *wd = static_cast<float *>(wp->data);
    for (int b = 0; b < c.B; ++b)
        for (int h = 0; h < c.Hq; ++h)
            for (int i = 0; i < c.Sq; ++i)
                for (int d = 0; d < c.Dv; ++d)
                    wd[((size_t(b) * c.Sq + i) * c.Hq + h) * c.Dv + d] =
                        in.w[((size_t(b) * c.Hq + h) * c.Sq + i) * c.Dv + d];
    ggml_tensor *o = fattn_ggml_attn(ctx, q, k, v, nullptr, c.scale, c.causal, FATTN_PREC_F32);
    ggml_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr;
    EXPECT(o && fattn_ggml_attn_back(ctx, o, dout, &dq, &dk, &dv) == FATTN_OK, "%s",
           fattn_ggml_last_error());
    if (dq && dk && dv) {
        ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, dq);
        ggml_build_forward_expand(gf, dk);
        ggml_build_forward_expand(gf, dv);
        EXPECT(ggml_graph_compute_with_ctx(ctx, gf, 3) == GGML_STATUS_SUCCESS, "compute");
        EXPECT(bitwise_equal(read(o), rh.o), "o differs");
        EXPECT(bitwise_equal(read(dq), rh.dq), "dq differs");
        EXPECT(bitwise_equal(read(dk), rh.dk), "dk differs");
        EXPECT(bitwise_equal(read(dv), rh.dv), "dv differs");
        EXPECT(ggml_are_same_shape(dq, q) && ggml_are_same_shape(dk, k) && ggml_are_same_shape(dv, v),
               "gradient shapes");
    }
    ggml_free(ctx);
    std::printf("  %s: explicit backward = the hook's bits\n", ggml_type_name(t));
}

void case_explicit_back() {
    explicit_back_case(GGML_TYPE_F32);
    explicit_back_case(GGML_TYPE_F16);  // a strided dO, rounded to f16 by the op: the hook's bits too
}

void case_lse() {
    Cfg c(12, 20, 4, 2, 2, GGML_TYPE_F32, MASK_F32_BCAST, FATTN_CAUSAL_BOTTOM_RIGHT);
    const Inputs in = make_inputs(c);
    const Outputs ref = reference(c, in);
    Graph g;
    if (!built(g, c)) return;
    ggml_tensor *lse = fattn_ggml_attn_lse(g.ctx, g.o);
    EXPECT(lse && lse->ne[0] == c.Sq && lse->ne[1] == c.Hq && lse->ne[2] == c.B, "lse shape");
    if (!lse) return;
    ggml_build_forward_expand(g.gf, lse);
    Result r;
    EXPECT(run_ctx(g, c, in, 2, &r), "compute");
    const double e = rel_rms(read(lse), ref.lse);
    std::printf("  lse vs f64 %.2e\n", e);
    EXPECT(e <= 1e-6, "lse: %.3g", e);
    EXPECT(fattn_ggml_is_attn(g.o) == 1 && fattn_ggml_is_attn(lse) == 0 && fattn_ggml_is_attn(g.q) == 0,
           "fattn_ggml_is_attn");
    EXPECT(fattn_ggml_attn_lse(g.ctx, g.q) == nullptr, "lse of a non-op tensor");
}

void case_prec() {
    ggml_init_params ip = {size_t(16) << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 64, 128, 8, 1);
    ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 64, 128, 2, 1);
    ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 64, 128, 2, 1);
    ggml_tensor *o_auto = fattn_ggml_attn(ctx, q, k, v, nullptr, 0.0f, FATTN_CAUSAL_BOTTOM_RIGHT, FATTN_PREC_AUTO);
    ggml_tensor *o_f32 = fattn_ggml_attn(ctx, q, k, v, nullptr, 0.0f, FATTN_CAUSAL_BOTTOM_RIGHT, FATTN_PREC_F32);
    EXPECT(o_auto && fattn_ggml_attn_prec(o_auto) == FATTN_PREC_F32, "AUTO resolves to %s",
           o_auto ? fattn_prec_name(fattn_ggml_attn_prec(o_auto)) : "(null)");
    EXPECT(o_f32 && fattn_ggml_attn_prec(o_f32) == FATTN_PREC_F32, "F32");
    EXPECT(fattn_ggml_attn_prec(q) == FATTN_PREC_AUTO, "prec of a non-op tensor");
    ggml_tensor *o_tf32 = fattn_ggml_attn(ctx, q, k, v, nullptr, 0.0f, FATTN_CAUSAL_NONE, FATTN_PREC_TF32);
    std::printf("  AUTO -> %s; TF32 on the CPU: %s\n",
                o_auto ? fattn_prec_name(fattn_ggml_attn_prec(o_auto)) : "?", fattn_ggml_last_error());
    EXPECT(o_tf32 == nullptr && std::strstr(fattn_ggml_last_error(), "tf32") != nullptr,
           "TF32 on the CPU: %s", fattn_ggml_last_error());
    char why[512];
    EXPECT(fattn_ggml_attn_supports(q, k, v, nullptr, 0.0f, FATTN_CAUSAL_NONE, FATTN_PREC_TF32, why,
                                    sizeof why) == FATTN_ERR_UNSUPPORTED,
           "TF32 supports: %s", why);
    ggml_free(ctx);
}

// fattn_ggml_graph_check: the CPU backend runs every fattn node of a training graph (forward and
// backward, F32 and F16); NULL arguments are refused with a message. Without CUDA in the build
// fattn_ggml_attn_prec_cuda answers AUTO.
void case_graph_check() {
    ggml_backend_t cpu = ggml_backend_cpu_init();
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16}) {
        ggml_init_params ip = {size_t(16) << 20, nullptr, true};
        ggml_context *ctx = ggml_init(ip);
        ggml_tensor *q = ggml_new_tensor_4d(ctx, t, 32, 40, 4, 2);
        ggml_tensor *k = ggml_new_tensor_4d(ctx, t, 32, 50, 2, 2);
        ggml_tensor *v = ggml_new_tensor_4d(ctx, t, 32, 50, 2, 2);
        for (ggml_tensor *x : {q, k, v}) ggml_set_param(x);
        ggml_tensor *o = fattn_ggml_attn(ctx, q, k, v, nullptr, 0.0f, FATTN_CAUSAL_BOTTOM_RIGHT, FATTN_PREC_AUTO);
        EXPECT(o != nullptr, "op: %s", fattn_ggml_last_error());
        if (!o) {
            ggml_free(ctx);
            continue;
        }
        ggml_tensor *loss = ggml_sum(ctx, o);
        ggml_set_loss(loss);
        ggml_cgraph *g = ggml_new_graph_custom(ctx, 1024, true);
        ggml_build_forward_expand(g, loss);
        ggml_build_backward_expand(ctx, g, nullptr);
        int n_fattn = 0;
        for (int i = 0; i < ggml_graph_n_nodes(g); ++i)
            n_fattn += std::strncmp(ggml_get_name(ggml_graph_node(g, i)), "fattn_attn", 10) == 0 &&
                       ggml_graph_node(g, i)->op == GGML_OP_CUSTOM;
        char why[256] = "unset";
        const fattn_status s = fattn_ggml_graph_check(g, cpu, why, sizeof why);
        std::printf("  %s: %d fattn nodes; CPU backend: %s %s\n", ggml_type_name(t), n_fattn, fattn_status_string(s), why);
        EXPECT(n_fattn == 2 && s == FATTN_OK && why[0] == 0, "%s: %d nodes, %s", ggml_type_name(t), n_fattn, why);
        EXPECT(fattn_ggml_graph_check(nullptr, cpu, why, sizeof why) == FATTN_ERR_NULL_POINTER &&
                   std::strstr(why, "graph") != nullptr,
               "NULL graph: %s", why);
        EXPECT(fattn_ggml_graph_check(g, nullptr, why, sizeof why) == FATTN_ERR_NULL_POINTER &&
                   std::strstr(why, "backend") != nullptr,
               "NULL backend: %s", why);
#ifndef FATTN_GGML_WITH_CUDA
        EXPECT(fattn_ggml_attn_prec_cuda(o, 0) == FATTN_PREC_AUTO, "prec_cuda without CUDA");
#endif
        ggml_free(ctx);
    }
    ggml_backend_free(cpu);
}

// Bad input: NULL plus a message naming the argument; nothing aborts.
void case_errors() {
    ggml_init_params ip = {size_t(16) << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    auto t4 = [&](ggml_type t, int a, int b, int c, int d) { return ggml_new_tensor_4d(ctx, t, a, b, c, d); };
    ggml_tensor *q = t4(GGML_TYPE_F32, 32, 16, 4, 2), *k = t4(GGML_TYPE_F32, 32, 20, 2, 2),
                *v = t4(GGML_TYPE_F32, 32, 20, 2, 2);
    ggml_tensor *m_ok = t4(GGML_TYPE_F16, 20, 16, 1, 1);
    struct Bad {
        const char *what;
        ggml_tensor *q, *k, *v, *m;
        float scale;
        int causal, prec;
        const char *expect;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const Bad bad[] = {
        {"q NULL", nullptr, k, v, nullptr, 0, 0, 0, "q: is NULL"},
        {"q q8_0", t4(GGML_TYPE_Q8_0, 32, 16, 4, 2), k, v, nullptr, 0, 0, 0, "q: type is q8_0"},
        {"q f16, k f32", t4(GGML_TYPE_F16, 32, 16, 4, 2), k, v, nullptr, 0, 0, 0, "dtype"},
        {"k head dim", q, t4(GGML_TYPE_F32, 16, 20, 2, 2), v, nullptr, 0, 0, 0, "k: ne0 (head dim D) is 16 but q has 32"},
        {"v keys", q, k, t4(GGML_TYPE_F32, 32, 21, 2, 2), nullptr, 0, 0, 0, "v: ne1 (keys) is 21 but k has 20"},
        {"batch", q, t4(GGML_TYPE_F32, 32, 20, 2, 3), t4(GGML_TYPE_F32, 32, 20, 2, 3), nullptr, 0, 0, 0, "k: ne3 (batch) is 3"},
        {"gqa", q, t4(GGML_TYPE_F32, 32, 20, 3, 2), t4(GGML_TYPE_F32, 32, 20, 3, 2), nullptr, 0, 0, 0, "k: ne2 (kv heads) is 3"},
        {"transposed q", ggml_transpose(ctx, t4(GGML_TYPE_F32, 16, 32, 4, 2)), k, v, nullptr, 0, 0, 0, "q: nb[0] is"},
        {"mask type", q, k, v, t4(GGML_TYPE_I32, 20, 16, 1, 1), 0, 0, 0, "mask: type is i32"},
        {"mask keys", q, k, v, t4(GGML_TYPE_F32, 19, 16, 1, 1), 0, 0, 0, "mask: ne0 is 19 but k has 20"},
        {"mask rows", q, k, v, t4(GGML_TYPE_F32, 20, 15, 1, 1), 0, 0, 0, "mask: ne1 is 15"},
        {"mask heads", q, k, v, t4(GGML_TYPE_F32, 20, 16, 3, 1), 0, 0, 0, "mask: ne2 is 3"},
        {"mask batch", q, k, v, t4(GGML_TYPE_F32, 20, 16, 1, 3), 0, 0, 0, "mask: ne3 is 3"},
        {"scale", q, k, v, m_ok, nan, 0, 0, "scale: is not finite"},
        {"causal", q, k, v, m_ok, 0, 7, 0, "causal: 7 is not a fattn_causal"},
        {"prec", q, k, v, m_ok, 0, 0, 9, "prec: 9 is not"},
        {"huge scale", q, k, v, nullptr, 1e38f, 0, 0, "fattn ("},
    };
    for (const Bad &b : bad) {
        ggml_tensor *o = fattn_ggml_attn(ctx, b.q, b.k, b.v, b.m, b.scale, (fattn_causal)b.causal, (fattn_prec)b.prec);
        const char *msg = fattn_ggml_last_error();
        EXPECT(o == nullptr && std::strstr(msg, b.expect) != nullptr, "%s: got '%s', want '%s'", b.what, msg, b.expect);
        char why[512] = "x";
        const fattn_status s = fattn_ggml_attn_supports(b.q, b.k, b.v, b.m, b.scale, (fattn_causal)b.causal,
                                                        (fattn_prec)b.prec, why, sizeof why);
        EXPECT(s != FATTN_OK && std::strstr(why, b.expect) != nullptr, "%s supports: %d '%s'", b.what, (int)s, why);
    }
    EXPECT(fattn_ggml_attn(nullptr, q, k, v, nullptr, 0, FATTN_CAUSAL_NONE, FATTN_PREC_AUTO) == nullptr &&
               std::strstr(fattn_ggml_last_error(), "ctx: is NULL"),
           "ctx NULL");
    // A full memory pool: refused, not aborted.
    ggml_init_params small = {ggml_tensor_overhead() * 4 + 512, nullptr, true};
    ggml_context *tiny = ggml_init(small);
    ggml_tensor *tq = ggml_new_tensor_4d(tiny, GGML_TYPE_F32, 32, 16, 4, 2);
    ggml_tensor *tk = ggml_new_tensor_4d(tiny, GGML_TYPE_F32, 32, 16, 4, 2);
    ggml_tensor *tv = ggml_new_tensor_4d(tiny, GGML_TYPE_F32, 32, 16, 4, 2);
    EXPECT(fattn_ggml_attn(tiny, tq, tk, tv, nullptr, 0, FATTN_CAUSAL_NONE, FATTN_PREC_AUTO) == nullptr &&
               std::strstr(fattn_ggml_last_error(), "memory pool"),
           "full pool: %s", fattn_ggml_last_error());
    ggml_free(tiny);
    ggml_tensor *dq = nullptr;
    EXPECT(fattn_ggml_attn_back(ctx, q, q, &dq, nullptr, nullptr) == FATTN_ERR_BAD_VALUE && dq == nullptr,
           "back of a non-op tensor");
    ggml_tensor *o = fattn_ggml_attn(ctx, q, k, v, nullptr, 0, FATTN_CAUSAL_NONE, FATTN_PREC_AUTO);
    EXPECT(o && fattn_ggml_attn_back(ctx, o, t4(GGML_TYPE_F32, 32, 16, 4, 1), &dq, nullptr, nullptr) ==
                    FATTN_ERR_SHAPE_MISMATCH,
           "back with a wrong dO: %s", fattn_ggml_last_error());
    // Windows and varlen (fattn_ggml_attn_ex): ggml-side rules and fattn's.
    ggml_tensor *cu = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3);
    ggml_tensor *q1 = t4(GGML_TYPE_F32, 32, 16, 4, 1), *k1 = t4(GGML_TYPE_F32, 32, 16, 2, 1),
                *v1 = t4(GGML_TYPE_F32, 32, 16, 2, 1);
    struct BadEx {
        const char *what;
        ggml_tensor *q, *k, *v, *cuq, *cukv;
        int64_t wl, wr;
        int causal, align;
        const char *expect;
    } bad_ex[] = {
        {"cu_q only", q1, k1, v1, cu, nullptr, -1, -1, 0, 0, "cu_seqlens_kv: is NULL"},
        {"cu type", q1, k1, v1, ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3), cu, -1, -1, 0, 0, "cu_seqlens_q: type is f32"},
        {"cu 2-d", q1, k1, v1, cu, ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 3, 2), -1, -1, 0, 0, "cu_seqlens_kv: shape is [3, 2, 1, 1]"},
        {"cu counts", q1, k1, v1, cu, ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4), -1, -1, 0, 0, "cu_seqlens_kv: has 4 offsets"},
        {"varlen B 2", q, k, v, cu, cu, -1, -1, 0, 0, "requires B = 1"},
        {"window right with causal", q, k, v, nullptr, nullptr, 4, 2, 1, 0, "window_right"},
        {"window align vs causal", q, k, v, nullptr, nullptr, 4, 0, 1, 1, "window_align"},
        {"window align value", q, k, v, nullptr, nullptr, 4, 0, 0, 5, "window_align: 5"},
    };
    for (const BadEx &b : bad_ex) {
        fattn_ggml_attn_opts o = fattn_ggml_attn_opts_default();
        o.cu_seqlens_q = b.cuq;
        o.cu_seqlens_kv = b.cukv;
        o.window_left = b.wl;
        o.window_right = b.wr;
        o.causal = (fattn_causal)b.causal;
        o.window_align = (fattn_align)b.align;
        ggml_tensor *out = fattn_ggml_attn_ex(ctx, b.q, b.k, b.v, &o);
        const char *msg = fattn_ggml_last_error();
        EXPECT(out == nullptr && std::strstr(msg, b.expect) != nullptr, "%s: got '%s', want '%s'", b.what, msg, b.expect);
        char why[512] = "x";
        const fattn_status s = fattn_ggml_attn_supports_ex(b.q, b.k, b.v, &o, why, sizeof why);
        EXPECT(s != FATTN_OK && std::strstr(why, b.expect) != nullptr, "%s supports: %d '%s'", b.what, (int)s, why);
    }
    std::printf("  %zu bad inputs refused with their messages\n",
                sizeof bad / sizeof bad[0] + sizeof bad_ex / sizeof bad_ex[0]);
    ggml_free(ctx);
}

void case_supports() {
    ggml_init_params ip = {size_t(16) << 20, nullptr, true};  // shapes only, no data
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *qkv = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 64, 8 + 2 * 2, 256, 2);
    ggml_tensor *q = ggml_permute(ctx, ggml_view_4d(ctx, qkv, 64, 8, 256, 2, qkv->nb[1], qkv->nb[2], qkv->nb[3], 0), 0, 2, 1, 3);
    ggml_tensor *k = ggml_permute(ctx, ggml_view_4d(ctx, qkv, 64, 2, 256, 2, qkv->nb[1], qkv->nb[2], qkv->nb[3], 8 * 64 * 4), 0, 2, 1, 3);
    ggml_tensor *v = ggml_permute(ctx, ggml_view_4d(ctx, qkv, 64, 2, 256, 2, qkv->nb[1], qkv->nb[2], qkv->nb[3], 10 * 64 * 4), 0, 2, 1, 3);
    ggml_tensor *m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, 256, 256, 1, 1);
    char why[512] = "x";
    const fattn_status s = fattn_ggml_attn_supports(q, k, v, m, 0.0f, FATTN_CAUSAL_BOTTOM_RIGHT, FATTN_PREC_AUTO, why, sizeof why);
    EXPECT(s == FATTN_OK && why[0] == '\0', "supports: %d '%s'", (int)s, why);
    // The same fused layout in f16 and bf16 (strided 16-bit views); NATIVE is CUDA's only.
    for (ggml_type t : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
        ggml_tensor *h = ggml_new_tensor_4d(ctx, t, 64, 8 + 2 * 2, 256, 2);
        const size_t es = ggml_type_size(t);
        ggml_tensor *hq = ggml_permute(ctx, ggml_view_4d(ctx, h, 64, 8, 256, 2, h->nb[1], h->nb[2], h->nb[3], 0), 0, 2, 1, 3);
        ggml_tensor *hk = ggml_permute(ctx, ggml_view_4d(ctx, h, 64, 2, 256, 2, h->nb[1], h->nb[2], h->nb[3], 8 * 64 * es), 0, 2, 1, 3);
        ggml_tensor *hv = ggml_permute(ctx, ggml_view_4d(ctx, h, 64, 2, 256, 2, h->nb[1], h->nb[2], h->nb[3], 10 * 64 * es), 0, 2, 1, 3);
        fattn_ggml_attn_opts o = fattn_ggml_attn_opts_default();
        o.mask = m;
        o.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
        o.window_left = 64;
        o.window_right = 0;
        o.window_align = FATTN_ALIGN_BOTTOM_RIGHT;
        fattn_status st = fattn_ggml_attn_supports_ex(hq, hk, hv, &o, why, sizeof why);
        EXPECT(st == FATTN_OK && why[0] == '\0', "%s supports: %d '%s'", ggml_type_name(t), (int)st, why);
        o.prec = FATTN_PREC_NATIVE;
        st = fattn_ggml_attn_supports_ex(hq, hk, hv, &o, why, sizeof why);
        std::printf("  %s fused views: supported; NATIVE on the CPU: %s\n", ggml_type_name(t), why);
        EXPECT(st == FATTN_ERR_UNSUPPORTED, "%s NATIVE: %d '%s'", ggml_type_name(t), (int)st, why);
    }
    // Varlen, one packed batch: supported (the offsets' contents are checked when computing).
    ggml_tensor *pq = ggml_new_tensor_4d(ctx, GGML_TYPE_BF16, 64, 300, 8, 1);
    ggml_tensor *pk = ggml_new_tensor_4d(ctx, GGML_TYPE_BF16, 64, 300, 2, 1);
    ggml_tensor *cu = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 5);
    fattn_ggml_attn_opts o = fattn_ggml_attn_opts_default();
    o.cu_seqlens_q = o.cu_seqlens_kv = cu;
    o.causal = FATTN_CAUSAL_TOP_LEFT;
    const fattn_status sv = fattn_ggml_attn_supports_ex(pq, pk, pk, &o, why, sizeof why);
    EXPECT(sv == FATTN_OK, "varlen supports: %d '%s'", (int)sv, why);
    ggml_free(ctx);
}

void case_memory() {
    ggml_init_params ip = {size_t(16) << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    const int D = 64, S = 4096, H = 8, B = 1;  // a size query: nothing is allocated
    ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, S, H, B);
    ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, S, H, B);
    ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, S, H, B);
    fattn_attn_memory_info mi{};
    EXPECT(fattn_ggml_attn_memory(q, k, v, nullptr, 0, FATTN_CAUSAL_BOTTOM_RIGHT, FATTN_PREC_AUTO, &mi) == FATTN_OK,
           "%s", fattn_ggml_last_error());
    const uint64_t n = uint64_t(D) * S * H * B * 4;
    std::printf("  inputs %llu saved %llu fwd ws %llu bwd ws %llu grads %llu bwd peak %llu bytes "
                "(probabilities alone: %llu)\n",
                (unsigned long long)mi.inputs_bytes, (unsigned long long)mi.saved_bytes,
                (unsigned long long)mi.fwd_workspace_bytes, (unsigned long long)mi.bwd_workspace_bytes,
                (unsigned long long)mi.grads_bytes, (unsigned long long)mi.bwd_peak_bytes,
                (unsigned long long)(uint64_t(S) * S * H * B * 4));
    EXPECT(mi.inputs_bytes == 3 * n, "inputs %llu", (unsigned long long)mi.inputs_bytes);
    EXPECT(mi.saved_bytes >= n + uint64_t(S) * H * B * 4, "saved %llu", (unsigned long long)mi.saved_bytes);
    EXPECT(mi.bwd_peak_bytes >= mi.inputs_bytes + mi.saved_bytes + mi.grads_bytes, "peak");
    EXPECT(mi.bwd_peak_bytes < uint64_t(S) * S * H * B * 4, "the fused peak exceeds the [S, S, H, B] probabilities");
    ggml_free(ctx);
}

// The op under ggml's graph allocator (memory reuse between nodes) and the CPU backend, as
// ggml-opt runs it: the same bits as the context-allocated graph.
void gallocr_case(ggml_type t) {
    Cfg c(24, 24, 4, 2, 2, t, MASK_F16_PER_HEAD, FATTN_CAUSAL_TOP_LEFT);
    const Reference ref = reference_run(c);
    if (!ref.ok) return;
    Graph g;
    if (!built(g, c, true)) return;
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 2);
    // The allocator reuses a tensor's memory once its last consumer ran: what is set before the
    // graph runs is marked input (a 16-bit arm's F32 params die after their casts), what is read
    // back after it output (o's node dies once the backward node has read it; the gradients are
    // views of the backward node).
    for (ggml_tensor *t : {g.pq, g.pk, g.pv, g.w, g.mask}) ggml_set_input(t);
    ggml_set_output(g.attn);
    ggml_set_output(ggml_graph_get_grad(g.gf, g.pq)->view_src);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    EXPECT(ggml_gallocr_alloc_graph(ga, g.gf), "gallocr");
    set_inputs(g, c, ref.in, [](ggml_tensor *t, const void *src, size_t n) { ggml_backend_tensor_set(t, src, 0, n); });
    ggml_graph_reset(g.gf);
    EXPECT(ggml_backend_graph_compute(be, g.gf) == GGML_STATUS_SUCCESS, "compute");
    auto get = [](const ggml_tensor *t) {
        vector<float> x(size_t(ggml_nelements(t)));
        if (ggml_is_contiguous(t)) ggml_backend_tensor_get(t, x.data(), 0, x.size() * 4);
        return x;
    };
    EXPECT(bitwise_equal(get(g.o), ref.r.o), "o differs under gallocr");
    EXPECT(bitwise_equal(get(ggml_graph_get_grad(g.gf, g.pq)), ref.r.dq), "dq differs under gallocr");
    EXPECT(bitwise_equal(get(ggml_graph_get_grad(g.gf, g.pk)), ref.r.dk), "dk differs under gallocr");
    EXPECT(bitwise_equal(get(ggml_graph_get_grad(g.gf, g.pv)), ref.r.dv), "dv differs under gallocr");
    std::printf("  %s: gallocr + CPU backend: bitwise equal to the context-allocated graph (%d nodes)\n",
                ggml_type_name(t), ggml_graph_n_nodes(g.gf));
    ggml_gallocr_free(ga);
    ggml_backend_free(be);
}

void case_gallocr_backend() {
    gallocr_case(GGML_TYPE_F32);
    gallocr_case(GGML_TYPE_F16);  // the 16-bit node layout under memory reuse
}

const Case kCases[] = {
    {"basic", case_basic},
    {"causal_top_left", case_causal_top_left},
    {"causal_bottom_right", case_causal_bottom_right},
    {"cross_attn", case_cross_attn},
    {"mask_f32_broadcast", case_mask_f32_broadcast},
    {"mask_f16_per_head", case_mask_f16_per_head},
    {"mask_rows_padded", case_mask_rows_padded},
    {"gqa", case_gqa},
    {"mqa", case_mqa},
    {"dv_ne_d", case_dv_ne_d},
    {"noncontiguous_qkv", case_noncontiguous_qkv},
    {"shared_qk", case_shared_qk},
    {"dtype_f16", case_dtype_f16},
    {"dtype_bf16", case_dtype_bf16},
    {"window", case_window},
    {"varlen", case_varlen},
    {"threads_bitwise", case_threads_bitwise},
    {"explicit_back", case_explicit_back},
    {"lse", case_lse},
    {"prec", case_prec},
    {"graph_check", case_graph_check},
    {"errors", case_errors},
    {"supports", case_supports},
    {"memory", case_memory},
    {"gallocr_backend", case_gallocr_backend},
};

}  // namespace

int main(int argc, char **argv) { return fattn_ggml_test::run_cases(argc, argv, kCases, sizeof kCases / sizeof kCases[0]); }
