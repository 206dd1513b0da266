// bwd_hist.cuh — the backward's per-segment prep and the history producer.
//
// KSegPrep, per (segment r < N-1, kv head): scans the segment's chunks from last to first with
// Ms = the product of the chunks after c (Ms starts at I): K^_c = K~_c Ms^T (keys walked forward
// to the segment end), then Ms <- Ms (I - W_c^T U_c). At the end E_r = I - Ms, stored as emat_t
// (f16 for 16-bit inputs, else f32 holding tf32 values: KSegInter reads it only as a tf32
// operand). tf32, f32 tiles.
//
// KHist, per (query chunk ci >= 8, query head): Q~ (own chunk, UT form) walked back chunk by
// chunk to token 512, stored at every segment start it crosses: Qh[t, r] = q_t^T H_t ... H_{rS},
// 1 <= r <= t / 512, into the packed (or rectangular) history in the input dtype. Every cell is
// written exactly once (by the chunk that owns the token, in a strictly descending loop over r).
// Walk products as in the forward (f16 for 16-bit inputs, tf32 for f32). With intra_states_at(D)
// (params.h) it also stores, in the walk type, the states of the own segment's chunk pairs that
// KSegIntra reads (X before each step through a chunk of the own segment), and its CTAs of chunks
// 1 .. 7 walk segment 0 for them.
#pragma once

#include "cuda/path/common.cuh"

namespace fattn::pathk {

// FATTN_PATH_SEGPREP_RING (16-bit inputs): U and K~ kept in their 16-bit types in a two-stage
// ring, so chunk c - 1's U and K~ load while chunk c's three products run (and its W, f32, once
// T = Ms W^T has read chunk c's); the products take them as 16-bit B / A operands (f16 and bf16
// values are exact in tf32). 201 KiB at D128 (199 without), 87 at D64 (85). 0 (default): every load waits
// before its chunk's products, over f32 tiles.
#ifndef FATTN_PATH_SEGPREP_RING
#define FATTN_PATH_SEGPREP_RING 0
#endif

template <typename Tin, int D> struct KSegPrep {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 256, NW = 8;
    static constexpr bool kRing = FATTN_PATH_SEGPREP_RING && sizeof(Tin) == 2;
    static constexpr int SD = tile_stride<float>(D), S64 = tile_stride<float>(kC), STi = tile_stride<Tin>(D);
    static constexpr size_t MS = tile_bytes<float>(D, D), BIG = tile_bytes<float>(kC, D), TMP = tile_bytes<float>(D, kC);
    static constexpr size_t T16 = tile_bytes<Tin>(kC, D), STAGE = 2 * T16;  // kRing: U, K~ (Tw and Tin: both 16-bit)
    static constexpr size_t smem() { return kRing ? MS + TMP + BIG + 2 * STAGE : MS + 3 * BIG + TMP; }
    static constexpr int NB = D / 16;

    // kRing: chunk lc's U and K~ into the stage at buf (cp.async; the caller commits).
    PK_DEV static void issue_uk(const PathDev &p, int64_t row, int h, char *buf) {
        const int64_t ws = int64_t(p.h) * D;
        load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(buf), STi, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws, kC, D, kC, D, true);
        load_tile<Tin, kThreads>(reinterpret_cast<Tin *>(buf + T16), STi, static_cast<const Tin *>(p.kt) + (row * p.h + h) * D, ws, kC, D,
                                 kC, D, true);
    }

