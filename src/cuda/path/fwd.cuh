// fwd.cuh — the PaTH forward: one CTA per (64-query chunk, query head), 4 warps of 16 query rows.
//
//   own chunk (UT form):  QW = LT(Q W^T)   A = LT(Q K^T - QW Dm)   X = Q~ = Q - QW U
//   earlier chunks cj = ci-1 .. 0, newest first:  S = X K~_cj^T;  online softmax;  O += P V_cj;
//                                                 then X <- X - (X W_cj^T) U_cj  (walk back)
// X lives in registers (f32) the whole time; the walk products run in the walk type (f16 for 16-bit
// inputs, tf32 for f32), the scores in the input dtype. Logits are in the exp2 domain
// (scale * log2 e); lse is stored as a natural log. The next key chunk's tiles (K~, V, W, U) are
// prefetched with cp.async while this one is computed when two stages fit in shared memory; else,
// with FATTN_PATH_FWD_SPLIT, a chunk's W and U load while its scores run and the next chunk's K~ and
// V while this one is walked (two K~ V slots and one W U slot).
#pragma once

#include "cuda/path/common.cuh"

#ifndef FATTN_PATH_FWD_SPLIT
#define FATTN_PATH_FWD_SPLIT 1
#endif

namespace fattn::pathk {

template <typename Tin, int D> struct KFwd {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 128, NX = D / 8;
    static constexpr int STi = tile_stride<Tin>(D), STw = tile_stride<Tw>(D), STm = tile_stride<Tw>(kC);
    static constexpr size_t TI = tile_bytes<Tin>(kC, D), TW = tile_bytes<Tw>(kC, D), TM = tile_bytes<Tw>(kC, kC);
    // A stage: a key chunk's K~, V, G (KVB bytes), then its W, U
    static constexpr size_t KVB = 2 * TI + kC * 4, STAGE = KVB + 2 * TW;
    static constexpr size_t OWN = 3 * TI + 2 * TW + TM;                 // Q, K, V, W, U, Dm
    static constexpr size_t MAXB = STAGE > OWN ? STAGE : OWN;
    // Two stages where they fit beside a second CTA's: at D 128 one stage, so that two CTAs share an
    // SM (H200 T4096 H16 bf16: fwd 0.875 ms vs 1.048 with two stages; at D 64 two stages, 0.944 vs 0.970).
    // f32 inputs at D 64 take one stage, two CTAs per SM (102 KiB each): T4096 H32 f32 fwd 2.47 ms
    // vs 4.02 with two stages in one CTA of 171 KiB (fwd+bwd 8.88 vs 10.45).
    static constexpr bool kTwo = D <= 64 && STAGE + MAXB + 256 <= 113 * 1024;
    // kSplit (one stage otherwise): two K~ V G slots and one W U slot in the own tiles' place, where
    // that keeps the CTAs per SM (113 KiB for two; at D 128 f32 one CTA of up to 227 KiB)
    static constexpr size_t SPL = 2 * KVB + 2 * TW, BASE = MAXB + 256;
    static constexpr bool kSplit = FATTN_PATH_FWD_SPLIT && !kTwo &&
                                   (BASE <= 113 * 1024 ? SPL + 256 <= 113 * 1024 : SPL + 256 <= 227 * 1024);
    static constexpr size_t REG = kTwo ? STAGE + MAXB : kSplit && SPL > MAXB ? SPL : MAXB;
    static constexpr size_t smem() { return REG + 256; }

    PK_DEV static void issue_kv(const PathDev &p, const SeqInfo &sq, int hq, int h, int64_t cj, char *buf) {
        Tin *sKt = reinterpret_cast<Tin *>(buf), *sV = reinterpret_cast<Tin *>(buf + TI);
        float *gk = reinterpret_cast<float *>(buf + 2 * TI);
        const int64_t row = sq.row0 + cj * kC, t0 = sq.begin + cj * kC;
        load_tile<Tin, kThreads>(sKt, STi, static_cast<const Tin *>(p.kt) + (row * p.h + h) * D, int64_t(p.h) * D, kC, D, kC, D, true);
        load_tile<Tin, kThreads>(sV, STi, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + t0 * p.v_ss + h * p.v_sh,
                                 p.v_ss, kC, D, kC, p.V, p.vec_v);
        for (int a = tid(); a < kC; a += kThreads) gk[a] = p.has_gate ? p.gsum[(row + a) * p.hq + hq] : 0.f;
    }
    PK_DEV static void issue_wu(const PathDev &p, const SeqInfo &sq, int h, int64_t cj, char *buf) {
        const int64_t row = sq.row0 + cj * kC, ws = int64_t(p.h) * D;
        load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(buf), STw, static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws, kC, D, kC, D, true);
        load_tile<Tw, kThreads>(reinterpret_cast<Tw *>(buf + TW), STw, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws, kC, D,
                                kC, D, true);
    }
    PK_DEV static void issue_stage(const PathDev &p, const SeqInfo &sq, int hq, int h, int64_t cj, char *buf) {
        issue_kv(p, sq, hq, h, cj, buf);
        issue_wu(p, sq, h, cj, buf + KVB);
    }

