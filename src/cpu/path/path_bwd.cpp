// path_bwd.cpp — blocked CPU backward of PaTH attention with the packed query history
// (PATH.md §5-§6; our own phase split, same chunk/segment structure).
//
// Notation per (sequence, query head): chunk c = tokens [64c, 64c+64), segment r = chunks
// [8r, 8r+8). P_c = I - W_c^T U_c is the product of the chunk's Householders (UT transform), and
// I - E_r = P_{8r+7} ... P_{8r} the segment's. A query row walked back is x <- x P_c.
//   Q~_t          query walked back to its chunk start (token walk inside the chunk)
//   K~_j          key walked forward to its chunk end;  K^_j: forward to its segment end
//   Qh[t, r]      query walked back to the start of segment r (the history, 1 <= r <= t/512)
// Scores: same chunk: token walk; same segment, chunk cj: (Q~ P_{ci-1} ... P_{cj+1}) . K~_j;
// earlier segment r': Qh[t, r'+1] . K^_j, with Qh[t, r] = Qh[t, r+1] (I - E_r).
//
// Phases (each a parallel_for over independent items, fixed order inside every item):
//   1. prepare: U, K~ per (seq, kv head, chunk); G per (seq, query head)      [path_common.cpp]
//   2. delta_t = dout_t . o_t per (seq, query head)
//   3. E_r and K^ per (seq, kv head, segment r < N-1)
//   4. history producer per (seq, query head, chunk >= 8): walks Q~ back chunk by chunk and stores
//      it at every segment start it crosses. The history is NaN-poisoned before this phase, so a
//      cell read before it is written (or never written) turns the gradients into NaN.
//   5. per (seq, kv head): for each query head of the group (fixed order), each query chunk:
//      reverse-mode of the forward's walk, segments ascending (gamma = dLoss/d state): history
//      columns for earlier segments (K x K step through E_r'), recomputed chunk states inside the
//      own segment, token walk inside the own chunk; then the kv-head chain rules: K^ -> K~,
//      E -> (W, U), U -> (W, beta) through the UT transform, K~ -> (k, W, beta).
// dk, dv, dw, dbeta of a kv head therefore sum its query heads in f32 in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/parallel.h"
#include "cpu/path/path_cpu.h"

namespace fattn::cpu {

using namespace path_detail;

namespace {

struct Bwd {
    const PathBwdParams &p;
    PathLayout lay;
    Ws ws;
    mutable detail::SlotPool pool;  // one scratch slot per thread (acquire/release only)
    ScratchDims dims;
    std::vector<int64_t> chunk_base;
    int64_t K, V, H, HQ, grp;

    Bwd(const PathBwdParams &p_, void *workspace)
        : p(p_), lay(path_layout(p_)),
          ws(bind(path_workspace(p_, lay, FATTN_DIR_BWD), workspace, FATTN_DIR_BWD)),
          pool(ws.nslots), dims(scratch_dims(p_, lay)) {
        chunk_base.assign(sz(p.num_seqs) + 1, 0);
        for (int64_t s = 0; s < p.num_seqs; ++s)
            chunk_base[sz(s) + 1] = chunk_base[sz(s)] + path_num_chunks(path_seq(p, s).len);
        K = p.dk, V = p.dv, H = p.h, HQ = p.hq, grp = p.group();
    }
    int64_t seq_of_chunk(int64_t gc) const {
        return int64_t(std::upper_bound(chunk_base.begin(), chunk_base.end(), gc) - chunk_base.begin()) - 1;
    }
    // Element offset of history cell (s, t, r) for query head hq.
    int64_t hist(int64_t s, const PathSeq &sq, int64_t t, int64_t r, int64_t hq) const {
        return (path_hist_cell(p, lay, s, sq, t, r) * HQ + hq) * K;
    }
    float *kv_row(float *base, const PathSeq &sq, int64_t t, int64_t h, int64_t d) const {
        return base + ((sq.row0 + t) * H + h) * d;
    }
    float *kk(float *base, int64_t s, int64_t r, int64_t h) const {
        return base + ((lay.seg_base[sz(s)] + r) * H + h) * K * K;
    }
};

// ---- small dense helpers (row-major, n x n or K x K) ----
void matmul(const float *a, const float *b, float *c, int64_t n) {  // c = a b
    std::fill(c, c + n * n, 0.f);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < n; ++k) {
            const float x = a[i * n + k];
            for (int64_t j = 0; j < n; ++j) c[i * n + j] += x * b[k * n + j];
        }
}
void transpose(const float *a, float *t, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) t[j * n + i] = a[i * n + j];
}
// P_c = I - W^T U as an explicit K x K matrix.
void chunk_product(const Chunk &ch, int64_t H, int64_t K, float *pm) {
    std::fill(pm, pm + K * K, 0.f);
    for (int64_t d = 0; d < K; ++d) pm[d * K + d] = 1.f;
    for (int64_t b = 0; b < ch.n; ++b) {
        const float *wb = ch.w + b * K, *ub = ch.u + b * H * K;
        for (int64_t d = 0; d < K; ++d)
            for (int64_t e = 0; e < K; ++e) pm[d * K + e] -= wb[d] * ub[e];
    }
}

// ---- per-item scratch of each phase (carved from the thread's slot; sizes from the same carve) ----
struct DeltaScratch {
    float *o, *d;  // [V], [V]
    size_t bytes;
};
DeltaScratch carve_delta(const ScratchDims &dm, char *base) {
    Arena a{base};
    DeltaScratch s;
    s.o = zeros(a, dm.V);
    s.d = zeros(a, dm.V);
    s.bytes = a.used;
    return s;
}

