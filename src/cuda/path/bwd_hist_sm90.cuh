// bwd_hist_sm90.cuh — the history producer (bwd_hist.cuh: KHist) with its walk on Hopper's wgmma,
// for 16-bit inputs at D 64 / 128 on an sm_90 device. One warpgroup per CTA (64 query rows,
// KHist's fragment map); the own chunk runs KHist's mma.sync code. Per earlier chunk
// cj = ci-1 .. 8, with X in f32 registers (walk_sm90.cuh: WalkW):
//   XW = X·Wᵀ        m64n64k16 wgmmas, X as f16 register A fragments, W read K-major
//   X -= XW·U        m64nDk16, −XW as f16 register fragments, U read MN-major
// and X stored at every segment start it crosses (KHist::store). W and U lie in 128-byte swizzled
// panels (sw128_elem) written by cp.async, a two-stage ring.
//
// Built when nvcc compiles with FATTN_HAVE_SM90 and FATTN_PATH_HIST_SM90 is set; bwd.cuh launches
// it on sm_90 devices (CudaLauncher::sm90) at the kernel head dims it names: 1: D 128; 2: D 64 and
// 128 (the default: on an H100, 2026-12-05, ncu at T4096 H16 D128 233 -> 191 µs beside KHist, GPU
// parity and determinism 14/0); 0: never (KHist). The CPU emulation runs it (the fattn_emu library
// at 2; fattn_emu_alt at 0 keeps KHist's 16-bit path tested).
#pragma once

#include "cuda/path/bwd_hist.cuh"

#ifndef FATTN_PATH_HIST_SM90
#define FATTN_PATH_HIST_SM90 2
#endif
#if FATTN_PATH_WGMMA_BUILD && FATTN_PATH_HIST_SM90
#define FATTN_PATH_HIST_SM90_BUILT 1
#include "cuda/path/walk_sm90.cuh"
#else
#define FATTN_PATH_HIST_SM90_BUILT 0
#endif

namespace fattn::pathk {

// Whether the (dtype, kernel head dim) backward launches KHistSm90 on an sm_90 device.
constexpr bool hist_sm90_at(size_t in_bytes, int d) {
    return wgmma_at(FATTN_PATH_HIST_SM90_BUILT, FATTN_PATH_HIST_SM90 == 2, in_bytes, d);
}

}  // namespace fattn::pathk

#if FATTN_PATH_HIST_SM90_BUILT
namespace fattn::pathk {

template <typename Tin, int D> struct KHistSm90 {
    static_assert(sizeof(Tin) == 2 && (D == 64 || D == 128), "16-bit inputs at D 64 or 128");
    using Base = KHist<Tin, D>;
    using Walk = WalkW<Tin, D>;
    static constexpr int kThreads = 128, NX = D / 8;
    static constexpr size_t STAGE = Walk::STAGE;
    // stage 0, then the own tiles (KHist's layout), which stage 1 takes once they are read
    static constexpr size_t REG1 = STAGE > Base::OWN ? STAGE : Base::OWN;
    static constexpr size_t smem() { return 1024 + STAGE + REG1; }  // + slack to align the base to 1024

    PK_DEV static void run(const PathDev &p, char *smem_raw) {
#if FATTN_PATH_WGMMA_PASS
        char *smem = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
        const ChunkItem ck = chunk_item(p, true);
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci, c0 = ck.c0;
        const int hq = ck.hq, h = ck.h, n = ck.n;
        if (!Base::has_work(ci)) return;  // segment 0 has no history
        const int64_t lo = Base::walk_lo(ci);
        const int r0 = 16 * warp_id();
        char *st0 = smem, *st1 = smem + STAGE;
        float X[NX][4];
        Base::own_chunk(p, ck, st1, [&] { ring_step(ci - 1 >= lo, [&] { Walk::issue(p, sq, h, ci - 1, st0); }); }, X);
        for (int64_t cj = ci - 1, s = 0; cj >= lo; --cj, ++s) {
            Base::state_at(p, sq, hq, ci, cj, r0, X);
            char *cur = (s & 1) ? st1 : st0;
            ring_step(cj - 1 >= lo, [&] { Walk::issue(p, sq, h, cj - 1, (s & 1) ? st0 : st1); });
            Walk::landed();
            Walk::step(X, cur);
            if (cj % kNcs == 0) Base::store(p, sq, hq, c0, n, r0, cj / kNcs, X);
            sync();  // every wgmma of this stage done before the next issue overwrites it
        }
        if (ci < kNcs) Base::state_at(p, sq, hq, ci, 0, r0, X);
#else
        (void)p, (void)smem_raw;
#if defined(__CUDA_ARCH__)
        __trap();  // launched where no sm_90a code was built: fail loudly (launch_hist never does)
#endif
#endif
    }
};

}  // namespace fattn::pathk
#endif
