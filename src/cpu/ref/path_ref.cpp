// path_ref.cpp — float64 PaTH oracle: explicit Householder walks, materialized score rows,
// hand-derived reverse-mode backward. See path_ref.h for layouts; PATH.md §1.3 for the math.
//
// Forward of one query i (one sequence, one query head hq with kv head h):
//   x_i = q_i;  for j = i..0:  s_ij = x_j . k_j,  x_{j-1} = H_j x_j   (H_j = I - b_j w_j w_j^T)
// so x_j = H_{j+1} ... H_i q_i and s_ij = q_i^T H_i ... H_{j+1} k_j (every H_t is symmetric).
// Backward walks the same chain upwards (j = 0..i) carrying gx = dLoss/dx_{j-1}:
//   dLoss/dx_j = H_j gx + ds_ij k_j,   dk_j += ds_ij x_j,
//   dH_j = gx x_j^T  =>  dbeta_j -= (w.gx)(w.x_j),  dw_j -= beta_j ((w.x_j) gx + (w.gx) x_j),
// and dq_i is the final gx. ds_ij = scale * dS_ij, dS = P (dP - delta) the softmax backward.
#include "cpu/ref/path_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fattn::ref {
namespace {

struct Seq {
    int64_t b, begin, len;
};

std::vector<Seq> sequences(const PathRefShape &s) {
    std::vector<Seq> out;
    if (s.cu_seqlens.empty()) {
        for (int64_t b = 0; b < s.B; ++b) out.push_back({b, 0, s.T});
    } else {
        for (size_t i = 0; i + 1 < s.cu_seqlens.size(); ++i)
            out.push_back({0, s.cu_seqlens[i], int64_t(s.cu_seqlens[i + 1]) - s.cu_seqlens[i]});
    }
    return out;
}

double dot(const double *a, const double *b, int64_t n) {
    double r = 0;
    for (int64_t i = 0; i < n; ++i) r += a[i] * b[i];
    return r;
}

// One (sequence, query head) problem with index helpers into the contiguous tensors.
struct Head {
    const PathRefShape &s;
    Seq sq;
    int64_t hq, h;
    int64_t row(int64_t t) const { return sq.b * s.T + sq.begin + t; }
    int64_t qi(int64_t t) const { return (row(t) * s.Hq + hq) * s.K; }
    int64_t ki(int64_t t) const { return (row(t) * s.H + h) * s.K; }
    int64_t vi(int64_t t) const { return (row(t) * s.H + h) * s.V; }
    int64_t bi(int64_t t) const { return row(t) * s.H + h; }
    int64_t gi(int64_t t) const { return row(t) * s.Hq + hq; }
    int64_t oi(int64_t t) const { return (row(t) * s.Hq + hq) * s.V; }
    int64_t li(int64_t t) const { return (sq.b * s.Hq + hq) * s.T + sq.begin + t; }
};

// Raw scores of query i against keys i..0 (scores[j]) and the walk states x_j (states[j*K..]).
void walk(const Head &hd, const double *q, const double *k, const double *w, const double *beta,
          int64_t i, std::vector<double> &scores, std::vector<double> &states) {
    const int64_t K = hd.s.K;
    std::vector<double> x(q + hd.qi(i), q + hd.qi(i) + K);
    for (int64_t j = i; j >= 0; --j) {
        std::copy(x.begin(), x.end(), states.begin() + j * K);
        scores[j] = dot(x.data(), k + hd.ki(j), K);
        const double *wj = w + hd.ki(j);
        double c = beta[hd.bi(j)] * dot(wj, x.data(), K);
        for (int64_t d = 0; d < K; ++d) x[d] -= c * wj[d];
    }
}

std::vector<double> gate_prefix(const Head &hd, const double *g) {
    std::vector<double> G(hd.sq.len, 0.0);
    double acc = 0;
    for (int64_t t = 0; t < hd.sq.len; ++t) {
        if (g) acc += g[hd.gi(t)];
        G[t] = acc;
    }
    return G;
}

// Softmax row of query i: probabilities p[0..i] and the natural-log denominator.
double softmax_row(const std::vector<double> &scores, const std::vector<double> &G, double scale,
                   int64_t i, std::vector<double> &p) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j <= i; ++j) {
        p[j] = scale * (scores[j] + G[i] - G[j]);
        m = std::max(m, p[j]);
    }
    double l = 0;
    for (int64_t j = 0; j <= i; ++j) l += (p[j] = std::exp(p[j] - m));
    for (int64_t j = 0; j <= i; ++j) p[j] /= l;
    return m + std::log(l);
}

}  // namespace