struct SegScratch {
    Chunk ch[kPathChunksPerSegment];
    float *tmp, *pi, *up;  // [C], [K, K], [C, K]
    size_t bytes;
};
SegScratch carve_seg(const ScratchDims &dm, char *base) {
    Arena a{base};
    SegScratch s;
    for (Chunk &c : s.ch) carve_chunk(a, dm, &c);
    s.tmp = zeros(a, dm.C);
    s.pi = zeros(a, dm.K * dm.K);
    s.up = zeros(a, dm.C * dm.K);
    s.bytes = a.used;
    return s;
}

struct HistScratch : WalkScratch {
    float *tmp;  // [C]
    size_t bytes;
};
HistScratch carve_hist(const ScratchDims &dm, char *base) {
    Arena a{base};
    HistScratch s;
    carve_walk(a, dm, &s);
    s.tmp = zeros(a, dm.C);
    s.bytes = a.used;
    return s;
}

// Phase 5a, one query chunk (carved afresh, zero-filled, by every query_chunk_bwd call).
struct QcbScratch {
    Chunk qc, kc;
    float *dout, *lse, *delta;        // [C, V], [C], [C]
    float *q, *qt, *xs, *sci;         // [C, K], [C, K], [C, C, K], [C, C]
    float *gamma, *vb, *qh, *gold;    // [C, K], [C, V], [C, K], [K]
    float *tmpa, *tmpb, *xst, *ds;    // [C], [C], [max(1, min(7, chunks-1)), C, K], [C]
    size_t bytes;
};
QcbScratch carve_qcb(const ScratchDims &dm, char *base) {
    const int64_t C = dm.C, K = dm.K, V = dm.V;
    const int64_t nst = std::max<int64_t>(1, std::min<int64_t>(kPathChunksPerSegment - 1, dm.chunks - 1));
    Arena a{base};
    QcbScratch s;
    carve_chunk(a, dm, &s.qc);
    carve_chunk(a, dm, &s.kc);
    s.dout = zeros(a, C * V);
    s.lse = zeros(a, C);
    s.delta = zeros(a, C);
    s.q = zeros(a, C * K);
    s.qt = zeros(a, C * K);
    s.xs = zeros(a, C * C * K);
    s.sci = zeros(a, C * C);
    s.gamma = zeros(a, C * K);
    s.vb = zeros(a, C * V);
    s.qh = zeros(a, C * K);
    s.gold = zeros(a, K);
    s.tmpa = zeros(a, C);
    s.tmpb = zeros(a, C);
    s.xst = zeros(a, nst * C * K);
    s.ds = zeros(a, C);
    s.bytes = a.used;
    return s;
}

// Phase 5b, one kv head. The per-segment and per-chunk arrays are (re)filled inside the loops,
// where the std::vectors they replace were declared; segment arrays exist only when a sequence
// has >= 2 segments, the dE arrays only when it has >= 3.
struct KvbScratch {
    float *tmpa, *tmpb;                            // [C], [C]
    Chunk ch[kPathChunksPerSegment];               // (i): the segment's chunks
    float *ys, *gy;                                // (i): [8, K], [K]
    float *pm, *bm, *a, *dpi, *t1, *t2, *t3;       // (ii): [8, K, K] x 2, [K, K] x 5
    Chunk cc;                                      // (iii)
    float *t0, *u, *dt0, *z, *ys2, *gy2;           // (iii): [C, C], [C, K], [C, C] x 2, [C, K], [K]
    size_t bytes;
};
KvbScratch carve_kvb(const ScratchDims &dm, char *base) {
    const int64_t C = dm.C, K = dm.K, KK = dm.K * dm.K;
    const bool seg = dm.segs >= 2, de = dm.segs >= 3;
    Arena a{base};
    KvbScratch s;
    s.tmpa = zeros(a, C);
    s.tmpb = zeros(a, C);
    for (Chunk &c : s.ch) {
        if (seg) carve_chunk(a, dm, &c);
    }
    s.ys = a.floats(seg ? kPathChunksPerSegment * K : 0);
    s.gy = a.floats(seg ? K : 0);
    s.pm = a.floats(de ? kPathChunksPerSegment * KK : 0);
    s.bm = a.floats(de ? kPathChunksPerSegment * KK : 0);
    s.a = a.floats(de ? KK : 0);
    s.dpi = a.floats(de ? KK : 0);
    s.t1 = a.floats(de ? KK : 0);
    s.t2 = a.floats(de ? KK : 0);
    s.t3 = a.floats(de ? KK : 0);
    carve_chunk(a, dm, &s.cc);
    s.t0 = a.floats(C * C);
    s.u = a.floats(C * K);
    s.dt0 = a.floats(C * C);
    s.z = a.floats(C * C);
    s.ys2 = a.floats(C * K);
    s.gy2 = a.floats(K);
    s.bytes = a.used;
    return s;
}

// Per-query-chunk data the gradient of a score block needs.
struct QRows {
    int64_t n = 0, t0 = 0;  // rows, first token (inside the sequence)
    const float *dout = nullptr, *lse = nullptr, *delta = nullptr;
    const float *G = nullptr;  // G[t * HQ]
    float *dG = nullptr;       // dG[t * HQ]
};

