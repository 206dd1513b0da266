// prep.cuh — the UT transform of one 64-token chunk of one kv head (PATH.md §3), shared by the
// prep kernel (forward and backward) and the backward's chain kernel:
//   M  = SL(diag(beta) W W^T)      T0 = (I + M)^-1 (forward substitution, f32 FMA, fixed order)
//   U  = T0 diag(beta) W           WK = SL(W K^T)      Dm = T0 diag(beta) WK
//   K~ = K - Dm^T W                (the keys walked forward to the chunk end)
// so that H_{n-1} ... H_0 = I - W^T U, and the intra-chunk scores are LT(Q K^T - LT(Q W^T) Dm).
// Products other than M run on tf32 tensor cores (f32 tiles). Rows past the sequence are 0
// (beta 0: H = I), which every formula above tolerates.
#pragma once

#include "cuda/path/common.cuh"

// The backward's prep keeps T0 for KChainB in the half of each chunk's Dm block that Dm leaves 0,
// so that KChainB loads it instead of solving (I + M) T0 = I again (PathDev::keep_t0; 0: KChainB
// solves, as the prep does). With KChainB's terms summed in registers, KChainB 509 -> 354 us at
// T4096 H16 D128 and 502 -> 336 at T4096 H32 D64 (H100, 2026-12-06: docs/PERF.md).
#ifndef FATTN_PATH_KEEP_T0
#define FATTN_PATH_KEEP_T0 1
#endif

