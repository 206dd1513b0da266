// bwd_dkv_sm90.cuh — KDkv (bwd_dkv.cuh) on Hopper's wgmma: the same products in the same order,
// the same outputs, for 16-bit inputs at D 64 / 128 on an sm_90 device. Two warpgroups per CTA,
// each with its own 64 keys (chunks ci and ci + 1 of a segment), per query chunk:
//   Sᵀ = K^·Qhᵀ, dPᵀ = V·dOᵀ       m64n64k16 wgmmas, both operands K-major in shared memory
//   Pᵀ, dSᵀ (and dG) on the accumulators, exactly as KDkv's loop (same fragment map)
//   dV += Pᵀ·dO, dK^ += dSᵀ·Qh     m64nDk16 wgmmas, Pᵀ / dSᵀ as register A fragments, dO and Qh
//                                  read MN-major
// Tiles are stored as the sm90 softmax kernels store theirs (ptx.cuh: [64, D] as D/64 panels of
// [64, 64] with the 128-byte swizzle), written by cp.async rather than TMA: the history's rows
// are cells of a packed layout, not a tensor a map describes. The query stages form a ring
// (FATTN_PATH_DKV_NS stages, below) that both warpgroups read.
//
// Built when nvcc compiles with FATTN_HAVE_SM90 (the build has sm_90a code); bwd.cuh then launches
// it on sm_90 devices (CudaLauncher::sm90) at the kernel head dims FATTN_PATH_DKV_SM90 names:
//   1 (default): D 64 and 128 (in two warpgroups: on an H100, 2026-12-07, A/B of
//      fattn-bench path --gate 0 --reps 10, two rounds, both builds in one run: T4096 H32 D64
//      4.446 / 4.398 ms against 4.496 / 4.508, T8192 12.670 / 12.752 against 13.044 / 13.087,
//      T4096 H8 HQ32 3.922 / 3.918 against 4.047 / 4.040, the varlen pack 7.680 / 7.653 against
//      7.841 / 7.825);
//   2: D 128 only (its one-warpgroup form on the H200, 2026-12-05, lost at D 64: 4.891 / 4.870
//      against KDkv's 4.777 / 4.807 at T4096 H32);
//   0: never.
// The CPU emulation runs it too (emu.h's wgmma: both emulation libraries, tests/emu); on the GPU
// the parity cases (fattn-test -p path: path/dense_T640_K128_gate_bf16, path/dense_T1100_K128_bf16).
#pragma once

#include "cuda/path/bwd_dkv.cuh"

#ifndef FATTN_PATH_DKV_SM90
#define FATTN_PATH_DKV_SM90 1
#endif
// Two warpgroups, 128 keys, sharing each query stage (FLA's dK/dV kernel at D 128 takes 128 keys in
// 8 warps): on an H100 (2026-12-07, tree 4cdd74b, T4096 H16 D128) this kernel took 416 us against
// 475 with one warpgroup of 64 keys and two stages, fwd+bwd 4.177 / 4.197 ms against 4.257 / 4.264
// (docs/PERF.md; the one-warpgroup form is in git history, tree 4e94606). The query ring's stages:
#ifndef FATTN_PATH_DKV_NS
#define FATTN_PATH_DKV_NS 3
#endif
// Also built by the CPU emulation, which emulates wgmma (ptx.cuh).
#if FATTN_PATH_WGMMA_BUILD && FATTN_PATH_DKV_SM90
#define FATTN_PATH_DKV_SM90_BUILT 1
#include "cuda/attn/sm90/wgmma_products.cuh"
#else
#define FATTN_PATH_DKV_SM90_BUILT 0
#endif

namespace fattn::pathk {

// Whether the (dtype, kernel head dim) backward launches KDkvSm90 on an sm_90 device.
constexpr bool dkv_sm90_at(size_t in_bytes, int d) {
    return wgmma_at(FATTN_PATH_DKV_SM90_BUILT, FATTN_PATH_DKV_SM90 == 1, in_bytes, d);
}

}  // namespace fattn::pathk