// Gradient of the scores of query states X ([n, K]) against keys kb (row stride H*K) of tokens
// [kt0, kt0 + nk): gamma += ds kb, dkb += ds X, dv += P dout, dG. No causal mask (earlier chunk).
void score_block(const Bwd &B, const QRows &qr, const float *x, const float *kb, int64_t kt0,
                 int64_t nk, const float *vb, float *gamma, float *dkb, float *dvb) {
    const int64_t K = B.K, V = B.V, HK = B.H * B.K, HV = B.H * B.V, HQ = B.HQ;
    const float scale = B.p.scale;
    for (int64_t a = 0; a < qr.n; ++a) {
        const float *xa = x + a * K, *doa = qr.dout + a * V;
        float *ga = gamma + a * K;
        const float Ga = qr.G[(qr.t0 + a) * HQ];
        float dgrow = 0.f;
        for (int64_t b = 0; b < nk; ++b) {
            const float *kbb = kb + b * HK;
            const float l = scale * (dotf(xa, kbb, K) + Ga - qr.G[(kt0 + b) * HQ]);
            const float P = std::exp(l - qr.lse[sz(a)]);
            const float dP = dotf(doa, vb + b * V, V);
            const float ds = scale * P * (dP - qr.delta[sz(a)]);
            float *dkbb = dkb + b * HK, *dvbb = dvb + b * HV;
            for (int64_t d = 0; d < K; ++d) {
                ga[d] += ds * kbb[d];
                dkbb[d] += ds * xa[d];
            }
            for (int64_t d = 0; d < V; ++d) dvbb[d] += P * doa[d];
            dgrow += ds;
            qr.dG[(kt0 + b) * HQ] -= ds;
        }
        qr.dG[(qr.t0 + a) * HQ] += dgrow;
    }
}

void load_values(const PathFwdParams &p, const PathSeq &sq, int64_t h, int64_t c0, int64_t n,
                 float *vb) {
    for (int64_t b = 0; b < n; ++b)
        load_row(p.v, p.dtype, sq.b * p.v_sb + (sq.begin + c0 + b) * p.v_ss + h * p.v_sh, p.dv,
                 vb + b * p.dv);
}

// ---- phase 2: delta ----
void phase_delta(const Bwd &B) {
    const auto &p = B.p;
    parallel_for(p.num_seqs * B.HQ, p.nthreads, [&](int64_t item) {
        const int64_t s = item / B.HQ, hq = item % B.HQ;
        const PathSeq sq = path_seq(p, s);
        SlotLease slot(B.pool, B.ws);
        const DeltaScratch sc = carve_delta(B.dims, slot.base());
        float *o = sc.o, *d = sc.d;
        for (int64_t t = 0; t < sq.len; ++t) {
            const int64_t tt = sq.begin + t;
            load_row(p.o, p.dtype, sq.b * p.o_sb + tt * p.o_ss + hq * p.o_sh, B.V, o);
            load_row(p.dout, p.dtype, sq.b * p.do_sb + tt * p.do_ss + hq * p.do_sh, B.V, d);
            B.ws.delta[(sq.row0 + t) * B.HQ + hq] = dotf(o, d, B.V);
        }
    });
}

// ---- phase 3: segment products E_r and keys walked to their segment end K^ ----
void phase_segments(const Bwd &B) {
    const auto &p = B.p;
    const int64_t K = B.K, H = B.H, nseg = B.lay.seg_base.back();
    parallel_for(nseg * H, p.nthreads, [&](int64_t item) {
        const int64_t gs = item / H, h = item % H;
        const int64_t s = int64_t(std::upper_bound(B.lay.seg_base.begin(), B.lay.seg_base.end(), gs) -
                                  B.lay.seg_base.begin()) - 1;
        const PathSeq sq = path_seq(p, s);
        const int64_t r = gs - B.lay.seg_base[sz(s)];
        if (r >= path_num_segments(sq.len) - 1) return;  // the last segment's are never used
        SlotLease slot(B.pool, B.ws);
        SegScratch scr = carve_seg(B.dims, slot.base());
        Chunk *ch = scr.ch;
        for (int64_t i = 0; i < kPathChunksPerSegment; ++i)
            load_chunk(p, B.ws, sq, h, r * kPathChunksPerSegment + i, &ch[sz(i)]);
        float *tmp = scr.tmp;
        for (int64_t i = 0; i < kPathChunksPerSegment; ++i) {
            const Chunk &c = ch[sz(i)];
            for (int64_t b = 0; b < c.n; ++b) {
                float *y = B.kv_row(B.ws.kh, sq, c.c0 + b, h, K);
                std::copy_n(c.kt + b * H * K, K, y);
                for (int64_t i2 = i + 1; i2 < kPathChunksPerSegment; ++i2) {  // y <- P_c' y
                    const Chunk &c2 = ch[sz(i2)];
                    for (int64_t e = 0; e < c2.n; ++e) tmp[sz(e)] = dotf(c2.u + e * H * K, y, K);
                    for (int64_t e = 0; e < c2.n; ++e)
                        for (int64_t d = 0; d < K; ++d) y[d] -= tmp[sz(e)] * c2.w[sz(e * K + d)];
                }
            }
        }
        // I - E = P_7 ... P_0, accumulated as Pi <- P_i Pi = Pi - W_i^T (U_i Pi).
        float *pi = scr.pi, *up = scr.up;  // pi zero-filled by the carve
        for (int64_t d = 0; d < K; ++d) pi[sz(d * K + d)] = 1.f;
        for (int64_t i = 0; i < kPathChunksPerSegment; ++i) {
            const Chunk &c = ch[sz(i)];
            std::fill_n(up, B.dims.C * K, 0.f);
            for (int64_t b = 0; b < c.n; ++b)
                for (int64_t e = 0; e < K; ++e) {
                    const float ube = c.u[b * H * K + e];
                    for (int64_t j = 0; j < K; ++j) up[sz(b * K + j)] += ube * pi[sz(e * K + j)];
                }
            for (int64_t b = 0; b < c.n; ++b)
                for (int64_t d = 0; d < K; ++d) {
                    const float wbd = c.w[sz(b * K + d)];
                    for (int64_t j = 0; j < K; ++j) pi[sz(d * K + j)] -= wbd * up[sz(b * K + j)];
                }
        }
        float *e = B.kk(B.ws.e, s, r, h);
        for (int64_t d = 0; d < K * K; ++d) e[d] = -pi[sz(d)];
        for (int64_t d = 0; d < K; ++d) e[d * K + d] += 1.f;
    });
}

