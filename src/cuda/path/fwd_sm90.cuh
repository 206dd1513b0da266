// fwd_sm90.cuh — the PaTH forward (fwd.cuh: KFwd) with the walk of its earlier-chunk loop on
// Hopper's wgmma, for 16-bit inputs at D 64 / 128 on an sm_90 device. One warpgroup per CTA (64
// query rows, the same fragment map as KFwd's four warps); the own chunk and the scores run KFwd's
// mma.sync code unchanged. Per earlier chunk cj = ci-1 .. 0, with X (= the transformed queries) in
// f32 registers:
//   S = X·K~ᵀ, online softmax           mma.sync, as KFwd
//   O += P·V                             mma.sync, as KFwd
//   XW = X·Wᵀ (walk_sm90.cuh: WalkW)     m64n64k16 wgmmas, X as f16 register A fragments, W read K-major
//   X -= XW·U                            m64nDk16, −XW as f16 register fragments, U read MN-major
// KFwd's split pipeline: two K~ V slots (KFwd's padded tiles: K~ V of chunk cj land while chunk
// cj + 1 is walked) and one W U slot in 128-byte swizzled panels (sw128_elem, cp.async) that lands
// while the chunk's scores run. (All four products on wgmma, X as register fragments for S too,
// ran slower: docs/EXPERIMENTS.md.)
//
// Built when nvcc compiles with FATTN_HAVE_SM90 and FATTN_PATH_FWD_SM90 is set; sequence.h launches
// it on sm_90 devices (CudaLauncher::sm90) at the kernel head dims it names: 1: D 128; 2: D 64 and
// 128; 0 (default, until the GPU times it): never. The CPU emulation runs it (emu.h's wgmma; the
// fattn_emu_alt library at 2).
#pragma once

#include "cuda/path/fwd.cuh"

#ifndef FATTN_PATH_FWD_SM90
#define FATTN_PATH_FWD_SM90 0
#endif
#if FATTN_PATH_WGMMA_BUILD && FATTN_PATH_FWD_SM90
#define FATTN_PATH_FWD_SM90_BUILT 1
#include "cuda/path/walk_sm90.cuh"
#else
#define FATTN_PATH_FWD_SM90_BUILT 0
#endif

namespace fattn::pathk {

// Whether the (dtype, kernel head dim) forward launches KFwdSm90 on an sm_90 device.
constexpr bool fwd_sm90_at(size_t in_bytes, int d) {
    return wgmma_at(FATTN_PATH_FWD_SM90_BUILT, FATTN_PATH_FWD_SM90 == 2, in_bytes, d);
}

}  // namespace fattn::pathk

#if FATTN_PATH_FWD_SM90_BUILT
namespace fattn::pathk {

template <typename Tin, int D> struct KFwdSm90 {
    static_assert(sizeof(Tin) == 2 && (D == 64 || D == 128), "16-bit inputs at D 64 or 128");
    using Base = KFwd<Tin, D>;
    using Walk = WalkW<Tin, D>;
    static constexpr int kThreads = 128, NX = D / 8;
    static constexpr int STi = Base::STi;
    // two K~ V slots (KFwd's: Base::KVB bytes each), then the W U stage, 1024-aligned
    static constexpr size_t OFF_WU = (2 * Base::KVB + 1023) / 1024 * 1024, SLOTS = OFF_WU + Walk::STAGE;
    static constexpr size_t REG = SLOTS > Base::OWN ? SLOTS : Base::OWN;
    // 1024 bytes of slack to align the base (the swizzle repeats per 1024-byte 8-row group), the
    // query rows' gate sums after the region
    static constexpr size_t smem() { return 1024 + REG + 256; }

    PK_DEV static void run(const PathDev &p, char *smem_raw) {
#if FATTN_PATH_WGMMA_PASS
        char *smem = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
        const ChunkItem ck = chunk_item(p, true);
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci;
        const int hq = ck.hq, h = ck.h;
        const int r0 = 16 * warp_id();
        float *gq = reinterpret_cast<float *>(smem + REG);
        float X[NX][4], O[NX][4], m[2], l[2];
        Base::own_chunk(p, ck, smem, gq, [] { cp_wait<0>(); }, X, O, m, l);

        // ---- earlier chunks, newest first: slots KV0, KV1 at 0 and Base::KVB, W U at OFF_WU ----
        char *const wu = smem + OFF_WU;
        if (ci > 0) {
            Base::issue_kv(p, sq, hq, h, ci - 1, smem);
            cp_commit();
        }
        for (int64_t cj = ci - 1, s = 0; cj >= 0; --cj, ++s) {
            char *cur = smem + (s & 1) * Base::KVB;
            if (cj > 0) {  // in flight: K~ V (cj), then W U (cj), K~ V (cj - 1)
                Walk::issue(p, sq, h, cj, wu);
                cp_commit();
                Base::issue_kv(p, sq, hq, h, cj - 1, smem + ((s + 1) & 1) * Base::KVB);
                cp_commit();
                cp_wait<2>();
            } else {
                cp_wait<0>();
            }
            sync();
            const Tin *cKt = reinterpret_cast<const Tin *>(cur), *cV = reinterpret_cast<const Tin *>(cur + Base::TI);
            const float *gk = reinterpret_cast<const float *>(cur + 2 * Base::TI);
            float S[8][4];
            zero_acc(S);
            warp_gemm_acc<Tin, false>(S, X, 1.f, cKt, STi, 0);
            Base::softmax_step(p, r0, gq, gk, S, O, m, l);
            warp_gemm_acc<Tin, true>(O, S, 1.f, cV, STi, 0);
            if (cj > 0) {  // W U (cj) landed: the walk, X -= (X·Wᵀ)·U
                cp_wait<1>();
                Walk::landed();
                Walk::step(X, wu);
            }
            sync();  // every read of this chunk's slots done before the next issue overwrites them
        }
        Base::store_out(p, ck, O, m, l);
#else
        (void)p, (void)smem_raw;
#if defined(__CUDA_ARCH__)
        __trap();  // launched where no sm_90a code was built: fail loudly (launch_fwd never does)
#endif
#endif
    }
};

}  // namespace fattn::pathk
#endif