    // Chunk row's three products, its tiles loaded: K^ = K~ Ms^T (stored), T = Ms W^T, then
    // between() after the barrier that ends W's reads, then Ms -= T U (no barrier after it). K~ and
    // U are f32 tiles or 16-bit ones (kRing).
    template <class EK, class EU, class Between>
    PK_DEV static void products(const PathDev &p, int64_t row, int h, const EK *sK, int ldk, const EU *sU, int ldu, float *sMs,
                                const float *sW, float *sT, Between &&between) {
        cta_gemm<EK, false, false, NB, NW, 0, float>(kC, D, D, sK, ldk, sMs, SD, [&](int b, int col, float v) {
            st<Tin>(p.kh, ((row + b) * p.h + h) * D + col, v);
        });
        cta_gemm<float, false, false, 4, NW>(D, kC, D, sMs, SD, sW, SD, [&](int d, int b, float v) { sT[d * S64 + b] = v; });
        sync();
        between();
        cta_gemm<float, false, true, NB, NW, 0, EU>(D, D, kC, sT, S64, sU, ldu, [&](int d, int e, float v) { sMs[d * SD + e] -= v; });
    }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const int64_t gs = bid_x();
        const int h = bid_y();
        const SeqInfo sq = seq_of_seg(p, gs);
        const int64_t r = gs - sq.seg0, ns = ceil_div(sq.len, kS);
        if (r >= ns - 1) return;  // the last segment's K^ and E are never read
        float *sMs = reinterpret_cast<float *>(smem), *sW = reinterpret_cast<float *>(smem + MS);
        for (int e = tid(); e < D * D; e += kThreads) sMs[(e / D) * SD + e % D] = (e / D == e % D) ? 1.f : 0.f;
        if constexpr (kRing) {
            // sMs | sW | sT | stage 0 | stage 1 (U, then K~)
            float *sT = reinterpret_cast<float *>(smem + MS + BIG);
            char *stg = smem + MS + BIG + TMP;
            const int64_t last = r * kNcs + kNcs - 1;
            load_w_f32<kThreads>(sW, SD, p, sq, last * kC, h, D, kC);
            issue_uk(p, sq.row0 + last * kC, h, stg);
            cp_commit();
            for (int c = kNcs - 1, s = 0; c >= 0; --c, s ^= 1) {
                const int64_t lc = r * kNcs + c, row = sq.row0 + lc * kC;
                const Tw *sU = reinterpret_cast<const Tw *>(stg + s * STAGE);
                const Tin *sK = reinterpret_cast<const Tin *>(stg + s * STAGE + T16);
                cp_wait<0>();
                sync();  // chunk c's W, U, K~ landed; chunk c + 1's products done with the other stage
                if (c > 0) issue_uk(p, row - kC, h, stg + (s ^ 1) * STAGE);
                cp_commit();
                products(p, row, h, sK, STi, sU, STi, sMs, sW, sT, [&] {  // W read: chunk c - 1's takes its place
                    if (c > 0) load_w_f32<kThreads>(sW, SD, p, sq, (lc - 1) * kC, h, D, kC);
                    cp_commit();
                });
            }
            sync();
        } else {
            float *sU = sW + kC * SD, *sK = sU + kC * SD, *sT = sK + kC * SD;
            const int64_t ws = int64_t(p.h) * D;
            for (int c = kNcs - 1; c >= 0; --c) {
                const int64_t lc = r * kNcs + c, row = sq.row0 + lc * kC;
                load_w_f32<kThreads>(sW, SD, p, sq, lc * kC, h, D, kC);
                load_u_f32<Tin, kThreads>(sU, SD, p, row, h, D, kC);
                cp_commit();
                load_tile_cvt<float, Tin, kThreads>(sK, SD, static_cast<const Tin *>(p.kt) + (row * p.h + h) * D, ws, kC, D, kC, D, true);
                cp_wait<0>();
                sync();
                products(p, row, h, sK, SD, sU, SD, sMs, sW, sT, [] {});
                sync();
            }
        }
        using Te = emat_t<Tin>;
        const int64_t e0 = ((sq.seg0 + r) * p.h + h) * D * D;
        for (int e = tid(); e < D * D; e += kThreads) {
            const float x = ((e / D == e % D) ? 1.f : 0.f) - sMs[(e / D) * SD + e % D];
            st<Te>(p.emat, e0 + e, sizeof(Te) == 4 ? tf32_round(x) : x);
        }
    }
};

