// attn_ref.cpp — the float64 softmax-attention oracle (see attn_ref.h).
//
// For each sequence s and query head h it materializes, as double matrices of [len_q, len_kv]:
//   S  = scale·q kᵀ + (bias − c_i), -inf where the masks forbid the key; c_i = the row's largest
//        allowed bias (0 when there is none): softmax is unchanged by a per-row constant, and a
//        huge uniform bias (a padding row masked with finfo.min) no longer swallows the scores
//   P  = exp(S - lse')             (lse' = log Σ_j exp S_ij; row with no finite S: fully masked)
//   lse = c_i + lse'               (the row's log-sum-exp, bias included)
//   dP = dO vᵀ,  Di = Σ_j P_ij dP_ij,  dS = P ∘ (dP - D)
// and o = P v, dq = scale·dS k, dk += scale·dSᵀ q, dv += Pᵀ dO (summed over the query heads of a
// kv head, in head order), dbias = dS. Plain loops, no blocking, no shared helpers.
#include "cpu/ref/attn_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace fattn::ref {

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

struct Seq {
    int64_t b;             // index in the B dim of the arrays
    int64_t q0, lq, k0, lk;  // row offsets and lengths inside batch b
};

Seq seq_of(const Problem &p, int64_t s) {
    if (p.cu_q.empty()) return Seq{s, 0, p.Sq, 0, p.Skv};
    return Seq{0, p.cu_q[size_t(s)], p.cu_q[size_t(s) + 1] - p.cu_q[size_t(s)], p.cu_kv[size_t(s)],
               p.cu_kv[size_t(s) + 1] - p.cu_kv[size_t(s)]};
}

// Offsets into the dense arrays (64-bit everywhere).
int64_t q_at(const Problem &p, int64_t b, int64_t i, int64_t h) { return ((b * p.Sq + i) * p.Hq + h) * p.D; }
int64_t k_at(const Problem &p, int64_t b, int64_t j, int64_t h) { return ((b * p.Skv + j) * p.Hkv + h) * p.D; }
int64_t v_at(const Problem &p, int64_t b, int64_t j, int64_t h) { return ((b * p.Skv + j) * p.Hkv + h) * p.Dv; }
int64_t o_at(const Problem &p, int64_t b, int64_t i, int64_t h) { return ((b * p.Sq + i) * p.Hq + h) * p.Dv; }
int64_t lse_at(const Problem &p, int64_t b, int64_t h, int64_t i) { return (b * p.Hq + h) * p.Sq + i; }
int64_t bias_at(const Problem &p, int64_t b, int64_t h, int64_t i, int64_t j) {
    return ((b * p.Hq + h) * p.Sq + i) * p.Skv + j;
}

// S and P of one (sequence, head), row-major [lq, lk]; lse per row.
struct Block {
    std::vector<double> S, P, lse;
};

void logits_and_probs(const Problem &p, const Tensors &t, const Seq &sq, int64_t h, Block *blk) {
    const int64_t hk = h / (p.Hq / p.Hkv);
    blk->S.assign(size_t(sq.lq * sq.lk), kNegInf);
    blk->P.assign(size_t(sq.lq * sq.lk), 0.0);
    blk->lse.assign(size_t(sq.lq), kNegInf);
    for (int64_t i = 0; i < sq.lq; ++i) {
        // c: the row's largest allowed bias (see the file comment).
        double c = p.has_bias ? kNegInf : 0.0;
        for (int64_t j = 0; j < sq.lk && p.has_bias; ++j)
            if (key_allowed(p.mask, i, j, sq.lq, sq.lk))
                c = std::fmax(c, t.bias[size_t(bias_at(p, sq.b, h, sq.q0 + i, sq.k0 + j))]);
        if (c == kNegInf) c = 0.0;
        for (int64_t j = 0; j < sq.lk; ++j) {
            if (!key_allowed(p.mask, i, j, sq.lq, sq.lk)) continue;
            double dot = 0.0;
            const double *qi = &t.q[size_t(q_at(p, sq.b, sq.q0 + i, h))];
            const double *kj = &t.k[size_t(k_at(p, sq.b, sq.k0 + j, hk))];
            for (int64_t d = 0; d < p.D; ++d) dot += qi[d] * kj[d];
            double s = p.scale * dot;
            if (p.has_bias) s += t.bias[size_t(bias_at(p, sq.b, h, sq.q0 + i, sq.k0 + j))] - c;
            blk->S[size_t(i * sq.lk + j)] = s;
        }
        double m = kNegInf;
        for (int64_t j = 0; j < sq.lk; ++j) m = std::fmax(m, blk->S[size_t(i * sq.lk + j)]);
        if (m == kNegInf) continue;  // fully masked: P row stays 0, lse -inf
        double sum = 0.0;
        for (int64_t j = 0; j < sq.lk; ++j) sum += std::exp(blk->S[size_t(i * sq.lk + j)] - m);
        const double lse_rel = m + std::log(sum);
        blk->lse[size_t(i)] = c + lse_rel;
        for (int64_t j = 0; j < sq.lk; ++j)
            blk->P[size_t(i * sq.lk + j)] = std::exp(blk->S[size_t(i * sq.lk + j)] - lse_rel);
    }
}

}  // namespace