#if FATTN_PATH_DKV_SM90_BUILT
namespace fattn::pathk {

template <typename Tin, int D> struct KDkvSm90 {
    static_assert(sizeof(Tin) == 2 && (D == 64 || D == 128), "16-bit inputs at D 64 or 128");
    // NWG warpgroups, each with its own 64 keys (chunks ci, ci + 1 of the CTA's item), share each
    // query chunk's stage; NS stages in the ring (FATTN_PATH_DKV_NS)
    static constexpr int NWG = 2, NS = FATTN_PATH_DKV_NS;
    static_assert(kNcs % NWG == 0, "an item's chunks lie in one segment");
    static_assert(NS >= 2, "a ring of two stages or more");
    static constexpr int kThreads = 128 * NWG, NP = D / 64, NQ = kC / 8, NK = kC / 16;
    static constexpr size_t PANEL = size_t(kC) * 128, TILE = NP * PANEL;  // bytes
    static constexpr size_t ROWS = 4 * kC * 4;                            // lse2, delta, G (+1 spare)
    static constexpr size_t STAGE = 2 * TILE + ROWS;                      // Qh, dO, rows: 1024-aligned
    // 1024 bytes of slack to align the base (the swizzle repeats per 1024-byte 8-row group)
    static constexpr size_t smem() { return 1024 + NWG * 2 * TILE + NS * STAGE + NWG * kC * 4; }

    PK_DEV static void load_sw(Tin *s, const Tin *g, int64_t gstride, int rows_valid, int cols_valid, bool vec) {
        load_tile_sw<Tin, D, kThreads>(s, g, gstride, rows_valid, cols_valid, vec);
    }

    PK_DEV static void issue(const PathDev &p, const SeqInfo &sq, int hq, int64_t ci, int64_t rcol, char *buf) {
        Tin *sQh = reinterpret_cast<Tin *>(buf), *sdO = reinterpret_cast<Tin *>(buf + TILE);
        const int64_t c0 = ci * kC, nq = sq.len - c0 < kC ? sq.len - c0 : kC, t0 = sq.begin + c0;
        const int64_t hstride = (p.hist_rect ? p.rect_cols : 1) * p.hq * p.hk;
        load_sw(sQh, static_cast<const Tin *>(p.hist) + (hist_cell(p, sq, c0, rcol) * p.hq + hq) * p.hk, hstride, int(nq), p.hk, true);
        load_sw(sdO, static_cast<const Tin *>(p.dout) + sq.b * p.do_sb + t0 * p.do_ss + hq * p.do_sh, p.do_ss, int(nq), p.V,
                p.vec_do);
        // the rows by the second warpgroup's threads, so the first one's wgmmas do not wait for
        // their loads (issued after the chunk's barrier)
        if (warp_id() >= 4) dkv_rows<128>(p, sq, hq, c0, nq, reinterpret_cast<float *>(buf + 2 * TILE), tid() - 128);
    }

#if FATTN_PATH_WGMMA_PASS
    // One query chunk (ci, its stage at cur) for this warpgroup's keys (K^ and V panels at k_base,
    // v_base; gate sums gk; warp rows r0 of its 64).
    PK_DEV static void chunk(const PathDev &p, const SeqInfo &sq, int64_t ci, const char *cur, uint32_t k_base,
                             uint32_t v_base, int r0, const float *gk, float (&dKh)[D / 8][4], float (&dV)[D / 8][4],
                             float (&dg)[2]) {
        using namespace fattn::cuda;
        const uint32_t q_base = sm90::saddr(cur), do_base = sm90::saddr(cur + TILE);
        const float *lse2 = reinterpret_cast<const float *>(cur + 2 * TILE);
        const int nq = int(sq.len - ci * kC < kC ? sq.len - ci * kC : kC);
        float St[NQ][4], dPt[NQ][4];
        sm90::wgmma_fence();
        attn::sm90_ss_product<Tin, D, kC>(wg_acc(St), k_base, uint32_t(PANEL), q_base, uint32_t(PANEL));
        attn::sm90_ss_product<Tin, D, kC>(wg_acc(dPt), v_base, uint32_t(PANEL), do_base, uint32_t(PANEL));
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(wg_acc(St));
        sm90::reg_fence(wg_acc(dPt));
        dkv_p_ds(p, r0, nq, lse2, gk, St, dPt, dg);
        // Pᵀ and dSᵀ as A fragments: k-step kk (16 queries) = n-blocks 2kk, 2kk + 1
        uint32_t pa[NK][4], sa[NK][4];
        for (int kk = 0; kk < NK; ++kk) {
            Frag<Tin>::a_acc(pa[kk], St, kk, 1.f);
            Frag<Tin>::a_acc(sa[kk], dPt, kk, 1.f);
        }
        sm90::wgmma_fence();
        attn::sm90_rs_product<Tin, D, NK>(wg_acc(dV), pa, 0u, do_base, uint32_t(PANEL));
        attn::sm90_rs_product<Tin, D, NK>(wg_acc(dKh), sa, 0u, q_base, uint32_t(PANEL));
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(wg_acc(dV));
        sm90::reg_fence(wg_acc(dKh));
    }
#endif

#if FATTN_PATH_WGMMA_PASS
    // Two warpgroups (128 keys), NS stages.
    PK_DEV static void run_wgmma(const PathDev &p, char *smem_raw) {
        static_assert(smem() <= 227 * 1024, "an H100 / H200 CTA's shared memory");
        using namespace fattn::cuda;
        char *smem = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
        const ChunkItem ck = chunk_item(p, false);
        if (ck.ci % NWG) return;  // chunk ci - 1's CTA takes it
        const SeqInfo &sq = ck.sq;
        const int64_t rp = ck.ci / kNcs, nc = ceil_div(sq.len, kC), ns = ceil_div(sq.len, kS);
        const int hq = ck.hq, h = ck.h, wg = warp_id() / 4;
        const int r0 = 16 * (warp_id() % 4);
        // this warpgroup's chunk: its first key and key count (0 past the sequence's end)
        const int64_t k0 = ck.c0 + int64_t(kC) * wg, krow = sq.row0 + k0;
        const int nk = int(sq.len - k0 < kC ? (sq.len > k0 ? sq.len - k0 : 0) : kC);
        char *kv = smem + size_t(wg) * 2 * TILE;
        char *stg0 = smem + NWG * 2 * TILE;  // stage k at stg0 + k * STAGE (no array: it would live in local memory)
        float *gk = reinterpret_cast<float *>(smem + NWG * 2 * TILE + NS * STAGE);
        float dKh[D / 8][4], dV[D / 8][4], dg[2] = {0.f, 0.f};
        zero_acc(dKh);
        zero_acc(dV);
        if (rp < ns - 1) {  // keys of a segment before the last: every chunk of the item is whole
            const int64_t krow0 = sq.row0 + ck.c0;
            for (int w = 0; w < NWG; ++w) {
                Tin *sK = reinterpret_cast<Tin *>(smem + size_t(w) * 2 * TILE), *sV = sK + TILE / sizeof(Tin);
                load_sw(sK, static_cast<const Tin *>(p.kh) + ((krow0 + w * kC) * p.h + h) * D, int64_t(p.h) * D, kC, D, true);
                load_sw(sV, static_cast<const Tin *>(p.v) + sq.b * p.v_sb + (sq.begin + ck.c0 + w * kC) * p.v_ss + h * p.v_sh,
                        p.v_ss, kC, p.V, p.vec_v);
            }
            for (int b = tid(); b < NWG * kC; b += kThreads) gk[b] = p.has_gate ? p.gsum[(krow0 + b) * p.hq + hq] : 0.f;
            const int64_t cfirst = (rp + 1) * kNcs;
            issue(p, sq, hq, cfirst, rp + 1, stg0);
            cp_commit();
            const uint32_t k_base = sm90::saddr(kv), v_base = sm90::saddr(kv + TILE);
            // NS - 1 stages in flight; at chunk s the stage of chunk s + NS - 1 is issued into the
            // slot chunk s - 1 used, once every thread has passed this chunk's barrier (so is done
            // with it: each warpgroup waits for its wgmmas before leaving a chunk)
            for (int k = 1; k < NS - 1; ++k) {
                if (cfirst + k < nc) issue(p, sq, hq, cfirst + k, rp + 1, stg0 + k * STAGE);
                cp_commit();
            }
            int slot = 0;
            for (int64_t ci = cfirst; ci < nc; ++ci) {
                cp_wait<NS - 2>();
                sm90::fence_proxy_async_smem();  // this thread's cp.async data, before wgmma reads it
                sync();
                const int fill = slot == 0 ? NS - 1 : slot - 1;
                if (ci + NS - 1 < nc) issue(p, sq, hq, ci + NS - 1, rp + 1, stg0 + fill * STAGE);
                cp_commit();
                chunk(p, sq, ci, stg0 + slot * STAGE, k_base, v_base, r0, gk + kC * wg, dKh, dV, dg);
                slot = slot == NS - 1 ? 0 : slot + 1;
            }
        }
        dkv_store<D>(p, krow, hq, r0, nk, rp < ns - 1, dg, dV, dKh);
    }
#endif

    PK_DEV static void run(const PathDev &p, char *smem_raw) {
#if FATTN_PATH_WGMMA_PASS
        run_wgmma(p, smem_raw);
#else
        (void)p, (void)smem_raw;
#if defined(__CUDA_ARCH__)
        __trap();  // launched where no sm_90a code was built: fail loudly (launch_dkv never does)
#endif
#endif
    }
};

}  // namespace fattn::pathk
#endif