// ---- phase 4: the history producer ----
void phase_history(const Bwd &B) {
    const auto &p = B.p;
    const int64_t K = B.K, H = B.H, HQ = B.HQ;
    parallel_for(B.chunk_base.back() * HQ, p.nthreads, [&](int64_t item) {
        const int64_t gc = item / HQ, hq = item % HQ, h = hq / B.grp;
        const int64_t s = B.seq_of_chunk(gc);
        const int64_t ci = gc - B.chunk_base[sz(s)];
        if (ci < kPathChunksPerSegment) return;  // segment 0 needs no history
        const PathSeq sq = path_seq(p, s);
        SlotLease slot(B.pool, B.ws);
        HistScratch scr = carve_hist(B.dims, slot.base());
        Chunk &qc = scr.qc, &kc = scr.kc;
        load_chunk(p, B.ws, sq, h, ci, &qc);
        const int64_t n = qc.n;
        float *q = scr.q, *x = scr.x, *sc = scr.sc, *tmp = scr.tmp;
        for (int64_t a = 0; a < n; ++a) {
            load_row(p.q, p.dtype, sq.b * p.q_sb + (sq.begin + qc.c0 + a) * p.q_ss + hq * p.q_sh, K, q);
            walk_query_in_chunk(q, qc, a, K, sc, x + a * K, nullptr);
        }
        auto store = [&](int64_t r) {
            for (int64_t a = 0; a < n; ++a) {
                const int64_t off = B.hist(s, sq, qc.c0 + a, r, hq);
                for (int64_t d = 0; d < K; ++d) store_f32(B.ws.history, p.dtype, off + d, x[sz(a * K + d)]);
            }
        };
        if (ci % kPathChunksPerSegment == 0) store(ci / kPathChunksPerSegment);  // Q~ is at its segment start
        for (int64_t cj = ci - 1; cj >= kPathChunksPerSegment; --cj) {
            load_chunk(p, B.ws, sq, h, cj, &kc);
            walk_rows_back(x, n, kc, H, K, tmp);
            if (cj % kPathChunksPerSegment == 0) store(cj / kPathChunksPerSegment);
        }
    });
}

