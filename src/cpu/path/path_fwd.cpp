// path_fwd.cpp — blocked CPU forward of PaTH attention (PATH.md §4, our own blocking).
//
// Items are (sequence, query head, 64-token query chunk). Per item:
//   1. intra-chunk: each query is walked back token by token through its own chunk, scoring the
//      chunk's keys on the way (s_ab = q_a^T H_a ... H_{b+1} k_b); the final state is Q~_a, the
//      query walked back to its chunk start;
//   2. inter-chunk: X = Q~ scores key chunk cj against K~ (keys walked forward to their chunk end),
//      then walks back through the whole chunk cj in one UT step X <- X - (X W^T) U, for
//      cj = ci-1 down to 0;
//   3. an online softmax (natural log, f32) over the key blocks in that fixed order.
// The gate enters as scale * (G_i - G_j). Outputs o (q's dtype) and lse (f32) only.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/parallel.h"
#include "cpu/path/path_cpu.h"

namespace fattn::cpu {

using namespace path_detail;

namespace {

// Online softmax state of one query chunk: running max m, denominator l, unnormalized output
// (arrays carved from the item's scratch, initialized here for the chunk's n rows).
struct Softmax {
    int64_t n, V;
    float *m, *l, *acc;  // [n], [n], [n, V]
    Softmax(int64_t n_, int64_t V_, float *m_, float *l_, float *acc_)
        : n(n_), V(V_), m(m_), l(l_), acc(acc_) {
        std::fill_n(m, n, -std::numeric_limits<float>::infinity());
        std::fill_n(l, n, 0.f);
        std::fill_n(acc, n * V, 0.f);
    }
    // Row a sees logits[0..nb) against value rows vb (row stride V).
    void add(int64_t a, const float *logits, int64_t nb, const float *vb) {
        float mx = m[sz(a)];
        for (int64_t b = 0; b < nb; ++b) mx = std::max(mx, logits[b]);
        const float corr = std::exp(m[sz(a)] - mx);  // exp(-inf) = 0 on the first block
        float *o = acc + a * V;
        for (int64_t d = 0; d < V; ++d) o[d] *= corr;
        float l_new = l[sz(a)] * corr;
        for (int64_t b = 0; b < nb; ++b) {
            const float e = std::exp(logits[b] - mx);
            l_new += e;
            const float *v = vb + b * V;
            for (int64_t d = 0; d < V; ++d) o[d] += e * v[d];
        }
        m[sz(a)] = mx;
        l[sz(a)] = l_new;
    }
};

// Per-item scratch of the forward (one query chunk of one query head).
struct FwdScratch : WalkScratch {
    float *vb, *tmp;       // [C, V], [C]
    float *m, *l, *acc;    // softmax: [C], [C], [C, V]
    size_t bytes;
};
FwdScratch carve_fwd(const ScratchDims &d, char *base) {
    Arena a{base};
    FwdScratch s;
    carve_walk(a, d, &s);
    s.vb = zeros(a, d.C * d.V);
    s.tmp = zeros(a, d.C);
    s.m = a.floats(d.C);
    s.l = a.floats(d.C);
    s.acc = a.floats(d.C * d.V);
    s.bytes = a.used;
    return s;
}

void load_values(const PathFwdParams &p, const PathSeq &sq, int64_t h, int64_t c0, int64_t n,
                 float *vb) {
    for (int64_t b = 0; b < n; ++b)
        load_row(p.v, p.dtype, sq.b * p.v_sb + (sq.begin + c0 + b) * p.v_ss + h * p.v_sh, p.dv,
                 vb + b * p.dv);
}

}  // namespace

namespace path_detail {
size_t fwd_item_bytes(const ScratchDims &d) { return carve_fwd(d, nullptr).bytes; }
}  // namespace path_detail

fattn_status path_fwd(const PathFwdParams &p, void *workspace, std::string *err) {
    (void)err;
    const PathLayout lay = path_layout(p);
    const PathWorkspace wl = path_workspace(p, lay, FATTN_DIR_FWD);
    const Ws ws = bind(wl, workspace, FATTN_DIR_FWD);
    detail::SlotPool pool(ws.nslots);
    const ScratchDims dims = scratch_dims(p, lay);
    prepare(p, lay, ws, pool);

    const int64_t K = p.dk, V = p.dv, H = p.h, HQ = p.hq, grp = p.group();
    std::vector<int64_t> chunk_base(sz(p.num_seqs) + 1, 0);
    for (int64_t s = 0; s < p.num_seqs; ++s)
        chunk_base[sz(s) + 1] = chunk_base[sz(s)] + path_num_chunks(path_seq(p, s).len);
    parallel_for(chunk_base.back() * HQ, p.nthreads, [&](int64_t item) {
        const int64_t gc = item / HQ, hq = item % HQ, h = hq / grp;
        const int64_t s = int64_t(std::upper_bound(chunk_base.begin(), chunk_base.end(), gc) -
                                  chunk_base.begin()) - 1;
        const PathSeq sq = path_seq(p, s);
        const int64_t ci = gc - chunk_base[sz(s)];
        SlotLease slot(pool, ws);
        FwdScratch scr = carve_fwd(dims, slot.base());
        Chunk &qc = scr.qc, &kc = scr.kc;
        load_chunk(p, ws, sq, h, ci, &qc);
        const int64_t n = qc.n;
        const float *G = ws.gsum + sq.row0 * HQ + hq;  // G[t * HQ]
        float *q = scr.q, *x = scr.x, *sc = scr.sc, *vb = scr.vb, *tmp = scr.tmp;
        Softmax sm(n, V, scr.m, scr.l, scr.acc);

        // 1. intra-chunk, exact token walk.
        load_values(p, sq, h, qc.c0, n, vb);
        for (int64_t a = 0; a < n; ++a) {
            const int64_t t = qc.c0 + a;
            load_row(p.q, p.dtype, sq.b * p.q_sb + (sq.begin + t) * p.q_ss + hq * p.q_sh, K, q);
            walk_query_in_chunk(q, qc, a, K, sc, x + a * K, nullptr);
            for (int64_t b = 0; b <= a; ++b) sc[b] = p.scale * (sc[b] + G[t * HQ] - G[(qc.c0 + b) * HQ]);
            sm.add(a, sc, a + 1, vb);
        }
        // 2. earlier chunks, newest first; X walks back one whole chunk per step.
        for (int64_t cj = ci - 1; cj >= 0; --cj) {
            load_chunk(p, ws, sq, h, cj, &kc);
            load_values(p, sq, h, kc.c0, kc.n, vb);
            for (int64_t a = 0; a < n; ++a) {
                const float *xa = x + a * K;
                const float ga = G[(qc.c0 + a) * HQ];
                for (int64_t b = 0; b < kc.n; ++b)
                    sc[b] = p.scale * (dotf(xa, kc.kt + b * H * K, K) + ga - G[(kc.c0 + b) * HQ]);
                sm.add(a, sc, kc.n, vb);
            }
            if (cj > 0) walk_rows_back(x, n, kc, H, K, tmp);
        }
        // 3. normalize and store.
        for (int64_t a = 0; a < n; ++a) {
            const int64_t t = sq.begin + qc.c0 + a;
            const float inv = 1.f / sm.l[sz(a)];
            const int64_t oo = sq.b * p.o_sb + t * p.o_ss + hq * p.o_sh;
            for (int64_t d = 0; d < V; ++d) store_f32(p.o, p.dtype, oo + d, sm.acc[a * V + d] * inv);
            p.lse[sq.b * p.lse_sb + hq * p.lse_sh + t] = sm.m[sz(a)] + std::log(sm.l[sz(a)]);
        }
    });
    return FATTN_OK;
}

}  // namespace fattn::cpu