    // The own chunk (UT form) of this warp's 16 rows: its tiles into `own` and the query rows' gate
    // sums into gq, issue_more() after they are committed (it issues a first key stage, if any, and
    // waits for the own tiles: ring_step or cp_wait), then X = Q~ and the causal
    // softmax's O, m, l. Ends with a sync: the own tiles may be overwritten after it.
    template <class F>
    PK_DEV static void own_chunk(const PathDev &p, const ChunkItem &ck, char *own, float *gq, F &&issue_more,
                                 float (&X)[NX][4], float (&O)[NX][4], float (&m)[2], float (&l)[2]) {
        const SeqInfo &sq = ck.sq;
        const int64_t gc = ck.gc, c0 = ck.c0;
        const int hq = ck.hq, h = ck.h, n = ck.n;
        const int r0 = 16 * warp_id();
        Tin *sQ = reinterpret_cast<Tin *>(own), *sK = reinterpret_cast<Tin *>(own + TI),
            *sV = reinterpret_cast<Tin *>(own + 2 * TI);
        Tw *sW = reinterpret_cast<Tw *>(own + 3 * TI), *sU = reinterpret_cast<Tw *>(own + 3 * TI + TW),
           *sDm = reinterpret_cast<Tw *>(own + 3 * TI + 2 * TW);
        const int64_t row = sq.row0 + c0, t0 = sq.begin + c0, ws = int64_t(p.h) * D;

        load_tile<Tin, kThreads>(sQ, STi, static_cast<const Tin *>(p.q) + sq.b * p.q_sb + t0 * p.q_ss + hq * p.q_sh,
                                 p.q_ss, kC, D, n, p.K, p.vec_q);
        load_tile<Tin, kThreads>(sK, STi, static_cast<const Tin *>(p.k) + sq.b * p.k_sb + t0 * p.k_ss + h * p.k_sh,
                                 p.k_ss, kC, D, n, p.K, p.vec_k);
        load_tile<Tin, kThreads>(sV, STi, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + t0 * p.v_ss + h * p.v_sh,
                                 p.v_ss, kC, D, n, p.V, p.vec_v);
        load_tile<Tw, kThreads>(sW, STw, static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws, kC, D, n, D, true);
        load_tile<Tw, kThreads>(sU, STw, static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws, kC, D, n, D, true);
        load_tile<Tw, kThreads>(sDm, STm, static_cast<const Tw *>(p.dmat) + (gc * p.h + h) * kC * kC, kC, kC, kC, kC,
                                kC, true);
        for (int a = tid(); a < kC; a += kThreads) gq[a] = p.has_gate && a < n ? p.gsum[(row + a) * p.hq + hq] : 0.f;
        cp_commit();
        issue_more();
        sync();

        float S[8][4];
        tile_to_acc(X, sQ, STi, r0);
        zero_acc(S);
        warp_gemm_acc<Tin, false>(S, X, 1.f, sK, STi, 0);  // Q K^T
        {
            float QW[8][4];
            qw_lower<Tw>(QW, X, sW, STw, r0);                   // LT(Q W^T)
            warp_gemm_acc<Tw, true>(S, QW, -1.f, sDm, STm, 0);  // - QW Dm
            warp_gemm_acc<Tw, true>(X, QW, -1.f, sU, STw, 0);   // Q~ = Q - QW U
        }
        // own-chunk softmax (causal inside the chunk, keys < n)
        for (int hh = 0; hh < 2; ++hh) {
            const int a = r0 + acc_row(2 * hh);
            float mx = -INFINITY;
            l[hh] = 0.f;
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 2; ++e) {
                    const int b = acc_col(j, e);
                    float &s = S[j][2 * hh + e];
                    s = (b <= a && b < n) ? p.sl2 * (s + gq[a] - gq[b]) : -INFINITY;
                    mx = fmax_(mx, s);
                }
            m[hh] = quad_max(mx);
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 2; ++e) {
                    float &s = S[j][2 * hh + e];
                    s = exp2_fast(s - m[hh]);
                    l[hh] += s;
                }
        }
        zero_acc(O);
        warp_gemm_acc<Tin, true>(O, S, 1.f, sV, STi, 0);
        sync();  // the own tiles may be overwritten from here on (stage 1 and the split slots alias them)
    }

    // An earlier chunk's scores S = X K~^T (exp2 domain, gate sums gq of the rows, gk of the keys)
    // into probabilities, with the running max m and sum l and O rescaled: the online softmax step.
    PK_DEV static void softmax_step(const PathDev &p, int r0, const float *gq, const float *gk, float (&S)[8][4],
                                    float (&O)[NX][4], float (&m)[2], float (&l)[2]) {
        for (int hh = 0; hh < 2; ++hh) {
            const int a = r0 + acc_row(2 * hh);
            float mx = m[hh];
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 2; ++e) {
                    float &x = S[j][2 * hh + e];
                    x = p.sl2 * (x + gq[a] - gk[acc_col(j, e)]);
                    mx = fmax_(mx, x);
                }
            mx = quad_max(mx);
            const float corr = exp2_fast(m[hh] - mx);
            m[hh] = mx;
            l[hh] *= corr;
            for (int j = 0; j < NX; ++j) O[j][2 * hh] *= corr, O[j][2 * hh + 1] *= corr;
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 2; ++e) {
                    float &x = S[j][2 * hh + e];
                    x = exp2_fast(x - mx);
                    l[hh] += x;
                }
        }
    }

    // o = O / l and lse (natural log) of this warp's valid rows.
    PK_DEV static void store_out(const PathDev &p, const ChunkItem &ck, const float (&O)[NX][4], const float (&m)[2],
                                 const float (&l)[2]) {
        const SeqInfo &sq = ck.sq;
        const int r0 = 16 * warp_id();
        const int64_t t0 = sq.begin + ck.c0;
        for (int hh = 0; hh < 2; ++hh) {
            const float lt = quad_sum(l[hh]), inv = 1.f / lt;
            const int a = r0 + acc_row(2 * hh);
            if (a >= ck.n) continue;
            const int64_t t = t0 + a;
            const int64_t oo = sq.b * p.o_sb + t * p.o_ss + ck.hq * p.o_sh;
            for (int j = 0; j < NX; ++j)
                for (int e = 0; e < 2; ++e) {
                    const int col = acc_col(j, e);
                    if (col < p.V) st<Tin>(p.o, oo + col, O[j][2 * hh + e] * inv);
                }
            if ((lane_id() & 3) == 0) p.lse[sq.b * p.lse_sb + ck.hq * p.lse_sh + t] = (m[hh] + log2_acc(lt)) * 0.6931471805599453f;
        }
    }

    PK_DEV static void run(const PathDev &p, char *smem) {
        const ChunkItem ck = chunk_item(p, true);
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci;
        const int hq = ck.hq, h = ck.h;
        const int r0 = 16 * warp_id();
        char *st0 = smem, *own = smem + (kTwo ? STAGE : 0);
        char *st1 = kTwo ? own : smem;
        float *gq = reinterpret_cast<float *>(smem + REG);
        float X[NX][4], S[8][4], O[NX][4], m[2], l[2];
        own_chunk(p, ck, own, gq, [&] { ring_step(kTwo && ci > 0, [&] { issue_stage(p, sq, hq, h, ci - 1, st0); }); }, X, O, m, l);

        // ---- earlier chunks, newest first ----
        // kSplit: slots KV0, KV1 at 0 and KVB, WU at 2 KVB; K~ V of chunk cj land while chunk cj + 1
        // is walked, its W U while its scores run
        char *const wu = smem + 2 * KVB;
        if (kSplit && ci > 0) {
            issue_kv(p, sq, hq, h, ci - 1, smem);
            cp_commit();
        }
        for (int64_t cj = ci - 1, s = 0; cj >= 0; --cj, ++s) {
            char *cur = kTwo && (s & 1) ? st1 : st0;
            if (kTwo) {
                ring_step(cj > 0, [&] { issue_stage(p, sq, hq, h, cj - 1, (s & 1) ? st0 : st1); });
            } else if (kSplit) {
                cur = smem + (s & 1) * KVB;
                if (cj > 0) {  // in flight: K~ V (cj), then W U (cj), K~ V (cj - 1)
                    issue_wu(p, sq, h, cj, wu);
                    cp_commit();
                    issue_kv(p, sq, hq, h, cj - 1, smem + ((s + 1) & 1) * KVB);
                    cp_commit();
                    cp_wait<2>();
                } else {
                    cp_wait<0>();
                }
            } else {
                issue_stage(p, sq, hq, h, cj, st0);
                cp_commit();
                cp_wait<0>();
            }
            sync();
            const Tin *cKt = reinterpret_cast<const Tin *>(cur), *cV = reinterpret_cast<const Tin *>(cur + TI);
            const Tw *cW = reinterpret_cast<const Tw *>(kSplit ? wu : cur + KVB), *cU = cW + TW / sizeof(Tw);
            const float *gk = reinterpret_cast<const float *>(cur + 2 * TI);
            zero_acc(S);
            warp_gemm_acc<Tin, false>(S, X, 1.f, cKt, STi, 0);
            softmax_step(p, r0, gq, gk, S, O, m, l);
            warp_gemm_acc<Tin, true>(O, S, 1.f, cV, STi, 0);
            if (kSplit && cj > 0) {  // W U (cj) landed
                cp_wait<1>();
                sync();
            }
            if (cj > 0) walk_back<Tw>(X, cW, cU, STw);
            sync();
        }

        store_out(p, ck, O, m, l);
    }
};

}  // namespace fattn::pathk