namespace fattn::pathk {

// Load W (f32 view), K (input dtype, converted; RndK: stored as tf32 values) and beta of chunk c
// (tokens c0 .. c0+n) of kv head h.
template <typename Tin, int D, int NT, bool RndK = false>
PK_DEV void prep_load(const PathDev &p, const SeqInfo &sq, int64_t c0, int n, int h, float *sW, float *sK,
                      float *sb) {
    constexpr int SD = F32Tiles<D>::SD;
    const int64_t t0 = sq.begin + c0;
    load_w_f32<NT>(sW, SD, p, sq, c0, h, D, n);
    load_tile_cvt<float, Tin, NT, RndK>(sK, SD, static_cast<const Tin *>(p.k) + sq.b * p.k_sb + t0 * p.k_ss + h * p.k_sh,
                                  p.k_ss, kC, D, n, p.K, p.vec_k);
    for (int a = tid(); a < kC; a += NT) sb[a] = a < n ? p.beta[sq.b * p.beta_sb + (t0 + a) * p.beta_ss + h * p.beta_sh] : 0.f;
    cp_landed();
}

// sM <- M (3xTF32, f32-accurate), then sT0 <- (I + M)^-1 in 16 x 16 blocks, f32 FMA in a fixed
// order: the four diagonal blocks by forward substitution (thread c of block k solves column c
// from the top), then the blocks below the diagonal by distance d = 1, 2, 3 from it:
//   Y_ij = sum_{k=j}^{i-1} M_ik X_kj,   X_ij = -X_ii Y_ij        (i - j = d)
// every element of a stage in parallel. Rows past the sequence have beta = 0: their M rows are 0
// and their X rows those of I. Needs sW, sb loaded (and synced); sY: kT0Scratch floats (stage d = 1's
// three blocks of 16 x 16).
constexpr int kT0Scratch = 3 * 256;
template <int D, int NT>
PK_DEV void prep_t0(const float *sW, const float *sb, float *sM, float *sT0, float *sY) {
    constexpr int SD = F32Tiles<D>::SD, S64 = F32Tiles<D>::S64, NW = NT / 32;
    for (int tile = warp_id(); tile < 16; tile += NW) {  // the 16 x 16 tiles of the 64 x 64 M
        const int m0 = (tile / 4) * 16, n0 = (tile % 4) * 16;
        float acc[2][4];
        zero_acc(acc);
        if (n0 <= m0 + 15) warp_gemm_3xtf32(acc, sW, SD, sW, SD, m0, n0, D);
        for (int j = 0; j < 2; ++j)
            for (int i = 0; i < 4; ++i) {
                const int a = m0 + acc_row(i), b = n0 + acc_col(j, i);
                sM[a * S64 + b] = b < a ? sb[a] * acc[j][i] : 0.f;
            }
    }
    for (int e = tid(); e < kC * kC; e += NT) sT0[(e / kC) * S64 + e % kC] = (e / kC == e % kC) ? 1.f : 0.f;
    sync();
    if (tid() < kC) {  // diagonal block k = c / 16, its column c = k0 + j, in registers
        const int c = tid(), k0 = c & ~15, j = c & 15;
        const float *mb = sM + k0 * S64 + k0;
        float x[16];
        // x[a] = -sum_{b < a} M_ab x[b], b ascending; the terms b < j are exact zeros (x[b] = 0),
        // so the sums are those of b = j .. a-1. Fully unrolled: M's loads do not wait for x.
#pragma unroll
        for (int a = 0; a < 16; ++a) {
            float s = 0.f;
#pragma unroll
            for (int b = 0; b < a; ++b) s += mb[a * S64 + b] * x[b];
            x[a] = a < j ? 0.f : a == j ? 1.f : -s;
        }
#pragma unroll
        for (int a = 1; a < 16; ++a)
            if (a > j) sT0[(k0 + a) * S64 + c] = x[a];
    }
    sync();
    // The blocks below the diagonal: trip counts fixed at compile time (unrolled: the loads of a
    // sum are issued before its FMAs). X_ii is lower triangular with zeros above its diagonal in
    // sT0, so its sum runs over all 16 m: the terms m > a are exact zeros.
    // f(e, i, j, a, b) for every element e of stage d: element (a, b) of block (i, j = i - d).
    auto stage = [&](const int d, auto &&f) {
        const int n = (4 - d) * 256;
#pragma unroll
        for (int e0 = 0; e0 < n; e0 += NT) {
            const int e = e0 + tid();
            if (NT * (n / NT) != n && e >= n) break;
            f(e, e / 256 + d, e / 256, (e / 16) % 16, e % 16);
        }
    };
#pragma unroll
    for (int d = 1; d < 4; ++d) {
        stage(d, [&](int e, int i, int j, int a, int b) {
            const float *mrow = sM + (16 * i + a) * S64 + 16 * j, *xcol = sT0 + 16 * j * S64 + 16 * j + b;
            float s = 0.f;
#pragma unroll
            for (int m = 0; m < 16 * d; ++m) s += mrow[m] * xcol[m * S64];
            sY[e] = s;
        });
        sync();
        stage(d, [&](int, int i, int j, int a, int b) {
            const float *xrow = sT0 + (16 * i + a) * S64 + 16 * i;
            float s = 0.f;
#pragma unroll
            for (int m = 0; m < 16; ++m) s += xrow[m] * sY[j * 256 + m * 16 + b];
            sT0[(16 * i + a) * S64 + 16 * j + b] = -s;
        });
        sync();
    }
}

// Dm = T SL(W K^T) is strictly lower triangular: the backward's prep (PathDev::keep_t0) stores
// T0[a][b] (a > b) at [b][a] of the chunk's 64 x 64 Dm block g, and at [0][0] 1 where every T0
// value fits the walk type (f16: |T0| <= 65504), else 0 (KChainB then solves for T0 again). The
// rest of the diagonal is neither written nor read (load_dm_f32 masks it). sT0 synced; the flag's
// barrier is every thread's.
template <typename Tw, int NT> PK_DEV void keep_t0(const float *sT0, Tw *g) {
    constexpr int S64 = tile_stride<float>(kC);
    int big = 0;
    for (int e = tid(); e < kC * kC; e += NT) {
        const int r = e / kC, c = e % kC;
        if (r >= c) continue;
        const float v = sT0[c * S64 + r];
        if (sizeof(Tw) == 2 && !(fabsf(v) <= 65504.f)) big = 1;
        g[e] = from_f<Tw>(v);
    }
    big = sync_or(big);
    if (tid() == 0) g[0] = from_f<Tw>(big ? 0.f : 1.f);
}
// KChainB's side: T0 (unit diagonal, 0 above) from the Dm block g into the f32 tile s and true,
// or false (s untouched) where the prep's flag says it could not keep it. Ends with a barrier.
template <typename Tw, int NT> PK_DEV bool load_kept_t0(float *s, const Tw *g) {
    constexpr int S64 = tile_stride<float>(kC);
    if (to_f(g[0]) == 0.f) return false;  // the same flag for every thread
    for (int e = tid(); e < kC * kC; e += NT) {  // g read in order, s written transposed
        const int r = e / kC, c = e % kC;
        s[c * S64 + r] = r < c ? to_f(g[e]) : r == c ? 1.f : 0.f;
    }
    sync();
    return true;
}
// The strictly lower part of a chunk's 64 x 64 Dm block g, read 16 bytes at a time: put(r, c, v, k,
// ok) for element k of the vector v holding (r, c); ok: c < r (v is 0 where it holds none of those).
template <typename Tw, int NT, class Put> PK_DEV void dm_lower(const Tw *g, Put &&put) {
    constexpr int EPV = 16 / int(sizeof(Tw)), PR = kC / EPV, N = kC * PR;
    for (int e = tid(); e < N; e += NT) {
        const int r = e / PR, c = (e % PR) * EPV;
        const V16 v = c < r ? ld16(g + r * kC + c) : V16{};
        for (int k = 0; k < EPV; ++k) put(r, c + k, v, k, c + k < r);
    }
}
// Dm of a chunk (g: its 64 x 64 block) into an f32 tile as tf32 values, the diagonal and the half
// above it 0 whatever the block holds there (keep_t0).
template <typename Tw, int NT> PK_DEV void load_dm_f32(float *s, int ST, const Tw *g) {
    dm_lower<Tw, NT>(g, [&](int r, int c, const V16 &v, int k, bool ok) { s[r * ST + c] = ok ? rnd_if<sizeof(Tw) == 4>(v16_elem<Tw>(v, k)) : 0.f; });
}

// The same into a 16-bit tile of the walk type (f16: the products take it exactly as tf32).
template <typename Tw, int NT> PK_DEV void load_dm16(Tw *s, int ST, const Tw *g) {
    static_assert(sizeof(Tw) == 2, "a 16-bit walk type");
    dm_lower<Tw, NT>(g, [&](int r, int c, const V16 &v, int k, bool ok) {
        uint16_t b = 0;
        if (ok) std::memcpy(&b, reinterpret_cast<const char *>(v.w) + 2 * k, 2);
        std::memcpy(s + r * ST + c, &b, 2);
    });
}

// sWK <- SL(W K^T) (stored as tf32 values: read only as an operand), then sDm <- T WK (T = T0
// diag(beta), a tile of tf32 values). Needs sW, sK, sT; the prep kernel and the chain kernel both
// compute Dm this one way, so the backward's recompute rounds as the prep. RND: the operand flags
// of W and K (common.cuh); RndDm: Dm stored as tf32 values (the chain kernel's).
template <int D, int NW, int RND = 0> PK_DEV void prep_wk(const float *sW, const float *sK, float *sWK) {
    constexpr int SD = F32Tiles<D>::SD, S64 = F32Tiles<D>::S64;
    cta_gemm<float, false, false, 4, NW, RND>(kC, kC, D, sW, SD, sK, SD,
                                              [&](int d, int b, float v) { sWK[d * S64 + b] = d > b ? tf32_round(v) : 0.f; });
    sync();
}
// sDm <- T WK (T, WK: tiles of tf32 values).
template <int D, int NW, bool RndDm = false> PK_DEV void prep_dm(const float *sT, const float *sWK, float *sDm) {
    constexpr int S64 = F32Tiles<D>::S64;
    cta_gemm<float, false, true, 4, NW, kRA | kRB>(kC, kC, kC, sT, S64, sWK, S64,
                                                   [&](int a, int b, float v) { sDm[a * S64 + b] = rnd_if<RndDm>(v); });
    sync();
}
template <int D, int NW, int RND = 0, bool RndDm = false>
PK_DEV void prep_wk_dm(const float *sW, const float *sK, const float *sT, float *sWK, float *sDm) {
    prep_wk<D, NW, RND>(sW, sK, sWK);
    prep_dm<D, NW, RndDm>(sT, sWK, sDm);
}

// Forward and backward: per (chunk, kv head) store U, W (walk type), K~ (input dtype) and Dm
// (walk type) into the workspace. grid (total chunks, H). WK is formed first, so K's tile gives its
// space to M and the solve's scratch, and K~'s epilogue reads K from global memory (the loads issued
// before its product): two f32 tiles of 64 x D and two of 64 x 64, so two CTAs share an SM at D 128
// (at D 64 the registers, 126 of the 128 the cap allows, keep it at two). H100, T4096 H16 D128
// (2026-12-06): 156 us against 195 with five tiles and one CTA per SM (docs/PERF.md).
template <typename Tin, int D> struct KPrep {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 256, NW = kThreads / 32, kMinBlocks = 2;
    using PT = F32Tiles<D>;
    static constexpr size_t XB = PT::BIG > PT::SMALL ? PT::BIG : PT::SMALL;  // K, then M (D 32: M is the larger)
    static constexpr size_t smem() { return PT::BIG + XB + 2 * PT::SMALL + kT0Scratch * 4 + 256; }
    PK_DEV static void run(const PathDev &p, char *smem) {
        constexpr int SD = PT::SD, S64 = PT::S64, NB = D / 16;  // K~'s warp tiles: 16 x D/2
        const int64_t gc = bid_x();
        const int h = bid_y();
        const SeqInfo sq = seq_of_chunk(p, gc);
        const int64_t c0 = (gc - sq.chunk0) * kC;
        const int n = int(sq.len - c0 < kC ? sq.len - c0 : kC);
        // sX holds K, then M and T = T0 diag(beta); sT0 holds T0, then Dm
        float *sW = reinterpret_cast<float *>(smem), *sX = sW + kC * SD, *sWK = reinterpret_cast<float *>(smem + PT::BIG + XB);
        float *sT0 = sWK + kC * S64;
        float *sY = sT0 + kC * S64, *sb = sY + kT0Scratch, *sM = sX, *sDm = sT0;
        prep_load<Tin, D, kThreads>(p, sq, c0, n, h, sW, sX, sb);
        constexpr int kK = sizeof(Tin) == 2 ? kRB : 0;
        prep_wk<D, NW, kK>(sW, sX, sWK);  // WK = SL(W K^T); K's tile is free after it
        prep_t0<D, kThreads>(sW, sb, sM, sT0, sY);
        Tw *gdm = static_cast<Tw *>(p.dmat) + (gc * p.h + h) * kC * kC;
        if (p.keep_t0) keep_t0<Tw, kThreads>(sT0, gdm);
        // T = T0 diag(beta) as tf32 values (read only as an operand)
        for (int e = tid(); e < kC * kC; e += kThreads) sM[(e / kC) * S64 + e % kC] = tf32_round(sT0[(e / kC) * S64 + e % kC] * sb[e % kC]);
        sync();
        const int64_t row = sq.row0 + c0;
        auto at = [&](int a, int col) { return ((row + a) * p.h + h) * D + col; };
        // U = T W; W in the walk type; Dm = T WK into sT0 (T0 is no longer needed)
        cta_gemm<float, false, true, NB, NW, kRA>(kC, D, kC, sM, S64, sW, SD, [&](int a, int col, float v) {
            if (a < n) st<Tw>(p.uw, at(a, col), v);  // rows past the sequence belong to the next one
        });
        for (int e = tid(); e < n * D; e += kThreads) st<Tw>(p.ww, at(e / D, e % D), sW[(e / D) * SD + e % D]);
        prep_dm<D, NW>(sM, sWK, sDm);
        for (int e = tid(); e < kC * kC; e += kThreads)
            if (!p.keep_t0 || e / kC > e % kC) gdm[e] = from_f<Tw>(sDm[(e / kC) * S64 + e % kC]);
        // K~ = K - Dm^T W: a 16 x D/2 tile per warp, its K elements loaded before the product
        const Tin *gk = static_cast<const Tin *>(p.k) + sq.b * p.k_sb + (sq.begin + c0) * p.k_ss + h * p.k_sh;
        for (int tile = warp_id(); tile < 2 * kC / 16; tile += NW) {
            const int m0 = (tile / 2) * 16, n0 = (tile % 2) * 8 * NB;
            float kv[NB][4], acc[NB][4];
            for (int j = 0; j < NB; ++j)
                for (int i = 0; i < 4; ++i) {
                    const int b = m0 + acc_row(i), col = n0 + acc_col(j, i);
                    kv[j][i] = b < n && col < p.K ? to_f(gk[b * p.k_ss + col]) : 0.f;
                }
            zero_acc(acc);
            warp_gemm<float, true, true, NB>(acc, sDm, S64, sW, SD, m0, n0, kC);
            for (int j = 0; j < NB; ++j)
                for (int i = 0; i < 4; ++i) {
                    const int b = m0 + acc_row(i), col = n0 + acc_col(j, i);
                    if (b < n) st<Tin>(p.kt, at(b, col), kv[j][i] - acc[j][i]);
                }
        }
    }
};

}  // namespace fattn::pathk
