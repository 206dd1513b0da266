// path_common.cpp — pieces shared by the PaTH CPU forward and backward: workspace binding, chunk
// loads, the UT transform of a 64-token chunk (PATH.md §3), the chunk walk of query rows, the
// token-level walk inside a chunk, and the "prepare" phase (U, K~, gate prefix sums).
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/parallel.h"
#include "cpu/path/path_cpu.h"

namespace fattn::cpu {

fattn_status path_select(const PathFwdParams &p, std::string *why) {
    // The blocked code takes any width (its rows are K or V floats); 256 bounds the scratch slots.
    auto ok_dim = [](int64_t d) { return d >= 1 && d <= 256; };
    if (!ok_dim(p.dk) || !ok_dim(p.dv)) {
        if (why)
            *why = "q: head dims K = " + std::to_string(p.dk) + ", V = " + std::to_string(p.dv) +
                   ": the PaTH CPU backend runs K and V from 1 to 256";
        return FATTN_ERR_BAD_HEAD_DIM;
    }
    return FATTN_OK;
}

namespace path_detail {

Ws bind(const PathWorkspace &l, void *base, fattn_dir dir) {
    char *b = path_ws_base(base);
    auto f = [&](size_t off) { return reinterpret_cast<float *>(b + off); };
    Ws ws{};
    ws.u = f(l.u), ws.kt = f(l.kt), ws.gsum = f(l.gsum);
    if (dir == FATTN_DIR_BWD) {
        ws.history = b + l.history;
        ws.kh = f(l.kh), ws.dkh = f(l.dkh), ws.dkt = f(l.dkt), ws.du = f(l.du), ws.dwacc = f(l.dwacc);
        ws.dkacc = f(l.dkacc), ws.dvacc = f(l.dvacc), ws.dbacc = f(l.dbacc), ws.dgs = f(l.dgs);
        ws.delta = f(l.delta), ws.e = f(l.e), ws.de = f(l.de);
    }
    ws.slots = b + l.slots;
    ws.slot_bytes = l.slot_bytes;
    ws.nslots = l.nslots;
    return ws;
}

ScratchDims scratch_dims(const PathFwdParams &p, const PathLayout &lay) {
    ScratchDims d;
    d.K = p.dk;
    d.V = p.dv;
    d.C = std::max<int64_t>(1, std::min(kPathChunk, lay.max_len));
    d.segs = lay.max_segments;
    d.chunks = path_num_chunks(lay.max_len);
    return d;
}

PrepScratch carve_prep(const ScratchDims &d, char *base) {
    Arena a{base};
    PrepScratch s;
    carve_chunk(a, d, &s.ch);
    s.t0 = zeros(a, d.C * d.C);
    s.u = zeros(a, d.C * d.K);
    s.bytes = a.used;
    return s;
}

void load_row(const void *base, fattn_dtype t, int64_t off, int64_t n, float *out) {
    switch (t) {
    case FATTN_F32: std::copy_n(static_cast<const float *>(base) + off, n, out); return;
    case FATTN_F16:
        for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(static_cast<const uint16_t *>(base)[off + i]);
        return;
    case FATTN_BF16:
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(static_cast<const uint16_t *>(base)[off + i]);
        return;
    }
}

void load_chunk(const PathFwdParams &p, const Ws &ws, const PathSeq &sq, int64_t h, int64_t c,
                Chunk *ch) {
    const int64_t K = p.dk;
    ch->c0 = c * kPathChunk;
    ch->n = std::min(kPathChunk, sq.len - ch->c0);
    for (int64_t a = 0; a < ch->n; ++a) {
        int64_t t = sq.begin + ch->c0 + a;
        std::copy_n(p.w + sq.b * p.w_sb + t * p.w_ss + h * p.w_sh, K, ch->w + a * K);
        load_row(p.k, p.dtype, sq.b * p.k_sb + t * p.k_ss + h * p.k_sh, K, ch->k + a * K);
        ch->beta[sz(a)] = p.beta[sq.b * p.beta_sb + t * p.beta_ss + h * p.beta_sh];
    }
    const int64_t row = (sq.row0 + ch->c0) * p.h + h;
    ch->u = ws.u ? ws.u + row * K : nullptr;
    ch->kt = ws.kt ? ws.kt + row * K : nullptr;
}

void ut_transform(const float *w, const float *beta, int64_t n, int64_t K, float *t0, float *u) {
    // Forward substitution, row by row: row a of (I + M) T0 = e_a gives
    // T0[a][:] = e_a - sum_{b<a} M[a][b] T0[b][:], with M[a][b] = beta_a (w_a . w_b).
    std::fill(t0, t0 + n * n, 0.f);
    for (int64_t a = 0; a < n; ++a) {
        float *ra = t0 + a * n;
        ra[a] = 1.f;
        for (int64_t b = 0; b < a; ++b) {
            float m = beta[a] * dotf(w + a * K, w + b * K, K);
            const float *rb = t0 + b * n;
            for (int64_t c = 0; c <= b; ++c) ra[c] -= m * rb[c];
        }
    }
    // U = T0 diag(beta) W: u_a = sum_{b<=a} T0[a][b] beta_b w_b.
    for (int64_t a = 0; a < n; ++a) {
        float *ua = u + a * K;
        std::fill(ua, ua + K, 0.f);
        for (int64_t b = 0; b <= a; ++b) {
            float c = t0[a * n + b] * beta[b];
            const float *wb = w + b * K;
            for (int64_t d = 0; d < K; ++d) ua[d] += c * wb[d];
        }
    }
}

void walk_rows_back(float *x, int64_t m, const Chunk &ch, int64_t H, int64_t K, float *tmp) {
    // tmp[b] = x_a . w_b for the current row, then x_a -= sum_b tmp[b] u_b (two skinny matmuls).
    for (int64_t a = 0; a < m; ++a) {
        float *xa = x + a * K;
        for (int64_t b = 0; b < ch.n; ++b) tmp[b] = dotf(xa, ch.w + b * K, K);
        for (int64_t b = 0; b < ch.n; ++b) {
            const float *ub = ch.u + b * H * K;
            const float c = tmp[b];
            for (int64_t d = 0; d < K; ++d) xa[d] -= c * ub[d];
        }
    }
}

void walk_query_in_chunk(const float *q, const Chunk &ch, int64_t a, int64_t K, float *scores,
                         float *qt, float *states) {
    std::copy_n(q, K, qt);
    for (int64_t b = a; b >= 0; --b) {
        if (states) std::copy_n(qt, K, states + b * K);
        const float *wb = ch.w + b * K;
        scores[b] = dotf(qt, ch.k + b * K, K);
        const float c = ch.beta[sz(b)] * dotf(wb, qt, K);
        for (int64_t d = 0; d < K; ++d) qt[d] -= c * wb[d];
    }
}

void prepare(const PathFwdParams &p, const PathLayout &lay, const Ws &ws, detail::SlotPool &pool) {
    const int64_t K = p.dk, H = p.h;
    const ScratchDims dims = scratch_dims(p, lay);
    // Chunk items: (sequence, chunk) pairs flattened through a prefix sum, times kv heads.
    std::vector<int64_t> chunk_base(sz(p.num_seqs) + 1, 0);
    for (int64_t s = 0; s < p.num_seqs; ++s)
        chunk_base[sz(s) + 1] = chunk_base[sz(s)] + path_num_chunks(path_seq(p, s).len);
    const int64_t nchunks = chunk_base.back();
    parallel_for(nchunks * H, p.nthreads, [&](int64_t item) {
        const int64_t gc = item / H, h = item % H;
        const int64_t s = int64_t(std::upper_bound(chunk_base.begin(), chunk_base.end(), gc) -
                                  chunk_base.begin()) - 1;
        const PathSeq sq = path_seq(p, s);
        SlotLease slot(pool, ws);
        PrepScratch sc = carve_prep(dims, slot.base());
        Chunk &ch = sc.ch;
        load_chunk(p, ws, sq, h, gc - chunk_base[sz(s)], &ch);
        const int64_t n = ch.n;
        float *t0 = sc.t0, *u = sc.u;
        ut_transform(ch.w, ch.beta, n, K, t0, u);
        float *gu = ws.u + ((sq.row0 + ch.c0) * H + h) * K;
        float *gkt = ws.kt + ((sq.row0 + ch.c0) * H + h) * K;
        for (int64_t b = 0; b < n; ++b) {
            std::copy_n(u + b * K, K, gu + b * H * K);
            // K~_b = H_{n-1} ... H_{b+1} k_b: key walked forward to the chunk end, token by token.
            float *y = gkt + b * H * K;
            std::copy_n(ch.k + b * K, K, y);
            for (int64_t e = b + 1; e < n; ++e) {
                const float *we = ch.w + e * K;
                const float c = ch.beta[sz(e)] * dotf(we, y, K);
                for (int64_t d = 0; d < K; ++d) y[d] -= c * we[d];
            }
        }
    });
    // Gate prefix sums in f32, restarting per sequence (sequential per (sequence, query head)).
    parallel_for(p.num_seqs * p.hq, p.nthreads, [&](int64_t item) {
        const int64_t s = item / p.hq, hq = item % p.hq;
        const PathSeq sq = path_seq(p, s);
        float acc = 0.f;
        for (int64_t t = 0; t < sq.len; ++t) {
            if (p.g) acc += p.g[sq.b * p.g_sb + (sq.begin + t) * p.g_ss + hq * p.g_sh];
            ws.gsum[(sq.row0 + t) * p.hq + hq] = acc;
        }
    });
}

}  // namespace path_detail
}  // namespace fattn::cpu

namespace fattn {

size_t path_slot_bytes(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir) {
    const cpu::path_detail::ScratchDims d = cpu::path_detail::scratch_dims(p, lay);
    const size_t prep = cpu::path_detail::carve_prep(d, nullptr).bytes;
    return std::max(prep, dir == FATTN_DIR_BWD ? cpu::path_detail::bwd_item_bytes(d)
                                               : cpu::path_detail::fwd_item_bytes(d));
}

}  // namespace fattn
