// attn_setup.cpp — laying out a case's tensors, filling its inputs, asking the oracle.
//
// Input buffers start as NaN (poison) and only the cells a view covers get values: a kernel
// that reads outside its views (the padding of a strided o/dout, say) turns its output NaN.
#include "test/attn_setup.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"  // encoding the inputs; the oracle decodes on its own

namespace fattn_test {

namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();

uint32_t seed_of(const std::string &s) {  // FNV-1a: a stable seed per case name
    uint32_t h = 2166136261u;
    for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
    return h;
}

void make_buf(Buf &b, const char *name, fattn_dtype dt, int64_t elems, bool output) {
    b.name = name;
    b.dt = dt;
    b.elems = elems;
    b.output = output;
    b.host.assign(b.bytes(), kPoisonByte);
    b.cover.assign(size_t(elems), 0);
}

View view(int buf, int64_t off, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t s0, int64_t s1,
          int64_t s2) {
    View v;
    v.buf = buf, v.off = off;
    v.ne[0] = n0, v.ne[1] = n1, v.ne[2] = n2, v.ne[3] = n3;
    v.nb[0] = s0, v.nb[1] = s1, v.nb[2] = s2, v.nb[3] = 1;
    return v;
}

// [B, S, H, D] view of a buffer of its own in the case's layout (not the fused one).
View own_view(Layout l, int buf, int64_t B, int64_t S, int64_t H, int64_t D) {
    if (l == Layout::BHSD) return view(buf, 0, B, S, H, D, H * S * D, D, S * D);
    return view(buf, 0, B, S, H, D, S * H * D, H * D, D);
}

template <class F>
void for_each4(const View &v, F &&f) {
    for (int64_t a = 0; a < v.ne[0]; ++a)
        for (int64_t b = 0; b < v.ne[1]; ++b)
            for (int64_t c = 0; c < v.ne[2]; ++c)
                for (int64_t d = 0; d < v.ne[3]; ++d) f(a, b, c, d, v.at(a, b, c, d));
}

void mark_cover(Inst &in, const View &v) {
    Buf &b = in.buf[v.buf];
    for_each4(v, [&](int64_t, int64_t, int64_t, int64_t, int64_t e) { b.cover[size_t(e)] = 1; });
}

// Inputs: uniform on [-sqrt 3, sqrt 3] (unit variance) from splitmix64, fast enough for the
// large cases' 2^31-element tensors.
struct Rng {
    uint64_t s;
    float operator()() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return float((double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0) * 1.7320508075688772);
    }
};

void fill_random(Inst &in, const View &v, Rng &rng) {
    Buf &b = in.buf[v.buf];
    for_each4(v, [&](int64_t, int64_t, int64_t, int64_t, int64_t e) { fattn::store_f32(b.host.data(), b.dt, e, rng()); });
}

}  // namespace