bool key_allowed(const Mask &m, int64_t i, int64_t j, int64_t len_q, int64_t len_kv) {
    if (j < 0 || j >= len_kv) return false;
    if (m.causal != 0) {
        int64_t diag = m.causal == 2 ? i + len_kv - len_q : i;
        if (j > diag) return false;
    }
    int64_t wdiag = m.window_bottom_right ? i + len_kv - len_q : i;
    if (m.window_left >= 0 && j < wdiag - m.window_left) return false;
    if (m.window_right >= 0 && j > wdiag + m.window_right) return false;
    return true;
}

void attn_fwd(const Problem &p, const Tensors &t, Outputs *out) {
    out->o.assign(size_t(p.B * p.Sq * p.Hq * p.Dv), 0.0);
    // Rows that belong to no sequence (varlen padding) keep o = 0 and lse = -inf.
    out->lse.assign(size_t(p.B * p.Hq * p.Sq), kNegInf);
    out->nvis.assign(size_t(p.B * p.Hq * p.Sq), 0);
    Block blk;
    for (int64_t s = 0; s < p.num_seqs(); ++s) {
        Seq sq = seq_of(p, s);
        for (int64_t h = 0; h < p.Hq; ++h) {
            const int64_t hk = h / (p.Hq / p.Hkv);
            logits_and_probs(p, t, sq, h, &blk);
            for (int64_t i = 0; i < sq.lq; ++i) {
                out->lse[size_t(lse_at(p, sq.b, h, sq.q0 + i))] = blk.lse[size_t(i)];
                int64_t n = 0;
                for (int64_t j = 0; j < sq.lk; ++j) n += blk.S[size_t(i * sq.lk + j)] != kNegInf;
                out->nvis[size_t(lse_at(p, sq.b, h, sq.q0 + i))] = n;
                double *oi = &out->o[size_t(o_at(p, sq.b, sq.q0 + i, h))];
                for (int64_t j = 0; j < sq.lk; ++j) {
                    double pij = blk.P[size_t(i * sq.lk + j)];
                    const double *vj = &t.v[size_t(v_at(p, sq.b, sq.k0 + j, hk))];
                    for (int64_t d = 0; d < p.Dv; ++d) oi[d] += pij * vj[d];
                }
            }
        }
    }
}

