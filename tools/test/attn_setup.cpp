// attn_setup.cpp — laying out a case's tensors, filling its inputs, asking the oracle.
//
// Input buffers start as NaN (poison) and only the cells a view covers get values: a kernel
// that reads outside its views (the padding of a strided o/dout, say) turns its output NaN.
// Built for the --large cases too (tensors of more than 2^31 elements): inputs are filled by
// rows in fixed chunks on every core from a counter-based generator (the same values as one
// sequential stream, whatever the thread count), and a buffer that one compact view spans has
// no per-element coverage map and needs no poison under its values.
#include "test/attn_setup.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"  // encoding the inputs; the oracle decodes on its own

namespace fattn_test {

namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();

// The most negative finite value of a storage dtype (torch.finfo(dtype).min): -FLT_MAX rounds to
// -inf in bf16 and f16, so a finfo.min mask is built with the dtype's own lowest value.
float lowest_finite(fattn_dtype t) {
    switch (t) {
    case FATTN_BF16: return -3.38953139e38f;  // 0xff7f
    case FATTN_F16: return -65504.0f;
    default: return -std::numeric_limits<float>::max();
    }
}

uint32_t seed_of(const std::string &s) {  // FNV-1a: a stable seed per case name
    uint32_t h = 2166136261u;
    for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
    return h;
}

// Sized only: poison and values come after the layout (finish_layout, fill_random). Outputs
// hold their guard too, so a download of buffer + guard never regrows the vector.
void make_buf(Buf &b, const char *name, fattn_dtype dt, int64_t elems, bool output) {
    b.name = name;
    b.dt = dt;
    b.elems = elems;
    b.output = output;
    b.host.clear();
    b.host.resize(b.bytes() + (output ? kGuardBytes : 0));
}

void poison_host(Buf &b) {
    unsigned char *p = b.host.data();
    par_range(int64_t(b.host.size()), int64_t(1) << 24, [&](int64_t s, int64_t e) { std::memset(p + s, kPoisonByte, size_t(e - s)); });
}

// Every view goes to its buffer's list; a buffer that one compact view spans exactly is dense,
// any other gets a coverage bit map. Poison: outputs everywhere (a download replaces it), inputs
// unless dense (else the fill writes every element).
void finish_layout(Inst &in) {
    for (const View *v : {&in.q, &in.k, &in.v, &in.dout, &in.bias, &in.o, &in.lse, &in.dq, &in.dk, &in.dv, &in.dbias})
        if (v->buf >= 0) in.buf[v->buf].views.push_back(*v);
    for (Buf &b : in.buf) {
        if (b.elems == 0) continue;
        b.dense = b.views.size() == 1 && b.views[0].off == 0 && b.views[0].size() == b.elems && b.views[0].compact();
        if (!b.dense) {
            b.cover_bits.assign(size_t((b.elems + 63) / 64), 0);
            for (const View &v : b.views)
                for_each4(v, [&](int64_t, int64_t, int64_t, int64_t, int64_t e) { b.cover_bits[size_t(e >> 6)] |= uint64_t(1) << (e & 63); });
        }
        if (b.output || !b.dense) poison_host(b);
    }
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

// Inputs: uniform on [-sqrt 3, sqrt 3] (unit variance) from splitmix64. Its state after n draws
// is seed + n·γ, so draw n can be computed on its own (uniform_at): the parallel fill below
// writes exactly what one sequential stream over q, k, v, dout in logical order would.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

struct Rng {
    uint64_t s;
    float operator()() {
        uint64_t z = (s += kGamma);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return float((double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0) * 1.7320508075688772);
    }
};

inline float uniform_at(uint64_t seed, uint64_t n) { return Rng{seed + n * kGamma}(); }

template <class Enc>
void fill_row(unsigned char *base, int64_t e0, int64_t n, uint64_t seed, uint64_t n0, Enc enc) {
    auto *p = reinterpret_cast<decltype(enc(0.0f)) *>(base) + e0;
    for (int64_t d = 0; d < n; ++d) p[d] = enc(uniform_at(seed, n0 + uint64_t(d)));
}

// Draws [n0, n0 + v.size()) of the stream into v, in v's logical order; returns the next draw.
// Rows (the contiguous innermost dim) in fixed blocks of ~2^18 elements, on every core.
uint64_t fill_random(Inst &in, const View &v, uint64_t seed, uint64_t n0) {
    Buf &b = in.buf[v.buf];
    const int64_t D = v.ne[3], rows = v.ne[0] * v.ne[1] * v.ne[2];
    if (D == 0 || rows == 0) return n0;
    par_range(rows, std::max<int64_t>(1, (int64_t(1) << 18) / D), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t c = r % v.ne[2], ab = r / v.ne[2], bb = ab % v.ne[1], a = ab / v.ne[1];
            const int64_t e0 = v.at(a, bb, c, 0);
            const uint64_t n = n0 + uint64_t(r * D);
            if (v.nb[3] != 1)
                for (int64_t d = 0; d < D; ++d) fattn::store_f32(b.host.data(), b.dt, e0 + d * v.nb[3], uniform_at(seed, n + uint64_t(d)));
            else if (b.dt == FATTN_F32)
                fill_row(b.host.data(), e0, D, seed, n, [](float x) { return x; });
            else if (b.dt == FATTN_F16)
                fill_row(b.host.data(), e0, D, seed, n, [](float x) { return fattn::f32_to_f16(x); });
            else
                fill_row(b.host.data(), e0, D, seed, n, [](float x) { return fattn::f32_to_bf16(x); });
        }
    });
    return n0 + uint64_t(rows * D);
}

}  // namespace