void setup_inst(const AttnCase &c, Inst *inp) {
    Inst &in = *inp;
    in.c = &c;
    if (c.is_varlen()) {
        in.nseq = int64_t(c.seqlens_q.size());
        in.cu_q.assign(1, 0);
        in.cu_kv.assign(1, 0);
        in.max_q = in.max_kv = 0;
        for (size_t s = 0; s < c.seqlens_q.size(); ++s) {
            in.cu_q.push_back(in.cu_q.back() + c.seqlens_q[s]);
            in.cu_kv.push_back(in.cu_kv.back() + c.seqlens_kv[s]);
            in.max_q = std::max<int64_t>(in.max_q, c.seqlens_q[s]);
            in.max_kv = std::max<int64_t>(in.max_kv, c.seqlens_kv[s]);
        }
        in.Bv = 1, in.Sq = in.cu_q.back(), in.Skv = in.cu_kv.back();
    } else {
        in.nseq = c.B;
        in.Bv = c.B, in.Sq = c.Sq, in.Skv = c.Skv;
        in.max_q = c.Sq, in.max_kv = c.Skv;
    }
    const int64_t B = in.Bv, Sq = in.Sq, Skv = in.Skv, Hq = c.Hq, Hkv = c.Hkv, D = c.D, Dv = c.Dv;
    const fattn_dtype dt = c.dtype;

    if (c.layout == Layout::FUSED_QKV) {
        // One token row holds q | k | v of every head; dq | dk | dv likewise. Needs Sq == Skv.
        const int64_t S = Sq, W = Hq * D + Hkv * D + Hkv * Dv;
        make_buf(in.buf[BUF_Q], "qkv", dt, B * S * W, false);
        make_buf(in.buf[BUF_DQ], "dqkv", dt, B * S * W, true);
        in.q = view(BUF_Q, 0, B, S, Hq, D, S * W, W, D);
        in.k = view(BUF_Q, Hq * D, B, S, Hkv, D, S * W, W, D);
        in.v = view(BUF_Q, Hq * D + Hkv * D, B, S, Hkv, Dv, S * W, W, Dv);
        in.dq = view(BUF_DQ, 0, B, S, Hq, D, S * W, W, D);
        in.dk = view(BUF_DQ, Hq * D, B, S, Hkv, D, S * W, W, D);
        in.dv = view(BUF_DQ, Hq * D + Hkv * D, B, S, Hkv, Dv, S * W, W, Dv);
        // o and dout with a padded token stride: the 8 padding cells per token are never touched.
        const int64_t Wo = Hq * Dv + 8;
        make_buf(in.buf[BUF_O], "o", dt, B * S * Wo, true);
        make_buf(in.buf[BUF_DO], "dout", dt, B * S * Wo, false);
        in.o = view(BUF_O, 0, B, S, Hq, Dv, S * Wo, Wo, Dv);
        in.dout = view(BUF_DO, 0, B, S, Hq, Dv, S * Wo, Wo, Dv);
    } else {
        make_buf(in.buf[BUF_Q], "q", dt, B * Sq * Hq * D, false);
        make_buf(in.buf[BUF_K], "k", dt, B * Skv * Hkv * D, false);
        make_buf(in.buf[BUF_V], "v", dt, B * Skv * Hkv * Dv, false);
        make_buf(in.buf[BUF_DO], "dout", dt, B * Sq * Hq * Dv, false);
        make_buf(in.buf[BUF_O], "o", dt, B * Sq * Hq * Dv, true);
        make_buf(in.buf[BUF_DQ], "dq", dt, B * Sq * Hq * D, true);
        make_buf(in.buf[BUF_DK], "dk", dt, B * Skv * Hkv * D, true);
        make_buf(in.buf[BUF_DV], "dv", dt, B * Skv * Hkv * Dv, true);
        in.q = own_view(c.layout, BUF_Q, B, Sq, Hq, D);
        in.k = own_view(c.layout, BUF_K, B, Skv, Hkv, D);
        in.v = own_view(c.layout, BUF_V, B, Skv, Hkv, Dv);
        in.dout = own_view(c.layout, BUF_DO, B, Sq, Hq, Dv);
        in.o = own_view(c.layout, BUF_O, B, Sq, Hq, Dv);
        in.dq = own_view(c.layout, BUF_DQ, B, Sq, Hq, D);
        in.dk = own_view(c.layout, BUF_DK, B, Skv, Hkv, D);
        in.dv = own_view(c.layout, BUF_DV, B, Skv, Hkv, Dv);
    }
    make_buf(in.buf[BUF_LSE], "lse", FATTN_F32, B * Hq * Sq, true);
    in.lse = view(BUF_LSE, 0, B, Hq, Sq, 1, Hq * Sq, Sq, 1);

    Rng rng{seed_of(c.name)};
    fill_random(in, in.q, rng);
    fill_random(in, in.k, rng);
    fill_random(in, in.v, rng);
    fill_random(in, in.dout, rng);  // the loss gradient: real random data, never zeros

    // ---- bias
    in.bias = View{};
    if (c.bias != BiasKind::NONE) {
        const fattn_dtype bt = c.bias_dtype;
        Rng &nd = rng;
        Buf &bb = in.buf[BUF_BIAS];
        auto dense = [&](int64_t nB, int64_t nH) {
            make_buf(bb, "bias", bt, nB * nH * Sq * Skv, false);
            in.bias = view(BUF_BIAS, 0, nB, nH, Sq, Skv, nH * Sq * Skv, Sq * Skv, Skv);
        };
        switch (c.bias) {
        case BiasKind::DENSE: case BiasKind::NEG_ROWCOL: dense(B, Hq); break;
        case BiasKind::BCAST: case BiasKind::NEG_TRI: dense(1, 1); break;
        case BiasKind::NEG_BAND: dense(1, Hq); break;
        case BiasKind::KEYPAD:  // [B, 1, 1, Skv] stored, viewed as [B, 1, Sq, Skv] with stride 0
            make_buf(bb, "bias", bt, B * Skv, false);
            in.bias = view(BUF_BIAS, 0, B, 1, Sq, Skv, Skv, 0, 0);
            break;
        case BiasKind::NONE: break;
        }
        const int64_t band = std::max<int64_t>(2, std::min<int64_t>(Skv / 10, 256));
        // Values by logical (b, h, i, j); cells shared through stride 0 get written repeatedly
        // with the same value (KEYPAD's value does not depend on i).
        for_each4(in.bias, [&](int64_t b, int64_t h, int64_t i, int64_t j, int64_t e) {
            float x = 0.0f;
            switch (c.bias) {
            case BiasKind::DENSE: case BiasKind::BCAST: x = nd(); break;
            case BiasKind::KEYPAD:
                x = c.is_varlen() ? (j % 11 == 4 ? kNegInf : 0.0f) : (j >= Skv - (3 + 4 * b) ? kNegInf : 0.0f);
                break;
            case BiasKind::NEG_BAND: x = std::llabs(i - j) <= band ? nd() : kNegInf; break;
            case BiasKind::NEG_TRI: x = j <= i ? 0.0f : kNegInf; break;
            case BiasKind::NEG_ROWCOL:
                x = (i % 7 == 3 || j % 5 == 1 || (i * 3 + j) % 11 == 0) ? kNegInf : nd();
                break;
            case BiasKind::NONE: break;
            }
            (void)h;
            fattn::store_f32(bb.host.data(), bt, e, x);
        });
    }
    for (const View *v : {&in.o, &in.lse, &in.dq, &in.dk, &in.dv}) mark_cover(in, *v);
}