template <typename Tin, int D> struct KHist {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 128, NX = D / 8;
    static constexpr int STi = tile_stride<Tin>(D), STw = tile_stride<Tw>(D);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D), TW = tile_bytes<Tw>(kC, D);
    static constexpr size_t STAGE = 2 * TW, OWN = TI + 2 * TW;
    static constexpr size_t smem() { return STAGE + OWN; }  // stage 0, then own / stage 1

    PK_DEV static void issue(const PathDev &p, const SeqInfo &sq, int h, int64_t cj, char *buf) {
        const int64_t row = sq.row0 + cj * kC, ws = int64_t(p.h) * D;
        load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(buf), STw, static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws,
                                kC, D, kC, D, true);
        load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(buf + TW), STw, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D,
                                ws, kC, D, kC, D, true);
    }
    PK_DEV static void store(const PathDev &p, const SeqInfo &sq, int hq, int64_t c0, int n, int r0, int64_t r,
                             const float (&X)[NX][4]) {
        for (int hh = 0; hh < 2; ++hh) {
            const int a = r0 + acc_row(2 * hh);
            if (a >= n) continue;
            const int64_t off = (hist_cell(p, sq, c0 + a, r) * p.hq + hq) * p.hk;
            // column pairs (hk is even, X is 0 past K): one 4-byte (f32: 8-byte) store each
            for (int j = 0; j < NX; ++j) {
                const int col = acc_col(j, 0);
                if (col < p.hk) st_pair<Tin>(p.hist, off + col, X[j][2 * hh], X[j][2 * hh + 1]);
            }
        }
    }
    // intra_states_at(D): X of this warp's 16 rows as seg-intra's state of pair (i, j) of segment gs
    // (every row of the 64: past the chunk's rows X is 0)
    PK_DEV static void store_state(const PathDev &p, int64_t gs, int hq, int64_t i, int64_t j, int r0, const float (&X)[NX][4]) {
        Tw *g = static_cast<Tw *>(p.qts) + ((gs * p.hq + hq) * kIntraPairs + intra_slot(i, j)) * kC * D;
        for (int hh = 0; hh < 2; ++hh) {
            const int a = r0 + acc_row(2 * hh);
            for (int jj = 0; jj < NX; ++jj) st_pair<Tw>(g, int64_t(a) * D + acc_col(jj, 0), X[jj][2 * hh], X[jj][2 * hh + 1]);
        }
    }
    // The chunks a CTA walks through, ci - 1 down to walk_lo: the last segment start of a history
    // column (chunk 8), or in segment 0 (intra_states_at(D): its states only) chunk 1. Whether the
    // CTA has anything to do: a history (segments >= 1) or states (chunks 1 .. 7 of segment 0).
    PK_DEV static int64_t walk_lo(int64_t ci) { return intra_states_at(D) && ci < kNcs ? 1 : kNcs; }
    PK_DEV static bool has_work(int64_t ci) { return ci >= kNcs || (intra_states_at(D) && ci >= 1); }
    // Before the walk through chunk cj (X = Q~ walked through ci - 1 .. cj + 1): X is the state
    // X_i(j) of the own segment's pair (i, j = cj - 8r) where cj >= 8r; in segment 0 the state
    // X_i(0) is the one after the last step (call with cj = 0 then).
    PK_DEV static void state_at(const PathDev &p, const SeqInfo &sq, int hq, int64_t ci, int64_t cj, int r0, const float (&X)[NX][4]) {
        if constexpr (intra_states_at(D)) {
            const int64_t r = ci / kNcs, i = ci % kNcs;
            if (i >= 1 && cj >= kNcs * r) store_state(p, sq.seg0 + r, hq, i, cj - kNcs * r, r0, X);
        }
    }
    // The own chunk's Q~ (UT form) of this warp's 16 rows into X: Q, W, U into `own`, issue_more()
    // after they are committed (it issues the first stage, if any, and waits for the own tiles),
    // and the segment-start store when the chunk starts a segment. Ends with a sync: the own tiles
    // may be overwritten after it.
    template <class F> PK_DEV static void own_chunk(const PathDev &p, const ChunkItem &ck, char *own, F &&issue_more, float (&X)[NX][4]) {
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci, c0 = ck.c0;
        const int hq = ck.hq, h = ck.h, n = ck.n;
        const int r0 = 16 * warp_id();
        Tin *sQ = reinterpret_cast<Tin *>(own);
        Tw *sW = reinterpret_cast<Tw *>(own + TI), *sU = reinterpret_cast<Tw *>(own + TI + TW);
        const int64_t row = sq.row0 + c0, t0 = sq.begin + c0, ws = int64_t(p.h) * D;
        load_tile<Tin, kThreads>(sQ, STi, static_cast<const Tin *>(p.q) + sq.b * p.q_sb + t0 * p.q_ss + hq * p.q_sh,
                                 p.q_ss, kC, D, n, p.K, p.vec_q);
        load_tile<Tw, kThreads>(sW, STw, static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws, kC, D, n, D, true);
        load_tile<Tw, kThreads>(sU, STw, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws, kC, D, n, D, true);
        cp_commit();
        issue_more();
        sync();
        tile_to_acc(X, sQ, STi, r0);
        {
            float QW[8][4];
            qw_lower<Tw>(QW, X, sW, STw, r0);
            warp_gemm_acc<Tw, true>(X, QW, -1.f, sU, STw, 0);  // Q~ = Q - QW U
        }
        if (ci % kNcs == 0) store(p, sq, hq, c0, n, r0, ci / kNcs, X);
        sync();
    }
    PK_DEV static void run(const PathDev &p, char *smem) {
        const ChunkItem ck = chunk_item(p, true);
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci, c0 = ck.c0;
        const int hq = ck.hq, h = ck.h, n = ck.n;
        if (!has_work(ci)) return;  // segment 0 has no history
        const int64_t lo = walk_lo(ci);
        const int r0 = 16 * warp_id();
        char *st0 = smem, *own = smem + STAGE;
        float X[NX][4];
        own_chunk(p, ck, own, [&] { ring_step(ci - 1 >= lo, [&] { issue(p, sq, h, ci - 1, st0); }); }, X);
        char *st1 = own;  // own tiles are stage 1 from here on
        for (int64_t cj = ci - 1, s = 0; cj >= lo; --cj, ++s) {
            state_at(p, sq, hq, ci, cj, r0, X);
            char *cur = (s & 1) ? st1 : st0;
            ring_step(cj - 1 >= lo, [&] { issue(p, sq, h, cj - 1, (s & 1) ? st0 : st1); });
            sync();
            const Tw *cW = reinterpret_cast<const Tw *>(cur), *cU = reinterpret_cast<const Tw *>(cur + TW);
            walk_back<Tw>(X, cW, cU, STw);
            if (cj % kNcs == 0) store(p, sq, hq, c0, n, r0, cj / kNcs, X);
            sync();
        }
        if (ci < kNcs) state_at(p, sq, hq, ci, 0, r0, X);
    }
};

}  // namespace fattn::pathk
