// fwd_sm90.cuh — the PaTH forward (fwd.cuh: KFwd) with its earlier-chunk loop on Hopper's wgmma,
// for 16-bit inputs at D 64 / 128 on an sm_90 device. One warpgroup per CTA (64 query rows, the
// same fragment map as KFwd's four warps); the own chunk runs KFwd's mma.sync code unchanged. Per
// earlier chunk cj = ci-1 .. 0, with X (= the transformed queries) in f32 registers:
//   S = X·K~ᵀ                m64n64k16 wgmmas, X as register A fragments (input dtype), K~ K-major
//   online softmax           KFwd::softmax_step on the accumulators
//   O += P·V                 m64nDk16, P as register fragments, V read MN-major
//   XW = X·Wᵀ; X -= XW·U     the walk back: m64n64k16 (X as f16 fragments) then m64nDk16 (−XW as
//                            f16 fragments, U read MN-major) accumulating into X
// The chunk's K~, V, W and U lie in 128-byte swizzled panels (sw128_elem) written by cp.async:
// two K~ V slots and one W U slot (KFwd's split pipeline: K~ V of chunk cj land while chunk cj + 1
// is walked, its W U while its scores run).
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
#include "cuda/attn/sm90/wgmma_products.cuh"
#else
#define FATTN_PATH_FWD_SM90_BUILT 0
#endif

namespace fattn::pathk {

// Whether the (dtype, kernel head dim) forward launches KFwdSm90 on an sm_90 device.
constexpr bool fwd_sm90_at(size_t in_bytes, int d) {
    return FATTN_PATH_FWD_SM90_BUILT && in_bytes == 2 && (d == 128 || (d == 64 && FATTN_PATH_FWD_SM90 == 2));
}

}  // namespace fattn::pathk