// ---- phase 5a: one query chunk of one query head (reverse mode of the forward's walk) ----
void query_chunk_bwd(const Bwd &B, int64_t s, const PathSeq &sq, int64_t hq, int64_t h, int64_t ci,
                     char *slot) {
    const auto &p = B.p;
    const int64_t K = B.K, V = B.V, H = B.H, HQ = B.HQ;
    QcbScratch scr = carve_qcb(B.dims, slot);
    Chunk &qc = scr.qc, &kc = scr.kc;
    load_chunk(p, B.ws, sq, h, ci, &qc);
    const int64_t n = qc.n, rt = ci / kPathChunksPerSegment, c_lo = rt * kPathChunksPerSegment;
    QRows qr;
    qr.n = n;
    qr.t0 = qc.c0;
    qr.G = B.ws.gsum + sq.row0 * HQ + hq;
    qr.dG = B.ws.dgs + sq.row0 * HQ + hq;
    float *dout = scr.dout, *lse = scr.lse, *delta = scr.delta;
    qr.dout = dout;
    qr.lse = lse;
    qr.delta = delta;
    float *q = scr.q, *qt = scr.qt, *xs = scr.xs, *sci = scr.sci;
    for (int64_t a = 0; a < n; ++a) {
        const int64_t tt = sq.begin + qc.c0 + a;
        load_row(p.q, p.dtype, sq.b * p.q_sb + tt * p.q_ss + hq * p.q_sh, K, q + a * K);
        load_row(p.dout, p.dtype, sq.b * p.do_sb + tt * p.do_ss + hq * p.do_sh, V, dout + a * V);
        lse[sz(a)] = p.lse[sq.b * p.lse_sb + hq * p.lse_sh + tt];
        delta[sz(a)] = B.ws.delta[(sq.row0 + qc.c0 + a) * HQ + hq];
        walk_query_in_chunk(q + a * K, qc, a, K, sci + a * n, qt + a * K, xs + a * n * K);
    }
    // gamma zero-filled by the carve (as the vector it replaces)
    float *gamma = scr.gamma, *vb = scr.vb, *qh = scr.qh, *gold = scr.gold, *tmpa = scr.tmpa,
          *tmpb = scr.tmpb;

    // Earlier segments, ascending: gamma = dLoss/dQh[t, r'] on entry, dLoss/dQh[t, r'+1] on exit.
    for (int64_t r = 0; r < rt; ++r) {
        for (int64_t a = 0; a < n; ++a)
            load_row(B.ws.history, p.dtype, B.hist(s, sq, qc.c0 + a, r + 1, hq), K, qh + a * K);
        if (r >= 1) {  // Qh[t, r] = Qh[t, r+1] (I - E_r)
            const float *e = B.kk(B.ws.e, s, r, h);
            float *de = B.kk(B.ws.de, s, r, h);
            for (int64_t a = 0; a < n; ++a) {
                const float *xa = qh + a * K;
                float *ga = gamma + a * K;
                for (int64_t d = 0; d < K; ++d)
                    for (int64_t j = 0; j < K; ++j) de[d * K + j] -= xa[d] * ga[j];
                std::copy_n(ga, K, gold);
                for (int64_t d = 0; d < K; ++d) ga[d] -= dotf(gold, e + d * K, K);
            }
        }
        for (int64_t cj = r * kPathChunksPerSegment; cj < (r + 1) * kPathChunksPerSegment; ++cj) {
            const int64_t c0 = cj * kPathChunk, nk = std::min(kPathChunk, sq.len - c0);
            load_values(p, sq, h, c0, nk, vb);
            score_block(B, qr, qh, B.kv_row(B.ws.kh, sq, c0, h, K), c0, nk, vb,
                        gamma, B.kv_row(B.ws.dkh, sq, c0, h, K), B.kv_row(B.ws.dvacc, sq, c0, h, V));
        }
    }
    // Own segment: states X^(cj) (the query walked back to the start of chunk cj + 1).
    const int64_t nst = ci - c_lo;
    float *xst = scr.xst;  // [max(nst, 1), n, K] of the carve's [max(1, min(7, chunks-1)), C, K]
    if (nst > 0) {
        std::copy_n(qt, n * K, xst + (nst - 1) * n * K);
        for (int64_t cj = ci - 1; cj > c_lo; --cj) {
            load_chunk(p, B.ws, sq, h, cj, &kc);
            float *dst = xst + (cj - 1 - c_lo) * n * K;
            std::copy_n(xst + (cj - c_lo) * n * K, n * K, dst);
            walk_rows_back(dst, n, kc, H, K, tmpa);
        }
    }
    for (int64_t cj = c_lo; cj < ci; ++cj) {
        load_chunk(p, B.ws, sq, h, cj, &kc);
        const float *x = xst + (cj - c_lo) * n * K;
        if (rt >= 1 || cj > c_lo) {  // gamma is dLoss/d(x P_cj): step it back through P_cj
            float *du = B.kv_row(B.ws.du, sq, kc.c0, h, K), *dw = B.kv_row(B.ws.dwacc, sq, kc.c0, h, K);
            for (int64_t a = 0; a < n; ++a) {
                const float *xa = x + a * K;
                float *ga = gamma + a * K;
                for (int64_t b = 0; b < kc.n; ++b) {
                    tmpa[sz(b)] = dotf(xa, kc.w + b * K, K);
                    tmpb[sz(b)] = dotf(ga, kc.u + b * H * K, K);
                }
                for (int64_t b = 0; b < kc.n; ++b) {
                    float *dub = du + b * H * K, *dwb = dw + b * H * K;
                    const float ta = tmpa[sz(b)], tb = tmpb[sz(b)];
                    for (int64_t d = 0; d < K; ++d) {
                        dub[d] -= ta * ga[d];
                        dwb[d] -= tb * xa[d];
                    }
                }
                for (int64_t b = 0; b < kc.n; ++b) {
                    const float tb = tmpb[sz(b)];
                    const float *wb = kc.w + b * K;
                    for (int64_t d = 0; d < K; ++d) ga[d] -= tb * wb[d];
                }
            }
        }
        load_values(p, sq, h, kc.c0, kc.n, vb);
        score_block(B, qr, x, kc.kt, kc.c0, kc.n, vb, gamma,
                    B.kv_row(B.ws.dkt, sq, kc.c0, h, K), B.kv_row(B.ws.dvacc, sq, kc.c0, h, V));
    }
    // Own chunk: reverse of the token walk, starting from gamma = dLoss/dQ~.
    load_values(p, sq, h, qc.c0, n, vb);
    float *dk = B.kv_row(B.ws.dkacc, sq, qc.c0, h, K), *dw = B.kv_row(B.ws.dwacc, sq, qc.c0, h, K);
    float *dv = B.kv_row(B.ws.dvacc, sq, qc.c0, h, V);
    float *db = B.ws.dbacc + (sq.row0 + qc.c0) * H + h;
    float *ds = scr.ds;
    for (int64_t a = 0; a < n; ++a) {
        const int64_t t = qc.c0 + a;
        const float *doa = qr.dout + a * V;
        float dgrow = 0.f;
        for (int64_t b = 0; b <= a; ++b) {
            const float l = p.scale * (sci[sz(a * n + b)] + qr.G[t * HQ] - qr.G[(qc.c0 + b) * HQ]);
            const float P = std::exp(l - qr.lse[sz(a)]);
            const float dP = dotf(doa, vb + b * V, V);
            ds[sz(b)] = p.scale * P * (dP - qr.delta[sz(a)]);
            for (int64_t d = 0; d < V; ++d) dv[b * H * V + d] += P * doa[d];
            dgrow += ds[sz(b)];
            qr.dG[(qc.c0 + b) * HQ] -= ds[sz(b)];
        }
        qr.dG[t * HQ] += dgrow;
        float *gx = gamma + a * K;
        for (int64_t b = 0; b <= a; ++b) {
            const float *xb = xs + (a * n + b) * K, *wb = qc.w + b * K;
            const float bb = qc.beta[sz(b)];
            const float ca = dotf(wb, gx, K), cb = dotf(wb, xb, K);
            db[b * H] -= ca * cb;
            for (int64_t d = 0; d < K; ++d) {
                dw[b * H * K + d] -= bb * (cb * gx[d] + ca * xb[d]);
                gx[d] -= bb * ca * wb[d];
                dk[b * H * K + d] += ds[sz(b)] * xb[d];
                gx[d] += ds[sz(b)] * qc.k[sz(b * K + d)];
            }
        }
        const int64_t off = sq.b * p.dq_sb + (sq.begin + t) * p.dq_ss + hq * p.dq_sh;
        for (int64_t d = 0; d < K; ++d) store_f32(p.dq, p.dtype, off + d, gx[d]);
    }
}

