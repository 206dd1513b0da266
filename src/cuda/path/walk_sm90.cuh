// walk_sm90.cuh — the PaTH walk X <- X - (X·Wᵀ)·U of one warpgroup's 64 rows on Hopper's wgmma,
// for 16-bit inputs (the walk type f16) at D 64 / 128: the earlier-chunk step of the history
// producer (bwd_hist_sm90.cuh: KHistSm90). (The forward's walk on it ran slower than KFwd's
// mma.sync walk: docs/EXPERIMENTS.md.)
//   XW = X·Wᵀ      m64n64k16 wgmmas, X as f16 register A fragments, W read K-major
//   X -= XW·U      m64nDk16, −XW as f16 register fragments, U read MN-major
// A chunk's W and U lie in a stage of two 128-byte swizzled [64, D] tiles (sw128_elem), written
// by cp.async. Included where KHistSm90 is built.
#pragma once

#include "cuda/attn/sm90/wgmma_products.cuh"
#include "cuda/path/common.cuh"

namespace fattn::pathk {

template <typename Tin, int D> struct WalkW {
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 128, NK = kC / 16, ND = D / 16;
    static constexpr uint32_t PANEL = kC * 128;  // bytes from one [64, 64] panel of a tile to the next
    static constexpr size_t TILE = (D / 64) * size_t(PANEL), STAGE = 2 * TILE;  // W, U

    // Chunk cj's W and U into the stage at buf (1024-aligned; cp.async: the caller commits).
    PK_DEV static void issue(const PathDev &p, const SeqInfo &sq, int h, int64_t cj, char *buf) {
        const int64_t row = sq.row0 + cj * kC, ws = int64_t(p.h) * D;
        load_tile_sw<Tw, D, kThreads>(reinterpret_cast<Tw *>(buf), static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws, kC, D,
                                      true);
        load_tile_sw<Tw, D, kThreads>(reinterpret_cast<Tw *>(buf + TILE), static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws,
                                      kC, D, true);
    }
    // After this thread's cp.async copies of a stage landed (cp_wait): every thread's copies
    // visible to the wgmmas that read it.
    PK_DEV static void landed() {
        cuda::sm90::fence_proxy_async_smem();
        sync();
    }
    // One walk step of this warpgroup's X through the stage at buf (landed); waits for its wgmmas.
    PK_DEV static void step(float (&X)[D / 8][4], const char *buf) {
        using namespace fattn::cuda;
        const uint32_t w_base = sm90::saddr(buf), u_base = w_base + uint32_t(TILE);
        float XW[8][4];
        {
            uint32_t xw[ND][4];
            for (int kk = 0; kk < ND; ++kk) Frag<Tw>::a_acc(xw[kk], X, kk, 1.f);
            sm90::wgmma_fence();
            attn::sm90_rs_product_kmajor<Tw, D, kC>(wg_acc(XW), xw, w_base, PANEL, false);
            sm90::wgmma_commit();
            sm90::wgmma_wait<0>();
            sm90::reg_fence(wg_acc(XW));
        }
        uint32_t ua[NK][4];
        for (int kk = 0; kk < NK; ++kk) Frag<Tw>::a_acc(ua[kk], XW, kk, -1.f);
        sm90::wgmma_fence();
        attn::sm90_rs_product<Tw, D, NK>(wg_acc(X), ua, 0u, u_base, PANEL);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(wg_acc(X));
    }
};

}  // namespace fattn::pathk