void attn_bwd(const Problem &p, const Tensors &t, Outputs *out, bool want_dbias) {
    out->dq.assign(size_t(p.B * p.Sq * p.Hq * p.D), 0.0);
    out->dk.assign(size_t(p.B * p.Skv * p.Hkv * p.D), 0.0);
    out->dv.assign(size_t(p.B * p.Skv * p.Hkv * p.Dv), 0.0);
    const bool dbias = want_dbias && p.has_bias;
    if (dbias) out->dbias.assign(size_t(p.B * p.Hq * p.Sq * p.Skv), 0.0);
    Block blk;
    std::vector<double> dP, dS, Drow;
    for (int64_t s = 0; s < p.num_seqs(); ++s) {
        Seq sq = seq_of(p, s);
        for (int64_t h = 0; h < p.Hq; ++h) {
            const int64_t hk = h / (p.Hq / p.Hkv);
            logits_and_probs(p, t, sq, h, &blk);
            dP.assign(size_t(sq.lq * sq.lk), 0.0);
            dS.assign(size_t(sq.lq * sq.lk), 0.0);
            Drow.assign(size_t(sq.lq), 0.0);
            for (int64_t i = 0; i < sq.lq; ++i) {
                const double *doi = &t.dout[size_t(o_at(p, sq.b, sq.q0 + i, h))];
                for (int64_t j = 0; j < sq.lk; ++j) {
                    const double *vj = &t.v[size_t(v_at(p, sq.b, sq.k0 + j, hk))];
                    double acc = 0.0;
                    for (int64_t d = 0; d < p.Dv; ++d) acc += doi[d] * vj[d];
                    dP[size_t(i * sq.lk + j)] = acc;
                }
                double Di = 0.0;
                for (int64_t j = 0; j < sq.lk; ++j) Di += blk.P[size_t(i * sq.lk + j)] * dP[size_t(i * sq.lk + j)];
                Drow[size_t(i)] = Di;
                for (int64_t j = 0; j < sq.lk; ++j) {
                    double pij = blk.P[size_t(i * sq.lk + j)];
                    dS[size_t(i * sq.lk + j)] = pij * (dP[size_t(i * sq.lk + j)] - Di);
                }
            }
            for (int64_t i = 0; i < sq.lq; ++i) {
                const double *qi = &t.q[size_t(q_at(p, sq.b, sq.q0 + i, h))];
                const double *doi = &t.dout[size_t(o_at(p, sq.b, sq.q0 + i, h))];
                double *dqi = &out->dq[size_t(q_at(p, sq.b, sq.q0 + i, h))];
                for (int64_t j = 0; j < sq.lk; ++j) {
                    double ds = dS[size_t(i * sq.lk + j)];
                    double pij = blk.P[size_t(i * sq.lk + j)];
                    const double *kj = &t.k[size_t(k_at(p, sq.b, sq.k0 + j, hk))];
                    double *dkj = &out->dk[size_t(k_at(p, sq.b, sq.k0 + j, hk))];
                    double *dvj = &out->dv[size_t(v_at(p, sq.b, sq.k0 + j, hk))];
                    for (int64_t d = 0; d < p.D; ++d) {
                        dqi[d] += p.scale * ds * kj[d];
                        dkj[d] += p.scale * ds * qi[d];
                    }
                    for (int64_t d = 0; d < p.Dv; ++d) dvj[d] += pij * doi[d];
                    if (dbias) out->dbias[size_t(bias_at(p, sq.b, h, sq.q0 + i, sq.k0 + j))] = ds;
                }
            }
        }
    }
}

void reduce_dbias(const Problem &p, const std::vector<double> &full, bool sum_b, bool sum_h,
                  bool sum_i, std::vector<double> *out) {
    const int64_t nb = sum_b ? 1 : p.B, nh = sum_h ? 1 : p.Hq, ni = sum_i ? 1 : p.Sq;
    out->assign(size_t(nb * nh * ni * p.Skv), 0.0);
    for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hq; ++h)
            for (int64_t i = 0; i < p.Sq; ++i)
                for (int64_t j = 0; j < p.Skv; ++j) {
                    const int64_t dst = (((sum_b ? 0 : b) * nh + (sum_h ? 0 : h)) * ni + (sum_i ? 0 : i)) * p.Skv + j;
                    (*out)[size_t(dst)] += full[size_t(bias_at(p, b, h, i, j))];
                }
}

// ---------------------------------------------------------------- gather layer

double decode(const void *base, fattn_dtype t, int64_t i) {
    if (t == FATTN_F32) return double(static_cast<const float *>(base)[i]);
    uint16_t h = static_cast<const uint16_t *>(base)[i];
    if (t == FATTN_BF16) {  // bf16 is the top half of an IEEE binary32
        uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return double(f);
    }
    // binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    if (e == 0) return sign * std::ldexp(double(m), -24);
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
    return sign * std::ldexp(double(1024 + m), e - 25);
}