// ---- phase 5b: chain rules of one kv head, after all its query heads ----
void kv_head_bwd(const Bwd &B, int64_t s, const PathSeq &sq, int64_t h, char *slot) {
    const auto &p = B.p;
    const int64_t K = B.K, H = B.H, nseg = path_num_segments(sq.len), nch = path_num_chunks(sq.len);
    KvbScratch scr = carve_kvb(B.dims, slot);
    float *tmpa = scr.tmpa, *tmpb = scr.tmpb;
    // (i) K^_j = P_7' ... P_{c+1} K~_j (keys of segments r < N-1): dK^ -> dK~, dW, dU.
    for (int64_t r = 0; r + 1 < nseg; ++r) {
        Chunk *ch = scr.ch;
        for (int64_t i = 0; i < kPathChunksPerSegment; ++i)
            load_chunk(p, B.ws, sq, h, r * kPathChunksPerSegment + i, &ch[sz(i)]);
        float *ys = scr.ys, *gy = scr.gy;
        std::fill_n(ys, kPathChunksPerSegment * K, 0.f);
        std::fill_n(gy, K, 0.f);
        for (int64_t i = 0; i + 1 < kPathChunksPerSegment; ++i) {
            const Chunk &c = ch[sz(i)];
            for (int64_t b = 0; b < c.n; ++b) {
                // forward states: ys[i2] = the key before P_{i2} is applied
                std::copy_n(c.kt + b * H * K, K, ys + (i + 1) * K);
                for (int64_t i2 = i + 1; i2 + 1 < kPathChunksPerSegment; ++i2) {
                    const Chunk &c2 = ch[sz(i2)];
                    float *y = ys + (i2 + 1) * K;
                    std::copy_n(ys + i2 * K, K, y);
                    for (int64_t e = 0; e < c2.n; ++e) tmpa[sz(e)] = dotf(c2.u + e * H * K, y, K);
                    for (int64_t e = 0; e < c2.n; ++e)
                        for (int64_t d = 0; d < K; ++d) y[d] -= tmpa[sz(e)] * c2.w[sz(e * K + d)];
                }
                std::copy_n(B.kv_row(B.ws.dkh, sq, c.c0 + b, h, K), K, gy);
                for (int64_t i2 = kPathChunksPerSegment - 1; i2 > i; --i2) {
                    const Chunk &c2 = ch[sz(i2)];
                    const float *y = ys + i2 * K;
                    float *du = B.kv_row(B.ws.du, sq, c2.c0, h, K), *dw = B.kv_row(B.ws.dwacc, sq, c2.c0, h, K);
                    for (int64_t e = 0; e < c2.n; ++e) {
                        tmpa[sz(e)] = dotf(y, c2.u + e * H * K, K);        // y . u_e
                        tmpb[sz(e)] = dotf(gy, c2.w + e * K, K);  // gy . w_e
                    }
                    for (int64_t e = 0; e < c2.n; ++e)
                        for (int64_t d = 0; d < K; ++d) {
                            dw[e * H * K + d] -= tmpa[sz(e)] * gy[sz(d)];
                            du[e * H * K + d] -= tmpb[sz(e)] * y[d];
                        }
                    for (int64_t e = 0; e < c2.n; ++e)
                        for (int64_t d = 0; d < K; ++d) gy[sz(d)] -= tmpb[sz(e)] * c2.u[e * H * K + d];
                }
                float *dkt = B.kv_row(B.ws.dkt, sq, c.c0 + b, h, K);
                for (int64_t d = 0; d < K; ++d) dkt[d] += gy[sz(d)];
            }
        }
        // the last chunk of the segment: K^ = K~
        const Chunk &cl = ch[sz(kPathChunksPerSegment - 1)];
        for (int64_t b = 0; b < cl.n; ++b) {
            float *dkt = B.kv_row(B.ws.dkt, sq, cl.c0 + b, h, K);
            const float *dkh = B.kv_row(B.ws.dkh, sq, cl.c0 + b, h, K);
            for (int64_t d = 0; d < K; ++d) dkt[d] += dkh[d];
        }
        // (ii) dE_r -> dP_i = A^T dPi B_i^T with A = P_7 ... P_{i+1}, B_i = P_{i-1} ... P_0.
        if (r >= 1) {
            const int64_t KK = K * K;
            float *pm = scr.pm, *bm = scr.bm, *a = scr.a, *dpi = scr.dpi, *t1 = scr.t1, *t2 = scr.t2,
                  *t3 = scr.t3;
            for (float *m : {a, dpi, t1, t2, t3}) std::fill_n(m, KK, 0.f);
            std::fill_n(pm, kPathChunksPerSegment * KK, 0.f);
            std::fill_n(bm, kPathChunksPerSegment * KK, 0.f);
            const float *de = B.kk(B.ws.de, s, r, h);
            for (int64_t d = 0; d < KK; ++d) dpi[sz(d)] = -de[d];
            for (int64_t i = 0; i < kPathChunksPerSegment; ++i) chunk_product(ch[sz(i)], H, K, pm + i * KK);
            std::fill_n(bm, KK, 0.f);
            for (int64_t d = 0; d < K; ++d) bm[sz(d * K + d)] = 1.f, a[sz(d * K + d)] = 1.f;
            for (int64_t i = 1; i < kPathChunksPerSegment; ++i)
                matmul(pm + (i - 1) * KK, bm + (i - 1) * KK, bm + i * KK, K);
            for (int64_t i = kPathChunksPerSegment - 1; i >= 0; --i) {
                const Chunk &c = ch[sz(i)];
                transpose(a, t1, K);
                matmul(t1, dpi, t2, K);           // A^T dPi
                transpose(bm + i * KK, t1, K);
                matmul(t2, t1, t3, K);            // dP_i
                float *du = B.kv_row(B.ws.du, sq, c.c0, h, K), *dw = B.kv_row(B.ws.dwacc, sq, c.c0, h, K);
                for (int64_t b = 0; b < c.n; ++b) {
                    const float *ub = c.u + b * H * K, *wb = c.w + b * K;
                    for (int64_t d = 0; d < K; ++d) {
                        dw[b * H * K + d] -= dotf(t3 + d * K, ub, K);
                        float acc = 0.f;
                        for (int64_t e = 0; e < K; ++e) acc += t3[sz(e * K + d)] * wb[e];
                        du[b * H * K + d] -= acc;
                    }
                }
                matmul(a, pm + i * KK, t1, K);     // A <- A P_i
                std::swap(a, t1);
            }
        }
    }
    // (iii) per chunk: U = T0 diag(beta) W  and  K~ (token walk) back to k, W, beta.
    for (int64_t c = 0; c < nch; ++c) {
        Chunk &ch = scr.cc;
        load_chunk(p, B.ws, sq, h, c, &ch);
        const int64_t n = ch.n;
        float *t0 = scr.t0, *u = scr.u, *dt0 = scr.dt0, *z = scr.z;
        for (float *m : {t0, dt0, z}) std::fill_n(m, n * n, 0.f);
        std::fill_n(u, n * K, 0.f);
        ut_transform(ch.w, ch.beta, n, K, t0, u);
        const float *du = B.kv_row(B.ws.du, sq, ch.c0, h, K);
        float *dw = B.kv_row(B.ws.dwacc, sq, ch.c0, h, K), *dk = B.kv_row(B.ws.dkacc, sq, ch.c0, h, K);
        float *db = B.ws.dbacc + (sq.row0 + ch.c0) * H + h;
        for (int64_t a = 0; a < n; ++a)
            for (int64_t b = 0; b <= a; ++b) {
                const float dt = dotf(du + a * H * K, ch.w + b * K, K);  // dT[a][b]
                const float tab = t0[sz(a * n + b)] * ch.beta[sz(b)];   // T[a][b]
                for (int64_t d = 0; d < K; ++d) dw[b * H * K + d] += tab * du[a * H * K + d];
                db[b * H] += t0[sz(a * n + b)] * dt;
                dt0[sz(a * n + b)] = dt * ch.beta[sz(b)];
            }
        // dM = -T0^T dT0 T0^T, strictly lower part: z = dT0 T0^T, dM[a][b] = -sum_c T0[c][a] z[c][b].
        for (int64_t c2 = 0; c2 < n; ++c2)
            for (int64_t b = 0; b < n; ++b) {
                float acc = 0.f;
                for (int64_t e = 0; e <= std::min(c2, b); ++e) acc += dt0[sz(c2 * n + e)] * t0[sz(b * n + e)];
                z[sz(c2 * n + b)] = acc;
            }
        for (int64_t a = 1; a < n; ++a)
            for (int64_t b = 0; b < a; ++b) {
                float dm = 0.f;
                for (int64_t c2 = a; c2 < n; ++c2) dm -= t0[sz(c2 * n + a)] * z[sz(c2 * n + b)];
                const float *wa = ch.w + a * K, *wb = ch.w + b * K;
                const float ba = ch.beta[sz(a)];
                db[a * H] += dm * dotf(wa, wb, K);
                for (int64_t d = 0; d < K; ++d) {
                    dw[a * H * K + d] += ba * dm * wb[d];
                    dw[b * H * K + d] += ba * dm * wa[d];
                }
            }
        // K~_b = H_{n-1} ... H_{b+1} k_b: reverse of the token walk.
        const float *dkt = B.kv_row(B.ws.dkt, sq, ch.c0, h, K);
        float *ys = scr.ys2, *gy = scr.gy2;
        std::fill_n(ys, n * K, 0.f);
        std::fill_n(gy, K, 0.f);
        for (int64_t b = 0; b < n; ++b) {
            std::copy_n(ch.k + b * K, K, ys + (b + 1 < n ? (b + 1) * K : 0));
            for (int64_t e = b + 1; e + 1 < n; ++e) {  // ys[e] = state before H_e
                float *y = ys + (e + 1) * K;
                std::copy_n(ys + e * K, K, y);
                const float *we = ch.w + e * K;
                const float cc = ch.beta[sz(e)] * dotf(we, y, K);
                for (int64_t d = 0; d < K; ++d) y[d] -= cc * we[d];
            }
            std::copy_n(dkt + b * H * K, K, gy);
            for (int64_t e = n - 1; e > b; --e) {
                const float *y = ys + e * K, *we = ch.w + e * K;
                const float be = ch.beta[sz(e)];
                const float ca = dotf(we, gy, K), cb = dotf(we, y, K);
                db[e * H] -= ca * cb;
                for (int64_t d = 0; d < K; ++d) {
                    dw[e * H * K + d] -= be * (cb * gy[sz(d)] + ca * y[d]);
                    gy[sz(d)] -= be * ca * we[d];
                }
            }
            for (int64_t d = 0; d < K; ++d) dk[b * H * K + d] += gy[sz(d)];
        }
    }
}