bool View::compact() const {
    // The dims of extent > 1, by increasing stride, must nest exactly: strides 1, n0, n0·n1, ...
    int64_t st[4], ex[4];
    int n = 0;
    for (int i = 0; i < 4; ++i) {
        if (ne[i] == 0) return true;  // empty
        if (ne[i] > 1) st[n] = nb[i], ex[n] = ne[i], ++n;
    }
    for (int i = 1; i < n; ++i)  // insertion sort by stride
        for (int j = i; j > 0 && st[j] < st[j - 1]; --j) std::swap(st[j], st[j - 1]), std::swap(ex[j], ex[j - 1]);
    int64_t expect = 1;
    for (int i = 0; i < n; ++i) {
        if (st[i] != expect) return false;
        expect *= ex[i];
    }
    return true;
}

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
        if (c.layout == Layout::ODD_KV) {
            const int64_t wk = Hkv * D + 1, wv = Hkv * Dv + 1;
            make_buf(in.buf[BUF_K], "k", dt, B * Skv * wk + 1, false);
            make_buf(in.buf[BUF_V], "v", dt, B * Skv * wv + 1, false);
            in.k = view(BUF_K, 1, B, Skv, Hkv, D, Skv * wk, wk, D);
            in.v = view(BUF_V, 1, B, Skv, Hkv, Dv, Skv * wv, wv, Dv);
        }
    }
    make_buf(in.buf[BUF_LSE], "lse", FATTN_F32, B * Hq * Sq, true);
    in.lse = view(BUF_LSE, 0, B, Hq, Sq, 1, Hq * Sq, Sq, 1);

    // ---- bias layout
    in.bias = View{};
    in.dbias = View{};
    const fattn_dtype bt = c.bias_dtype;
    Buf &bb = in.buf[BUF_BIAS];
    if (c.bias != BiasKind::NONE) {
        auto dense = [&](int64_t nB, int64_t nH) {
            make_buf(bb, "bias", bt, nB * nH * Sq * Skv, false);
            in.bias = view(BUF_BIAS, 0, nB, nH, Sq, Skv, nH * Sq * Skv, Sq * Skv, Skv);
        };
        switch (c.bias) {
        case BiasKind::DENSE: case BiasKind::NEG_ROWCOL: dense(B, Hq); break;
        case BiasKind::PAD: case BiasKind::PAD_RAND: case BiasKind::LPAD_KEYS: dense(B, 1); break;
        case BiasKind::BCAST: case BiasKind::NEG_TRI: dense(1, 1); break;
        case BiasKind::NEG_BAND: dense(1, Hq); break;
        case BiasKind::KEYROW:  // like KEYPAD's layout
            make_buf(bb, "bias", bt, B * Skv, false);
            in.bias = view(BUF_BIAS, 0, B, 1, Sq, Skv, Skv, 0, 0);
            break;
        case BiasKind::STRIDE0:
            make_buf(bb, "bias", bt, Hq * Skv, false);
            in.bias = view(BUF_BIAS, 0, B, Hq, Sq, Skv, 0, Skv, 0);
            break;
        case BiasKind::KEYPAD:  // [B, 1, 1, Skv] stored, viewed as [B, 1, Sq, Skv] with stride 0
            make_buf(bb, "bias", bt, B * Skv, false);
            in.bias = view(BUF_BIAS, 0, B, 1, Sq, Skv, Skv, 0, 0);
            break;
        case BiasKind::NONE: break;
        }
        if (c.dbias) {  // dims the bias steps by 0 (extent 1 or stride 0) are summed: extent 1
            int64_t ne[3];
            for (int d = 0; d < 3; ++d) ne[d] = in.bias.ne[d] == 1 || in.bias.nb[d] == 0 ? 1 : in.bias.ne[d];
            make_buf(in.buf[BUF_DBIAS], "dbias", FATTN_F32, ne[0] * ne[1] * ne[2] * Skv, true);
            in.dbias = view(BUF_DBIAS, 0, ne[0], ne[1], ne[2], Skv, ne[1] * ne[2] * Skv, ne[2] * Skv, Skv);
        }
    }
    finish_layout(in);

    // ---- values: one stream over q, k, v, dout (the loss gradient: real random data, never
    // zeros), then the bias
    const uint64_t seed = seed_of(c.name);
    uint64_t n = 0;
    for (const View *v : {&in.q, &in.k, &in.v, &in.dout}) n = fill_random(in, *v, seed, n);
    if (c.bias != BiasKind::NONE) {
        Rng nd{seed + n * kGamma};  // the stream continues where dout ended
        const int64_t band = std::max<int64_t>(2, std::min<int64_t>(Skv / 10, 256));
        // Padding masks: batch b keeps kv_valid keys and q_valid rows (batch 1 of a 160-row case
        // keeps exactly 64 rows: a fully masked 64-row block beside a live one).
        const float padv = std::isinf(c.pad_value) ? c.pad_value : std::max(c.pad_value, lowest_finite(bt));
        auto kv_valid = [&](int64_t b) { return std::max<int64_t>(1, Skv - 5 - b * (Skv / 3)); };
        auto q_valid = [&](int64_t b) { return b == 1 && Sq == 160 ? 64 : std::max<int64_t>(1, Sq - 3 - b * (Sq / 4)); };
        auto kv_pad = [&](int64_t b) { return std::min<int64_t>(Skv - 1, 7 + 13 * b); };
        // Values by logical (b, h, i, j); cells shared through stride 0 get written repeatedly
        // with the same value (KEYPAD's value does not depend on i).
        for_each4(in.bias, [&](int64_t b, int64_t h, int64_t i, int64_t j, int64_t e) {
            float x = 0.0f;
            switch (c.bias) {
            case BiasKind::DENSE: case BiasKind::BCAST: x = nd(); break;
            case BiasKind::KEYROW: case BiasKind::STRIDE0:  // one draw per stored cell, at its first visit
                if (i == 0 && (b == 0 || c.bias == BiasKind::KEYROW)) x = nd();
                else x = float(fattn::ref::decode(bb.host.data(), bt, e));
                break;
            case BiasKind::KEYPAD:
                x = c.is_varlen() ? (j % 11 == 4 ? kNegInf : 0.0f) : (j >= Skv - (3 + 4 * b) ? kNegInf : 0.0f);
                break;
            case BiasKind::NEG_BAND: x = std::llabs(i - j) <= band ? nd() : kNegInf; break;
            case BiasKind::NEG_TRI: x = j <= i ? 0.0f : kNegInf; break;
            case BiasKind::NEG_ROWCOL:
                x = (i % 7 == 3 || j % 5 == 1 || (i * 3 + j) % 11 == 0) ? kNegInf : nd();
                break;
            case BiasKind::PAD: case BiasKind::PAD_RAND: {
                const float live = c.bias == BiasKind::PAD_RAND ? nd() : 0.0f;  // drawn either way
                x = (j >= kv_valid(b) || i >= q_valid(b)) ? padv : live;
                break;
            }
            case BiasKind::LPAD_KEYS: x = j < kv_pad(b) ? padv : 0.0f; break;
            case BiasKind::NONE: break;
            }
            (void)h;
            fattn::store_f32(bb.host.data(), bt, e, x);
        });
    }
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
    fattn::ref::attn_bwd(prob, t, out, in.wants_dbias());
    if (in.wants_dbias()) {
        std::vector<double> full = std::move(out->dbias);
        fattn::ref::reduce_dbias(prob, full, in.dbias.ne[0] == 1, in.dbias.ne[1] == 1, in.dbias.ne[2] == 1, &out->dbias);
    }
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