void gather(const AttnFwdParams &a, Problem *p, Tensors *t) {
    const bool varlen = a.cu_seqlens_q != nullptr;
    p->B = varlen ? 1 : a.batch;
    p->Sq = a.total_q;
    p->Skv = a.total_kv;
    p->Hq = a.hq;
    p->Hkv = a.hkv;
    p->D = a.d;
    p->Dv = a.dim_v;
    p->scale = double(a.scale);
    // The params hold the normalized form (causal folded into win_right = 0); that is one window.
    p->mask = Mask{};
    p->mask.window_left = a.win_left;
    p->mask.window_right = a.win_right;
    p->mask.window_bottom_right = a.bottom_right;
    p->cu_q.clear();
    p->cu_kv.clear();
    if (varlen) {
        for (int64_t s = 0; s <= a.batch; ++s) {
            p->cu_q.push_back(a.cu_seqlens_q[s]);
            p->cu_kv.push_back(a.cu_seqlens_kv[s]);
        }
    }
    p->has_bias = a.bias != nullptr;

    t->q.assign(size_t(p->B * p->Sq * p->Hq * p->D), 0.0);
    t->k.assign(size_t(p->B * p->Skv * p->Hkv * p->D), 0.0);
    t->v.assign(size_t(p->B * p->Skv * p->Hkv * p->Dv), 0.0);
    for (int64_t b = 0; b < p->B; ++b) {
        for (int64_t i = 0; i < p->Sq; ++i)
            for (int64_t h = 0; h < p->Hq; ++h)
                for (int64_t d = 0; d < p->D; ++d)
                    t->q[size_t(q_at(*p, b, i, h) + d)] = decode(a.q, a.dtype, b * a.q_sb + i * a.q_ss + h * a.q_sh + d);
        for (int64_t j = 0; j < p->Skv; ++j)
            for (int64_t h = 0; h < p->Hkv; ++h) {
                for (int64_t d = 0; d < p->D; ++d)
                    t->k[size_t(k_at(*p, b, j, h) + d)] = decode(a.k, a.dtype, b * a.k_sb + j * a.k_ss + h * a.k_sh + d);
                for (int64_t d = 0; d < p->Dv; ++d)
                    t->v[size_t(v_at(*p, b, j, h) + d)] = decode(a.v, a.dtype, b * a.v_sb + j * a.v_ss + h * a.v_sh + d);
            }
    }
    t->bias.clear();
    if (p->has_bias) {
        t->bias.assign(size_t(p->B * p->Hq * p->Sq * p->Skv), 0.0);
        for (int64_t b = 0; b < p->B; ++b)
            for (int64_t h = 0; h < p->Hq; ++h)
                for (int64_t i = 0; i < p->Sq; ++i)
                    for (int64_t j = 0; j < p->Skv; ++j)
                        t->bias[size_t(bias_at(*p, b, h, i, j))] =
                            decode(a.bias, a.bias_dtype, b * a.bias_sb + h * a.bias_sh + i * a.bias_si + j);
    }
    t->dout.clear();
}

void gather(const AttnBwdParams &a, Problem *p, Tensors *t) {
    gather(static_cast<const AttnFwdParams &>(a), p, t);
    t->dout.assign(size_t(p->B * p->Sq * p->Hq * p->Dv), 0.0);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t i = 0; i < p->Sq; ++i)
            for (int64_t h = 0; h < p->Hq; ++h)
                for (int64_t d = 0; d < p->Dv; ++d)
                    t->dout[size_t(o_at(*p, b, i, h) + d)] =
                        decode(a.dout, a.dtype, b * a.do_sb + i * a.do_ss + h * a.do_sh + d);
}

// ---------------------------------------------------------------- sampled layer