fattn_status run(const PathBwdParams &p, void *workspace, bool history_only) {
    Bwd B(p, workspace);
    prepare(p, B.lay, B.ws, B.pool);
    phase_delta(B);
    phase_segments(B);
    // Poison: every byte 0xFF is a NaN in f32, f16 and bf16 alike.
    std::memset(B.ws.history, 0xFF, path_workspace(p, B.lay, FATTN_DIR_BWD).history_bytes);
    phase_history(B);
    if (history_only) return FATTN_OK;
    const int64_t K = B.K, V = B.V, H = B.H, HQ = B.HQ;
    parallel_for(p.num_seqs * H, p.nthreads, [&](int64_t item) {
        const int64_t s = item / H, h = item % H;
        const PathSeq sq = path_seq(p, s);
        SlotLease slot(B.pool, B.ws);  // query_chunk_bwd and kv_head_bwd carve it in turn
        // zero this item's accumulators (its rows, its kv head, its query heads, its segments)
        for (int64_t t = 0; t < sq.len; ++t) {
            for (float *base : {B.ws.dkh, B.ws.dkt, B.ws.du, B.ws.dwacc, B.ws.dkacc})
                std::fill_n(B.kv_row(base, sq, t, h, K), K, 0.f);
            std::fill_n(B.kv_row(B.ws.dvacc, sq, t, h, V), V, 0.f);
            B.ws.dbacc[(sq.row0 + t) * H + h] = 0.f;
            for (int64_t g = 0; g < B.grp; ++g) B.ws.dgs[(sq.row0 + t) * HQ + h * B.grp + g] = 0.f;
        }
        for (int64_t r = 0; r < path_num_segments(sq.len); ++r) std::fill_n(B.kk(B.ws.de, s, r, h), K * K, 0.f);
        const int64_t nch = path_num_chunks(sq.len);
        for (int64_t g = 0; g < B.grp; ++g) {
            const int64_t hq = h * B.grp + g;
            for (int64_t ci = 0; ci < nch; ++ci) query_chunk_bwd(B, s, sq, hq, h, ci, slot.base());
            if (p.dg) {  // dg_t = sum_{u >= t} dG_u
                float acc = 0.f;
                for (int64_t t = sq.len - 1; t >= 0; --t) {
                    acc += B.ws.dgs[(sq.row0 + t) * HQ + hq];
                    p.dg[sq.b * p.dg_sb + (sq.begin + t) * p.dg_ss + hq * p.dg_sh] = acc;
                }
            }
        }
        kv_head_bwd(B, s, sq, h, slot.base());
        for (int64_t t = 0; t < sq.len; ++t) {
            const int64_t tt = sq.begin + t;
            const float *dk = B.kv_row(B.ws.dkacc, sq, t, h, K), *dw = B.kv_row(B.ws.dwacc, sq, t, h, K);
            const float *dv = B.kv_row(B.ws.dvacc, sq, t, h, V);
            const int64_t ok = sq.b * p.dk_sb + tt * p.dk_ss + h * p.dk_sh;
            const int64_t ov = sq.b * p.dv_sb + tt * p.dv_ss + h * p.dv_sh;
            for (int64_t d = 0; d < K; ++d) store_f32(p.dk_, p.dtype, ok + d, dk[d]);
            for (int64_t d = 0; d < V; ++d) store_f32(p.dv_, p.dtype, ov + d, dv[d]);
            std::copy_n(dw, K, p.dw + sq.b * p.dw_sb + tt * p.dw_ss + h * p.dw_sh);
            p.dbeta[sq.b * p.dbeta_sb + tt * p.dbeta_ss + h * p.dbeta_sh] = B.ws.dbacc[(sq.row0 + t) * H + h];
        }
    });
    return FATTN_OK;
}

}  // namespace

namespace path_detail {
// Phase 5 carves query_chunk_bwd's and kv_head_bwd's scratch from the same slot, one at a time.
size_t bwd_item_bytes(const ScratchDims &d) {
    size_t b = std::max(carve_delta(d, nullptr).bytes, std::max(carve_qcb(d, nullptr).bytes,
                                                                 carve_kvb(d, nullptr).bytes));
    if (d.segs >= 2)  // phases 3 and 4 run items only for sequences with >= 2 segments
        b = std::max(b, std::max(carve_seg(d, nullptr).bytes, carve_hist(d, nullptr).bytes));
    return b;
}
}  // namespace path_detail

fattn_status path_bwd(const PathBwdParams &p, void *workspace, std::string *err) {
    (void)err;
    return run(p, workspace, false);
}

fattn_status path_bwd_history_only(const PathBwdParams &p, void *workspace, std::string *err) {
    (void)err;
    return run(p, workspace, true);
}

}  // namespace fattn::cpu