fattn::AttnBwdParams ref_params(const Inst &in) {
    const AttnCase &c = *in.c;
    fattn::AttnBwdParams p{};
    p.batch = in.nseq;
    p.seqlen_q = in.max_q;
    p.seqlen_kv = in.max_kv;
    p.total_q = in.Sq;
    p.total_kv = in.Skv;
    p.hq = c.Hq, p.hkv = c.Hkv, p.d = c.D;
    p.dim_v = c.Dv;
    p.dtype = c.dtype;
    p.scale = c.scale != 0.0f ? c.scale : float(1.0 / std::sqrt(double(c.D)));
    auto base = [&](const View &v) { return static_cast<const void *>(in.buf[v.buf].host.data() + size_t(v.off) * in.buf[v.buf].esz()); };
    p.q = base(in.q), p.q_sb = in.q.nb[0], p.q_ss = in.q.nb[1], p.q_sh = in.q.nb[2];
    p.k = base(in.k), p.k_sb = in.k.nb[0], p.k_ss = in.k.nb[1], p.k_sh = in.k.nb[2];
    p.v = base(in.v), p.v_sb = in.v.nb[0], p.v_ss = in.v.nb[1], p.v_sh = in.v.nb[2];
    p.dout = base(in.dout), p.do_sb = in.dout.nb[0], p.do_ss = in.dout.nb[1], p.do_sh = in.dout.nb[2];
    if (in.has_bias()) {
        p.bias = base(in.bias);
        p.bias_dtype = c.bias_dtype;
        // A dim of extent 1 is broadcast whatever its stored stride.
        p.bias_sb = in.bias.ne[0] == 1 ? 0 : in.bias.nb[0];
        p.bias_sh = in.bias.ne[1] == 1 ? 0 : in.bias.nb[1];
        p.bias_si = in.bias.nb[2];
    }
    // Masks in the params' normalized form, from the public API's definition: causal is a
    // window with right = 0 against the causal diagonal (it keeps the window's left bound).
    p.win_left = c.win_left;
    p.win_right = c.win_right;
    p.bottom_right = c.win_align == FATTN_ALIGN_BOTTOM_RIGHT;
    if (c.causal != FATTN_CAUSAL_NONE) {
        p.win_right = 0;
        p.bottom_right = c.causal == FATTN_CAUSAL_BOTTOM_RIGHT;
    }
    if (c.is_varlen()) {
        p.cu_seqlens_q = in.cu_q.data();
        p.cu_seqlens_kv = in.cu_kv.data();
    }
    return p;
}

void run_oracle(const Inst &in, fattn::ref::Outputs *out, fattn::ref::Problem *probp, fattn::ref::Tensors *tp) {
    const fattn::AttnBwdParams p = ref_params(in);
    fattn::ref::Problem prob;
    fattn::ref::Tensors t;
    fattn::ref::gather(p, &prob, &t);
    fattn::ref::attn_fwd(prob, t, out);
    fattn::ref::attn_bwd(prob, t, out);
    if (probp) *probp = prob;
    if (tp) *tp = std::move(t);
}

std::vector<double> read_view4(const Inst &in, const View &v) {
    const Buf &b = in.buf[v.buf];
    std::vector<double> r(size_t(v.ne[0] * v.ne[1] * v.ne[2] * v.ne[3]));
    size_t n = 0;
    for_each4(v, [&](int64_t, int64_t, int64_t, int64_t, int64_t e) { r[n++] = fattn::ref::decode(b.host.data(), b.dt, e); });
    return r;
}

std::vector<double> read_lse(const Inst &in) { return read_view4(in, in.lse); }

}  // namespace fattn_test