namespace {

Mask mask_of(const AttnFwdParams &a) {
    Mask m;
    m.window_left = a.win_left;
    m.window_right = a.win_right;
    m.window_bottom_right = a.bottom_right;
    return m;
}

Seq seq_of(const AttnFwdParams &a, int64_t s) {
    if (!a.cu_seqlens_q) return Seq{s, 0, a.seqlen_q, 0, a.seqlen_kv};
    return Seq{0, a.cu_seqlens_q[s], int64_t(a.cu_seqlens_q[s + 1]) - a.cu_seqlens_q[s], a.cu_seqlens_kv[s],
               int64_t(a.cu_seqlens_kv[s + 1]) - a.cu_seqlens_kv[s]};
}

// Keys [lo, hi] that can pass key_allowed for query i: bounds the loops of the sampled layer on
// long sequences. A superset by construction (each bound is one clause of key_allowed);
// key_allowed still decides every key inside it.
void key_span(const Mask &m, int64_t i, int64_t lq, int64_t lk, int64_t *lo, int64_t *hi) {
    *lo = 0;
    *hi = lk - 1;
    if (m.causal != 0) *hi = std::min(*hi, m.causal == 2 ? i + lk - lq : i);
    int64_t wdiag = m.window_bottom_right ? i + lk - lq : i;
    if (m.window_left >= 0) *lo = std::max(*lo, wdiag - m.window_left);
    if (m.window_right >= 0) *hi = std::min(*hi, wdiag + m.window_right);
}

double bias_of(const AttnFwdParams &a, const Seq &sq, int64_t h, int64_t i, int64_t j) {
    return decode(a.bias, a.bias_dtype, sq.b * a.bias_sb + h * a.bias_sh + (sq.q0 + i) * a.bias_si + sq.k0 + j);
}

// The row's largest allowed bias c (0 when there is none or no bias): logits are taken
// relative to it, as in the core layer.
double bias_ceiling(const AttnFwdParams &a, const Seq &sq, const Mask &m, int64_t h, int64_t i) {
    if (!a.bias) return 0.0;
    int64_t lo, hi;
    key_span(m, i, sq.lq, sq.lk, &lo, &hi);
    double c = kNegInf;
    for (int64_t j = lo; j <= hi; ++j)
        if (key_allowed(m, i, j, sq.lq, sq.lk)) c = std::fmax(c, bias_of(a, sq, h, i, j));
    return c == kNegInf ? 0.0 : c;
}

// Logit of (row i, key j) of head h in sequence sq relative to the row's bias ceiling c,
// -inf when masked.
double logit(const AttnFwdParams &a, const Seq &sq, const Mask &m, int64_t h, int64_t i, int64_t j, double c) {
    if (!key_allowed(m, i, j, sq.lq, sq.lk)) return kNegInf;
    const int64_t hk = h / (a.hq / a.hkv), gi = sq.q0 + i, gj = sq.k0 + j;
    double bias = 0.0;  // read first: a -inf bias decides the logit without the dot product
    if (a.bias) bias = bias_of(a, sq, h, i, j);
    if (bias == kNegInf) return kNegInf;
    double dot = 0.0;
    for (int64_t d = 0; d < a.d; ++d)
        dot += decode(a.q, a.dtype, sq.b * a.q_sb + gi * a.q_ss + h * a.q_sh + d) *
               decode(a.k, a.dtype, sq.b * a.k_sb + gj * a.k_ss + hk * a.k_sh + d);
    return double(a.scale) * dot + (bias - c);
}

// dP_ij = dO_i · v_j
double dlogit_p(const AttnBwdParams &a, const Seq &sq, int64_t h, int64_t i, int64_t j) {
    const int64_t hk = h / (a.hq / a.hkv), gi = sq.q0 + i, gj = sq.k0 + j;
    const int64_t dv = a.dim_v;
    double acc = 0.0;
    for (int64_t d = 0; d < dv; ++d)
        acc += decode(a.dout, a.dtype, sq.b * a.do_sb + gi * a.do_ss + h * a.do_sh + d) *
               decode(a.v, a.dtype, sq.b * a.v_sb + gj * a.v_ss + hk * a.v_sh + d);
    return acc;
}

}  // namespace

