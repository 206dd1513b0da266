// path_ref.h — float64 oracle of PaTH attention (docs/PATH.md, "Definition"), tests and tools only.
//
// Written from the definition, never optimized: for every query the explicit Householder walk
// x <- H_j x (j = i, i-1, ..., 0) gives the raw scores s_ij = q_i^T H_i ... H_{j+1} k_j, the
// scores are materialized per row, softmax'ed, and the backward is reverse-mode of that same walk,
// derived by hand (no tape). Cost O(T^2 K) per head for both directions, memory O(T K).
// Layouts are contiguous: q [B,T,Hq,K], k/w [B,T,H,K], v [B,T,H,V], beta [B,T,H], g [B,T,Hq],
// o [B,T,Hq,V], lse [B,Hq,T] (natural log). Varlen: cu_seqlens non-empty, B = 1.
#pragma once

#include <cstdint>
#include <vector>

namespace fattn::ref {

struct PathRefShape {
    int64_t B = 1, T = 0, Hq = 1, H = 1, K = 0, V = 0;
    std::vector<int32_t> cu_seqlens;  // empty: dense
    double scale = 0.0;               // 0: 1/sqrt(K)
};

// g may be null (no gate).
void path_ref_fwd(const PathRefShape &s, const double *q, const double *k, const double *v,
                  const double *w, const double *beta, const double *g, double *o, double *lse);

// Gradients of sum(o * dout). dg is only written when g is non-null. Every output is overwritten.
void path_ref_bwd(const PathRefShape &s, const double *q, const double *k, const double *v,
                  const double *w, const double *beta, const double *g, const double *dout,
                  double *dq, double *dk, double *dv, double *dw, double *dbeta, double *dg);

}  // namespace fattn::ref
