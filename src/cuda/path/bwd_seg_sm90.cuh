// bwd_seg_sm90.cuh — KSegInter's key loop (bwd_seg.cuh) on Hopper's wgmma, for 16-bit inputs at
// D 64 / 128 on an sm_90 device: KSegInterSm90 is KSegInter<Tin, D, true>, whose dO, Qh, K^ and V
// tiles lie in 128-byte swizzled panels (sw128_elem, written by cp.async: the history's rows are
// cells of a packed layout), and per key chunk each warpgroup (64 query rows) runs
//   S = Qh·K^ᵀ, dP = dO·Vᵀ       m64n64k16 wgmmas, both operands K-major in shared memory
//   P, dS (and dG) on the accumulators, exactly as the mma.sync loop (the same fragment map)
//   γ += dS·K^                   m64nDk16 wgmmas, dS as register A fragments, K^ read MN-major
// The K × K steps (dE, γ(I − E)ᵀ) stay on mma.sync over f32 tiles.
//
// Built when nvcc compiles with FATTN_HAVE_SM90 and FATTN_PATH_SEG_SM90 is set; bwd.cuh launches it
// on sm_90 devices (CudaLauncher::sm90) at the kernel head dims it names: 1: D 128; 2: D 64 and 128;
// 0 (default): never. (FATTN_PATH_DKV_SM90 numbers its values the other way: 2 = D 128, 1 = both.)
// The CPU emulation runs it (emu.h's wgmma; the fattn_emu_alt library at 2).
#pragma once

#include "cuda/path/bwd_dkv_sm90.cuh"
#include "cuda/path/bwd_seg.cuh"

#ifndef FATTN_PATH_SEG_SM90
#define FATTN_PATH_SEG_SM90 0
#endif
#if FATTN_PATH_WGMMA_BUILD && FATTN_PATH_SEG_SM90
#define FATTN_PATH_SEG_SM90_BUILT 1
#include "cuda/attn/sm90/wgmma_products.cuh"
#else
#define FATTN_PATH_SEG_SM90_BUILT 0
#endif

namespace fattn::pathk {

// Whether the (dtype, kernel head dim) backward launches KSegInterSm90 on an sm_90 device.
constexpr bool seg_sm90_at(size_t in_bytes, int d) {
    return wgmma_at(FATTN_PATH_SEG_SM90_BUILT, FATTN_PATH_SEG_SM90 == 2, in_bytes, d);
}

}  // namespace fattn::pathk

#if FATTN_PATH_SEG_SM90_BUILT
namespace fattn::pathk {

template <typename Tin, int D> struct SegInterW {
    static constexpr int NK = kC / 16;
    static constexpr uint32_t PANEL = kC * 128;  // bytes from one [64, 64] panel of a tile to the next

    PK_DEV static void fence() {
#if FATTN_PATH_WGMMA_PASS
        cuda::sm90::fence_proxy_async_smem();
#endif
    }
    // S = q·kᵀ and dP = o·vᵀ for this warpgroup's 64 rows (q, o: its rows' tiles; k, v: the keys')
    PK_DEV static void scores(float (&S)[8][4], float (&dP)[8][4], const Tin *q, const Tin *k, const Tin *o, const Tin *v) {
#if FATTN_PATH_WGMMA_PASS
        using namespace fattn::cuda;
        sm90::wgmma_fence();
        attn::sm90_ss_product<Tin, D, kC>(wg_acc(S), sm90::saddr(q), PANEL, sm90::saddr(k), PANEL);
        attn::sm90_ss_product<Tin, D, kC>(wg_acc(dP), sm90::saddr(o), PANEL, sm90::saddr(v), PANEL);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(wg_acc(S));
        sm90::reg_fence(wg_acc(dP));
#else
        (void)S, (void)dP, (void)q, (void)k, (void)o, (void)v;
#if defined(__CUDA_ARCH__)
        __trap();  // launched where no sm_90a code was built: fail loudly (bwd.cuh never does)
#endif
#endif
    }
    // gam += dS·k (dS: the warp's accumulators, as 16-bit A fragments; k read MN-major)
    PK_DEV static void gamma(float (&gam)[D / 8][4], const float (&dS)[8][4], const Tin *k) {
#if FATTN_PATH_WGMMA_PASS
        using namespace fattn::cuda;
        uint32_t a[NK][4];
        for (int kk = 0; kk < NK; ++kk) Frag<Tin>::a_acc(a[kk], dS, kk, 1.f);
        sm90::wgmma_fence();
        attn::sm90_rs_product<Tin, D, NK>(wg_acc(gam), a, 0u, sm90::saddr(k), PANEL);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(wg_acc(gam));
#else
        (void)gam, (void)dS, (void)k;
#endif
    }
};

// KSegInter with the wgmma key loop, under a name of its own (the emulation's tests check which ran).
template <typename Tin, int D> struct KSegInterSm90 : KSegInter<Tin, D, true> {};

}  // namespace fattn::pathk
#endif