void attn_row(const AttnBwdParams &a, int64_t s, int64_t h, int64_t i, RowRef *r) {
    const AttnFwdParams &f = a;
    const Seq sq = seq_of(f, s);
    const Mask m = mask_of(f);
    const int64_t hk = h / (f.hq / f.hkv);
    int64_t lo, hi;
    key_span(m, i, sq.lq, sq.lk, &lo, &hi);
    std::vector<double> S(size_t(sq.lk), kNegInf), P(size_t(sq.lk), 0.0), dP(size_t(sq.lk), 0.0);
    double mx = kNegInf;
    r->nvis = 0;
    r->ceil = bias_ceiling(f, sq, m, h, i);
    for (int64_t j = lo; j <= hi; ++j) {
        S[size_t(j)] = logit(f, sq, m, h, i, j, r->ceil);
        mx = std::fmax(mx, S[size_t(j)]);
        r->nvis += S[size_t(j)] != kNegInf;
    }
    r->o.assign(size_t(f.dim_v), 0.0);
    r->dq.assign(size_t(f.d), 0.0);
    r->lse = r->lse_rel = kNegInf;
    if (mx == kNegInf) return;
    double sum = 0.0;
    for (int64_t j = lo; j <= hi; ++j) sum += std::exp(S[size_t(j)] - mx);
    r->lse_rel = mx + std::log(sum);
    r->lse = r->ceil + r->lse_rel;
    double D = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
        P[size_t(j)] = std::exp(S[size_t(j)] - r->lse_rel);
        if (P[size_t(j)] == 0.0) continue;
        dP[size_t(j)] = dlogit_p(a, sq, h, i, j);
        D += P[size_t(j)] * dP[size_t(j)];
        for (int64_t d = 0; d < f.dim_v; ++d)
            r->o[size_t(d)] += P[size_t(j)] * decode(f.v, f.dtype, sq.b * f.v_sb + (sq.k0 + j) * f.v_ss + hk * f.v_sh + d);
    }
    for (int64_t j = lo; j <= hi; ++j) {
        double ds = P[size_t(j)] * (dP[size_t(j)] - D);
        if (ds == 0.0) continue;
        for (int64_t d = 0; d < f.d; ++d)
            r->dq[size_t(d)] += double(f.scale) * ds * decode(f.k, f.dtype, sq.b * f.k_sb + (sq.k0 + j) * f.k_ss + hk * f.k_sh + d);
    }
}

int64_t rows_seeing_key(const AttnFwdParams &f, int64_t s, int64_t h, int64_t j) {
    const Seq sq = seq_of(f, s);
    const Mask m = mask_of(f);
    int64_t n = 0;
    for (int64_t i = 0; i < sq.lq; ++i) {
        if (!key_allowed(m, i, j, sq.lq, sq.lk)) continue;
        if (f.bias && decode(f.bias, f.bias_dtype, sq.b * f.bias_sb + h * f.bias_sh + (sq.q0 + i) * f.bias_si + sq.k0 + j) == kNegInf)
            continue;
        ++n;
    }
    return n;
}

void attn_key(const AttnBwdParams &a, int64_t s, int64_t hk, int64_t j, std::vector<double> *dk,
              std::vector<double> *dv) {
    const AttnFwdParams &f = a;
    const Seq sq = seq_of(f, s);
    const Mask m = mask_of(f);
    const int64_t group = f.hq / f.hkv;
    dk->assign(size_t(f.d), 0.0);
    dv->assign(size_t(f.dim_v), 0.0);
    RowRef row;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
        for (int64_t i = 0; i < sq.lq; ++i) {
            if (!key_allowed(m, i, j, sq.lq, sq.lk)) continue;
            if (f.bias && bias_of(f, sq, h, i, j) == kNegInf) continue;
            // Row statistics: lse_i and D_i = Σ_j' P_ij' dP_ij' = dO_i · o_i.
            attn_row(a, s, h, i, &row);
            const double pij = std::exp(logit(f, sq, m, h, i, j, row.ceil) - row.lse_rel);
            double D = 0.0;
            for (int64_t d = 0; d < f.dim_v; ++d)
                D += row.o[size_t(d)] * decode(a.dout, f.dtype, sq.b * a.do_sb + (sq.q0 + i) * a.do_ss + h * a.do_sh + d);
            const double ds = pij * (dlogit_p(a, sq, h, i, j) - D);
            for (int64_t d = 0; d < f.d; ++d)
                (*dk)[size_t(d)] += double(f.scale) * ds * decode(f.q, f.dtype, sq.b * f.q_sb + (sq.q0 + i) * f.q_ss + h * f.q_sh + d);
            for (int64_t d = 0; d < f.dim_v; ++d)
                (*dv)[size_t(d)] += pij * decode(a.dout, f.dtype, sq.b * a.do_sb + (sq.q0 + i) * a.do_ss + h * a.do_sh + d);
        }
}

}  // namespace fattn::ref