void path_ref_fwd(const PathRefShape &s, const double *q, const double *k, const double *v,
                  const double *w, const double *beta, const double *g, double *o, double *lse) {
    const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.K));
    const int64_t grp = s.Hq / s.H;
    for (const Seq &sq : sequences(s)) {
        for (int64_t hq = 0; hq < s.Hq; ++hq) {
            Head hd{s, sq, hq, hq / grp};
            std::vector<double> G = gate_prefix(hd, g);
            std::vector<double> scores(sq.len), states(sq.len * s.K), p(sq.len);
            for (int64_t i = 0; i < sq.len; ++i) {
                walk(hd, q, k, w, beta, i, scores, states);
                lse[hd.li(i)] = softmax_row(scores, G, scale, i, p);
                double *oi = o + hd.oi(i);
                for (int64_t d = 0; d < s.V; ++d) oi[d] = 0;
                for (int64_t j = 0; j <= i; ++j)
                    for (int64_t d = 0; d < s.V; ++d) oi[d] += p[j] * v[hd.vi(j) + d];
            }
        }
    }
}

void path_ref_bwd(const PathRefShape &s, const double *q, const double *k, const double *v,
                  const double *w, const double *beta, const double *g, const double *dout,
                  double *dq, double *dk, double *dv, double *dw, double *dbeta, double *dg) {
    const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.K));
    const int64_t grp = s.Hq / s.H;
    const int64_t rows = s.B * s.T;
    std::fill(dq, dq + rows * s.Hq * s.K, 0.0);
    std::fill(dk, dk + rows * s.H * s.K, 0.0);
    std::fill(dv, dv + rows * s.H * s.V, 0.0);
    std::fill(dw, dw + rows * s.H * s.K, 0.0);
    std::fill(dbeta, dbeta + rows * s.H, 0.0);
    if (g) std::fill(dg, dg + rows * s.Hq, 0.0);
    const int64_t K = s.K;
    for (const Seq &sq : sequences(s)) {
        for (int64_t hq = 0; hq < s.Hq; ++hq) {
            Head hd{s, sq, hq, hq / grp};
            std::vector<double> G = gate_prefix(hd, g), dG(sq.len, 0.0);
            std::vector<double> scores(sq.len), states(sq.len * K), p(sq.len), ds(sq.len), gx(K);
            for (int64_t i = 0; i < sq.len; ++i) {
                walk(hd, q, k, w, beta, i, scores, states);
                softmax_row(scores, G, scale, i, p);
                const double *doi = dout + hd.oi(i);
                double delta = 0;
                for (int64_t j = 0; j <= i; ++j) {
                    ds[j] = dot(doi, v + hd.vi(j), s.V);  // dP_ij
                    delta += p[j] * ds[j];
                }
                for (int64_t j = 0; j <= i; ++j) {
                    double dS = p[j] * (ds[j] - delta);  // d loss / d logit
                    for (int64_t d = 0; d < s.V; ++d) dv[hd.vi(j) + d] += p[j] * doi[d];
                    dG[i] += scale * dS;
                    dG[j] -= scale * dS;
                    ds[j] = scale * dS;  // d loss / d raw score
                }
                std::fill(gx.begin(), gx.end(), 0.0);
                for (int64_t j = 0; j <= i; ++j) {
                    const double *xj = states.data() + j * K;
                    const double *wj = w + hd.ki(j);
                    const double bj = beta[hd.bi(j)];
                    double a = dot(wj, gx.data(), K), b = dot(wj, xj, K);
                    dbeta[hd.bi(j)] -= a * b;
                    for (int64_t d = 0; d < K; ++d) {
                        dw[hd.ki(j) + d] -= bj * (b * gx[d] + a * xj[d]);
                        gx[d] -= bj * a * wj[d];
                        dk[hd.ki(j) + d] += ds[j] * xj[d];
                        gx[d] += ds[j] * k[hd.ki(j) + d];
                    }
                }
                for (int64_t d = 0; d < K; ++d) dq[hd.qi(i) + d] = gx[d];
            }
            if (g) {
                double acc = 0;  // dg_t = sum_{u >= t} dG_u (G is an inclusive prefix sum)
                for (int64_t t = sq.len - 1; t >= 0; --t) dg[hd.gi(t)] = (acc += dG[t]);
            }
        }
    }
}

}  // namespace fattn::ref