#if FATTN_PATH_FWD_SM90_BUILT
namespace fattn::pathk {

template <typename Tin, int D> struct KFwdSm90 {
    static_assert(sizeof(Tin) == 2 && (D == 64 || D == 128), "16-bit inputs at D 64 or 128");
    using Base = KFwd<Tin, D>;
    using Tw = walk_t<Tin>;
    static constexpr int kThreads = 128, NX = D / 8, NK = kC / 16, ND = D / 16;
    static constexpr uint32_t PANEL = kC * 128;  // bytes from one [64, 64] panel of a tile to the next
    static constexpr size_t TILE = (D / 64) * size_t(PANEL);
    // A K~ V slot: K~, V, the keys' gate sums (kC floats), padded to keep the next slot 1024-aligned
    static constexpr size_t KVB = 2 * TILE + 1024;
    static constexpr size_t SLOTS = 2 * KVB + 2 * TILE;  // two K~ V slots, one W U slot
    static constexpr size_t REG = SLOTS > Base::OWN ? SLOTS : Base::OWN;
    // 1024 bytes of slack to align the base (the swizzle repeats per 1024-byte 8-row group), the
    // query rows' gate sums after the region
    static constexpr size_t smem() { return 1024 + REG + 256; }

    PK_DEV static void issue_kv(const PathDev &p, const SeqInfo &sq, int hq, int h, int64_t cj, char *buf) {
        Tin *sKt = reinterpret_cast<Tin *>(buf), *sV = reinterpret_cast<Tin *>(buf + TILE);
        float *gk = reinterpret_cast<float *>(buf + 2 * TILE);
        const int64_t row = sq.row0 + cj * kC, t0 = sq.begin + cj * kC;
        load_tile_sw<Tin, D, kThreads>(sKt, static_cast<const Tin *>(p.kt) + (row * p.h + h) * D, int64_t(p.h) * D, kC, D, true);
        load_tile_sw<Tin, D, kThreads>(sV, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + t0 * p.v_ss + h * p.v_sh, p.v_ss,
                                       kC, p.V, p.vec_v);
        for (int a = tid(); a < kC; a += kThreads) gk[a] = p.has_gate ? p.gsum[(row + a) * p.hq + hq] : 0.f;
    }
    PK_DEV static void issue_wu(const PathDev &p, const SeqInfo &sq, int h, int64_t cj, char *buf) {
        const int64_t row = sq.row0 + cj * kC, ws = int64_t(p.h) * D;
        load_tile_sw<Tw, D, kThreads>(reinterpret_cast<Tw *>(buf), static_cast<const Tw *>(p.ww) + (row * p.h + h) * D, ws, kC, D,
                                      true);
        load_tile_sw<Tw, D, kThreads>(reinterpret_cast<Tw *>(buf + TILE), static_cast<const Tw *>(p.uw) + (row * p.h + h) * D, ws,
                                      kC, D, true);
    }
    // This thread's cp.async data (and plain stores) visible to every thread's wgmma.
    PK_DEV static void landed_sync() {
#if FATTN_PATH_WGMMA_PASS
        cuda::sm90::fence_proxy_async_smem();
#endif
        sync();
    }

    PK_DEV static void run(const PathDev &p, char *smem_raw) {
#if FATTN_PATH_WGMMA_PASS
        using namespace fattn::cuda;
        char *smem = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
        const ChunkItem ck = chunk_item(p, true);
        const SeqInfo &sq = ck.sq;
        const int64_t ci = ck.ci;
        const int hq = ck.hq, h = ck.h;
        const int r0 = 16 * warp_id();
        float *gq = reinterpret_cast<float *>(smem + REG);
        float X[NX][4], O[NX][4], m[2], l[2];
        Base::own_chunk(p, ck, smem, gq, [] { cp_wait<0>(); }, X, O, m, l);

        // ---- earlier chunks, newest first: slots KV0, KV1 at 0 and KVB, W U at 2 KVB ----
        char *const wu = smem + 2 * KVB;
        const uint32_t w_base = sm90::saddr(wu), u_base = w_base + uint32_t(TILE);
        if (ci > 0) {
            issue_kv(p, sq, hq, h, ci - 1, smem);
            cp_commit();
        }
        for (int64_t cj = ci - 1, s = 0; cj >= 0; --cj, ++s) {
            char *cur = smem + (s & 1) * KVB;
            if (cj > 0) {  // in flight: K~ V (cj), then W U (cj), K~ V (cj - 1)
                issue_wu(p, sq, h, cj, wu);
                cp_commit();
                issue_kv(p, sq, hq, h, cj - 1, smem + ((s + 1) & 1) * KVB);
                cp_commit();
                cp_wait<2>();
            } else {
                cp_wait<0>();
            }
            landed_sync();
            const uint32_t k_base = sm90::saddr(cur), v_base = k_base + uint32_t(TILE);
            const float *gk = reinterpret_cast<const float *>(cur + 2 * TILE);
            float S[8][4];
            {
                uint32_t xa[ND][4];
                for (int kk = 0; kk < ND; ++kk) Frag<Tin>::a_acc(xa[kk], X, kk, 1.f);
                sm90::wgmma_fence();
                attn::sm90_rs_product_kmajor<Tin, D, kC>(wg_acc(S), xa, k_base, PANEL, false);
                sm90::wgmma_commit();
                sm90::wgmma_wait<0>();
                sm90::reg_fence(wg_acc(S));
            }
            Base::softmax_step(p, r0, gq, gk, S, O, m, l);
            {
                uint32_t pa[NK][4];
                for (int kk = 0; kk < NK; ++kk) Frag<Tin>::a_acc(pa[kk], S, kk, 1.f);
                sm90::wgmma_fence();
                attn::sm90_rs_product<Tin, D, NK>(wg_acc(O), pa, 0u, v_base, PANEL);
                sm90::wgmma_commit();
                if (cj > 0) cp_wait<1>();  // W U (cj) landed (this thread's copies)
                sm90::wgmma_wait<0>();
                sm90::reg_fence(wg_acc(O));
            }
            if (cj > 0) {
                landed_sync();
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
            sync();  // every wgmma of this chunk done before the next issue overwrites its slots
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
