// tiles.h — tile shapes of the fused CUDA attention kernels, as constexpr functions with the reason
// for each constant, and the shared-memory bytes each kernel needs (host + device header: the
// selection function checks the device's opt-in limit with the same numbers the launcher uses).
#pragma once

#include <cstddef>
#include <type_traits>

namespace fattn::cuda::attn {

// ---- tensor-core (mma.sync) kernels, templated on the element type and head-dim bucket DB ----
// Buckets 64, 128 and 256 (head dims up to the bucket; padded columns are zero-filled and masked
// on store). f(std::integral_constant<int, DB>) for db's bucket: the launchers' dispatch.
template <class F> inline auto mma_bucket(int db, F &&f) {
    return db == 64    ? f(std::integral_constant<int, 64>{})
           : db == 128 ? f(std::integral_constant<int, 128>{})
                       : f(std::integral_constant<int, 256>{});
}
// dK/dV: 4 warps, one warp owns 16 key rows (the M of m16n8k16); 2 CTAs per SM.
constexpr int mma_threads() { return 128; }
// Forward and dQ: 4 warps × 16 query rows. 8 warps (128 rows sharing each K/V tile) was measured
// on the H200 (bf16 D128 S4096 B4 H16): fwd 2.78 -> 2.67 ms but D64 fwd 3.04 -> 3.47 ms, fwd+bwd
// 11.50 -> 11.83 ms and the ±256 band bias 1.59 -> 1.71 ms (coarser tile skipping), so 4.
constexpr int mma_fwd_warps(size_t) { return 4; }
// Forward: 16-row m-tiles per warp. Every B fragment (K for S, V for O) loaded from shared memory
// feeds MT m-tiles' mma, so ldmatrix traffic per mma halves with MT = 2 (FlashAttention-2's
// 128-row tile with 4 warps): at MT = 1 the forward is bound by shared-memory bandwidth (0.56
// ldmatrix.x4 per mma; ~4 cycles each against ~1.5 per mma.sync). Not for tf32 at D128: its
// 128-row Q tile plus K/V would leave one CTA per SM (135 KB of shared memory), too few warps to
// hide the loads, and the accumulators spill. Head-dim bucket 256: one m-tile (the O accumulators
// alone take 128 registers).
constexpr int mma_fwd_mt(int db, size_t es) { return (es == 4 && db > 64) || db > 128 ? 1 : 2; }
constexpr int mma_fwd_bm(int db, size_t es) { return 16 * mma_fwd_warps(es) * mma_fwd_mt(db, es); }
// dQ: m-tiles per warp and keys per step. MT = 2 shares each K/V fragment between two m-tiles as
// in the forward; its S, dP (2 × 2 × 16 registers) and dQ accumulators fit with 32 keys per step.
// H200, bf16 D128 S4096 B4 H16 fwd+bwd: MT 1 (64 keys) 11.28 ms, MT 2 (32 keys) 10.77 ms.
// Bucket 256: one m-tile and 32 keys (16 with tf32, so the tiles fit in shared memory): the dQ
// accumulators take 128 registers.
constexpr int mma_dq_mt(int db, size_t es) { return es == 4 || db > 128 ? 1 : 2; }
constexpr int mma_dq_bm(int db, size_t es) { return 16 * mma_fwd_warps(es) * mma_dq_mt(db, es); }
constexpr int mma_dq_bn(int db, size_t es) {
    return db > 128 ? (es == 4 ? 16 : 32) : mma_dq_mt(db, es) == 2 ? 32 : (es == 4 ? 32 : 64);
}
// Forward keys per step: 64 (tf32: 32, so two CTAs' tiles fit in shared memory; one CTA of 4
// warps per SM cannot hide the load latency). At D128 with MT = 2 the O and S accumulators
// (128 + 64 registers) spill ~90 B, yet 64 keys ran faster than 32 on the H200 (bf16 D128 S4096
// B4 H16 fwd 1.98 vs 2.45 ms: half the barriers and cp.async waits per key).
// Bucket 256: half that (32; tf32 16), so a 16-bit forward fits an A100's 163 KiB of shared
// memory (and two CTAs an H200 SM) and its S accumulators leave room for O's 128 registers.
constexpr int mma_fwd_bn(int db, size_t es) { return db > 128 ? (es == 4 ? 16 : 32) : es == 4 ? 32 : 64; }
// dK/dV: 64 keys per CTA (4 warps × 16 key rows), each warp owns its rows' dK and dV.
constexpr int mma_bwd_bn() { return 64; }
// dK/dV: query tile; at DB 128 the dK+dV accumulators take 128 registers, so 32 query columns
// keep Sᵀ and dPᵀ at 16 registers each and the kernel under 255 registers without spills.
// With tf32 at DB 128, 16 query columns keep two CTAs' tiles within shared memory. (Staging 64
// rows and computing them in two 32-column sub-steps spilled 300-500 B: not taken.)
constexpr int mma_bwd_bm(int db, size_t es) { return db > 64 ? (es == 4 ? 16 : 32) : 64; }
// dK/dV output columns per CTA: at bucket 256 the dK+dV accumulators of all 256 columns would take
// 256 registers, so a CTA owns 128 of them (two CTAs per key tile, each recomputing Sᵀ and dPᵀ
// over the full head dim: 1.5× the mma work of one pass, no cross-CTA reduction).
constexpr int mma_dkdv_cols(int db) { return db > 128 ? 128 : db; }
constexpr int mma_dkdv_splits(int db) { return db / mma_dkdv_cols(db); }
// Shared-memory row stride in elements: +16 bytes shifts each row by 4 banks, so the 8 row
// addresses of one ldmatrix (2-byte types) or the 8 g-rows × 4 t-columns of a tf32 fragment
// load hit distinct banks (no conflicts, no swizzle). es = element size in bytes.
constexpr int mma_stride(int db, size_t es) { return db + int(16 / es); }

constexpr size_t mma_fwd_smem(int db, size_t es) {  // Q + double-buffered K and V; bias ceilings
    return size_t(mma_fwd_bm(db, es) + 4 * mma_fwd_bn(db, es)) * mma_stride(db, es) * es +
           size_t(mma_fwd_bm(db, es)) * sizeof(float);
}
constexpr size_t mma_dq_smem(int db, size_t es) {  // Q, dO + double-buffered K and V
    return size_t(2 * mma_dq_bm(db, es) + 4 * mma_dq_bn(db, es)) * mma_stride(db, es) * es;
}
constexpr size_t mma_dkdv_smem(int db, size_t es) {  // K, V + double-buffered Q, dO; lse, delta
    return size_t(2 * mma_bwd_bn() + 4 * mma_bwd_bm(db, es)) * mma_stride(db, es) * es +
           size_t(4 * mma_bwd_bm(db, es)) * sizeof(float);
}

// Bias gradient (mma_dbias_kernel): a CTA owns a 64 × 64 tile of dbias (or, with the bias broadcast
// over queries, a 64-key column of it) and recomputes S and dP for every (batch, head, query tile)
// that sums into it; 4 warps × 16 rows, Q, dO, K, V single-buffered.
// tf32 at bucket 256: 32 keys, so the four tiles fit in shared memory.
constexpr int mma_dbias_bm() { return 64; }
constexpr int mma_dbias_bn(int db, size_t es) { return es == 4 && db > 128 ? 32 : 64; }
constexpr size_t mma_dbias_smem(int db, size_t es) {
    return size_t(2 * mma_dbias_bm() + 2 * mma_dbias_bn(db, es)) * mma_stride(db, es) * es;
}

// ---- strict-f32 scalar kernels, templated on DB (64, 128 or 256) ----
constexpr int sc_threads() { return 128; }
// 16 rows per CTA: 8 threads per row (128 threads), each owning DB/8 output columns.
constexpr int sc_rows() { return 16; }
// Columns of the other operand per step: 4 per thread at DB <= 128; 2 at DB 256 so that the
// shared tiles fit in 64 KiB (sm_75's opt-in limit).
constexpr int sc_cols(int db) { return db > 128 ? 16 : 32; }
// +1 float: row-strided reads of 8 lanes fall in different banks.
constexpr int sc_stride(int db) { return db + 1; }
// ---- sm_90a forward (sm90/fwd_kernel.cuh), templated on the element size es (2: bf16/f16, 4: f32
// inputs on tf32 wgmma) ----
// 128 query rows (two consumer warpgroups of wgmma's M = 64) × BN keys per step; Q once and a
// 2-stage ring of K and V, each tile in panels of 128-byte rows (64 16-bit or 32 f32 columns),
// + barriers + 1 KB of slack to align the panels to the 1024-byte swizzle atom. 16-bit: 128 keys,
// 160 KB at D128, 81 KB at D64. tf32 at D128: 64 keys, as the consumers then hold S (32 regs),
// the previous step's P fragments (32: one tf32 per register) and O (64) at once, and Q (64 KB)
// plus two stages of K and Vᵀ (64 KB each) fill 193 KB; at D64 128 keys, 161 KB.
constexpr int sm90_fwd_bm() { return 128; }
// FATTN_SM90_D256 (default 1): the 16-bit sm90 kernels also at D 256 (head dims 136-256): the
// forward with 64 keys per step (O alone takes 128 registers), 192 KB; the dK/dV kernel with
// 64-key CTAs whose two consumer warpgroups each own half of dK and dV's columns, and dQ with
// 32-key steps (below). bf16 D256 S4096 B2 H16 fwd+bwd 5.15 ms against the portable bucket 256's
// 17.12 (docs/PERF.md). CMake's FATTN_SM90_D256=OFF (both the host selection and the kernels)
// leaves D > 128 to the portable kernels (the emulation's fattn_emu_alt library is built so; its
// D 256 cases skip).
#ifndef FATTN_SM90_D256
#define FATTN_SM90_D256 1
#endif
// FATTN_SM90_TF32_PAD (default 1; CXX flags: selection is host code): f32 inputs at prec TF32 with
// any D = Dv that is a multiple of 4 up to 128 on the sm90 tf32 kernels of bucket 64 or 128 (q, k,
// v and dout read through TMA with zeros past D; the pre-pass's copies the bucket's width with
// zeros past D: stage_tf32.cu), not only D 64 and 128. H100, 2026-12-06: f32 D96 S4096 B2 H16
// fwd+bwd 16.9 -> 6.18 ms against the portable MMA_TF32 kernels (docs/PERF.md). 0 leaves such
// head dims to MMA_TF32 (the emulation's fattn_emu_alt library is built so).
#ifndef FATTN_SM90_TF32_PAD
#define FATTN_SM90_TF32_PAD 1
#endif
// -DFATTN_SM90_PINGPONG=1 (CUDA flags): the forward's two consumer warpgroups take turns at the
// tensor cores (FlashAttention-3's schedule, fwd_kernel.cuh): a warpgroup issues its S and P·V
// products only in its turn and then hands the turn over, so that one's softmax runs under the
// other's products. Off: on an H100 (2026-12-06) within 1% at D64 and up to 2.6% slower at D128
// (docs/EXPERIMENTS.md); kept as an A/B switch for the H200, and run by the emulation (the
// fattn_emu_alt library).
#ifndef FATTN_SM90_PINGPONG
#define FATTN_SM90_PINGPONG 0
#endif
// -DFATTN_SM90_DKDV_PIPE=N (CUDA flags): the 16-bit dK/dV kernel (unfused, D <= 128) issues the
// next item's Sᵀ and dPᵀ products right behind this item's dV and dK products, before waiting for
// them (bwd_dkdv_kernel.cuh), so a consumer warpgroup's tensor-core work runs back to back: N = 1
// at D64, 2 at D64 and D128 (whose consumers have no registers to spare: an A/B build). 0 (default):
// each item's products waited for before the next item's.
#ifndef FATTN_SM90_DKDV_PIPE
#define FATTN_SM90_DKDV_PIPE 0
#endif
// -DFATTN_SM90_TF32_ROUND=0 (CUDA flags): the tf32 backward's producer warps leave the landed
// stages of q / dout (dK/dV) and k / v (dQ) unrounded (sm90_round_stage_tf32, fwd_kernel.cuh), so
// wgmma truncates them: a measurement build only (the parity bars were not set for truncation),
// which prices the rounding: on an H100 (2026-12-06) B2 H16 S4096 fwd+bwd 5.43 against 6.27 ms at
// D128 (13%), 3.70 against 3.84 at D64 (docs/PERF.md).
#ifndef FATTN_SM90_TF32_ROUND
#define FATTN_SM90_TF32_ROUND 1
#endif
constexpr int sm90_fwd_bn(int d = 128, size_t es = 2) { return (es == 4 && d > 64) || d > 128 ? 64 : 128; }
// Ring depths (K/V stages here, K/V in the dQ kernel, Q/dO rows in the dK/dV kernel) are per head
// dim and element size so that each can be measured on its own: 2 everywhere by default. The
// 16-bit D64 kernels use a third of the shared memory: -DFATTN_SM90_RING64=N gives their three
// rings N stages (an A/B switch, checked by the emulation at 3: the fattn_emu_alt library; the
// forward takes 147 KB at 4, dQ 164 KB, dK/dV 102 KB). 3 ran 2-3% slower at D64 on an H100
// (2026-12-06, docs/EXPERIMENTS.md).
#ifndef FATTN_SM90_RING64
#define FATTN_SM90_RING64 2
#endif
constexpr int sm90_ring(int d, size_t es) { return es == 2 && d <= 64 ? FATTN_SM90_RING64 : 2; }
constexpr int sm90_fwd_stages(int d, size_t es) { return sm90_ring(d, es); }
// The mbarriers after a kernel's tiles: n of 8 bytes in a 128-byte area, or as many such areas as
// they need (deeper rings: the forward has 1 + 4·stages, dQ 1 + 3·stages, dK/dV 1 + 2·(stages + t_stages)).
constexpr size_t sm90_bar_bytes(int n) { return n * 8 <= 128 ? 128 : (size_t(n) * 8 + 127) / 128 * 128; }
constexpr size_t sm90_fwd_smem(int d, size_t es = 2) {
    return size_t(sm90_fwd_bm() + 2 * sm90_fwd_stages(d, es) * sm90_fwd_bn(d, es)) * size_t(d) * es +
           sm90_bar_bytes(1 + 4 * sm90_fwd_stages(d, es)) + 1024;
}

// ---- sm_90a dQ kernel (sm90/bwd_dq_kernel.cuh) ----
// 128 query rows × BN keys per step; Q and dO once, a 2-stage ring of K and V tiles (with tf32
// also Kᵀ: the B operand of dQ += dS·K must be K-major). Keys per step: S, dP and dQ stay in
// registers (2·BN/2 + D/2): 16-bit 64 at D128, 128 at D64. tf32 (4-byte elements): 32 at D128
// (Q + dO 128 KB, three 16 KB tiles per stage: 225 KB in all) and 64 at D64 (161 KB).
constexpr int sm90_dq_bm() { return 128; }
// D256 (16-bit, FATTN_SM90_D256): 32 keys per step, so that dQ's 128 registers leave room for S
// and dP, and two stages of K and V beside Q and dO (128 KB) fit: 193 KB.
constexpr int sm90_dq_bn(int d, size_t es = 2) {
    return es == 4 ? (d > 64 ? 32 : 64) : (d > 128 ? 32 : d > 64 ? 64 : 128);
}
constexpr int sm90_dq_stages(int d, size_t es) { return sm90_ring(d, es); }
constexpr size_t sm90_dq_smem(int d, size_t es = 2) {
    return (size_t(2 * sm90_dq_bm()) + size_t(sm90_dq_stages(d, es) * (es == 4 ? 3 : 2) * sm90_dq_bn(d, es))) * size_t(d) * es +
           sm90_bar_bytes(1 + (es == 4 ? 5 : 3) * sm90_dq_stages(d, es)) + 1024;  // tf32: + readyK, readyV
}

// ---- sm_90a dK/dV kernel (sm90/bwd_dkdv_kernel.cuh) ----
// 128 keys per CTA (two consumer warpgroups × 64; tf32 with one warpgroup of 64 keys ran L2-bound:
// every item's four query-side tiles then serve half the keys; H200, 2026-12-02). Query rows per item:
// 64 (at D64, 128 rows spilled ~250 B: Sᵀ, dPᵀ and their fragments double while dK + dV only
// halve); tf32 32. Two row stages (Q, dO [bm, D] and 4 row arrays of bm floats, 2 with the fused dQ); tf32 also
// stages Qᵀ, dOᵀ (the same bytes as Q, dO), one stage at D128 (K, V of 128 keys take 128 KB:
// 231.5 KB in all), two at D64; 16-bit reads Q, dO MN-major from the row stage instead.
// D256 (16-bit, FATTN_SM90_D256): dK + dV of 64 keys × 256 columns would take 256 registers a
// thread in one warpgroup, so a CTA takes 64 keys and each consumer warpgroup owns 128 of the
// columns of dK and dV, computing the item's Sᵀ and dPᵀ over all 256 itself (1.5× the products of
// one pass, no exchange between the warpgroups): the registers of D128 (dK + dV 128, Sᵀ + dPᵀ
// 64); K and V 64 KB, two row stages of Q and dO 128 KB: 195 KB.
constexpr int sm90_dkdv_bn(int d = 128) { return d > 128 ? 64 : 128; }
constexpr bool sm90_dkdv_split(int d) { return d > 128; }
constexpr int sm90_dkdv_cols(int d) { return sm90_dkdv_split(d) ? d / 2 : d; }  // dK/dV columns per consumer
constexpr int sm90_dkdv_bm(size_t es = 2) { return es == 4 ? 32 : 64; }
constexpr int sm90_dkdv_stages(int d, size_t es) { return sm90_ring(d, es); }
constexpr int sm90_dkdv_t_stages(int d, size_t es = 2) { return es == 4 ? (d > 64 ? 1 : 2) : 0; }
// -DFATTN_SM90_DQ_FUSED=1 (CUDA and CXX flags: the workspace is host code): the 16-bit backward
// without bias takes dQ = dS·K inside the dK/dV kernel (5 GEMM-sized products instead of 7, no dQ
// kernel), FlashAttention-3's deterministic scheme: each CTA stages its dQ tile in f32 in shared
// memory and a writer warp adds it to an f32 accumulator in the workspace, the CTAs of one query
// tile in a fixed order (a counter per tile; bwd_dkdv_kernel.cuh); a small kernel then scales and
// converts. Off: its earlier form (a row-major tile added one row per bulk copy) was 1.6-2.2x
// slower fwd+bwd on an H100 (2026-12-06, docs/EXPERIMENTS.md); this one is not yet timed; the
// emulation checks it (the fattn_emu_alt library). Extra shared memory: dS of the item in two buffers (two 64-key panels of
// [bm, 64] each) and the f32 dQ tile, [bm, d] in the wgmma accumulators' order (sm90_dqf_index:
// each thread's values of 8 columns as one float4, the warpgroup's 128 threads side by side, so
// the consumers' 16-byte stores fill whole bank rows and the writer adds the tile with one bulk
// copy to a tile of the same order in the workspace), in two buffers (at D128 they fit because a
// fused item's row stage keeps only lse and δ: the fused dQ takes no bias, so no lse' or ceiling).
// -DFATTN_SM90_DQ_FUSED=2: the same with the adds in whatever order the CTAs come, into a zeroed
// accumulator (a measurement build only, never a library: its dq is not bitwise repeatable), so
// that an A/B prices the order.
#ifndef FATTN_SM90_DQ_FUSED
#define FATTN_SM90_DQ_FUSED 0
#endif
// FATTN_SM90_DQF_LAG: 1 (default): the dQ writer releases a tile's counter once it has issued the
// next tile's add (its own add is then done: it waits for all but the newest bulk group), so it
// never waits on the add it has just issued; the consumers wait only for the buffer of the tile
// before, so a release one tile late does not hold them. With one buffer (FATTN_SM90_DQF_BUFS=1)
// it would: each CTA of a query tile's chain would run a tile behind the one before it, and the
// writer then waits for each add, as with 0.
#ifndef FATTN_SM90_DQF_LAG
#define FATTN_SM90_DQF_LAG 1
#endif
#ifndef FATTN_SM90_DQF_BUFS
#define FATTN_SM90_DQF_BUFS 2
#endif
constexpr int sm90_dqf_bufs() { return FATTN_SM90_DQF_BUFS; }
// Row arrays per stage of the dK/dV kernel: lse, δ, lse', ceiling; the fused dQ (no bias) keeps two.
constexpr int sm90_dkdv_row_arrays(bool fused_dq) { return fused_dq ? 2 : 4; }
constexpr size_t sm90_dqf_smem(int d) {
    return size_t(2 * 2 * sm90_dkdv_bm()) * 128 + size_t(sm90_dqf_bufs()) * sm90_dkdv_bm() * d * 4;
}
// Where element (r, c) of a fused-dQ tile [64 rows, d] lives, in floats from the tile's start:
// column block c / 64 (the consumer warpgroup that owns it at D128), then the accumulator
// register group j = (c % 64) / 8, then the thread of the warpgroup that holds it (m64nNk16's
// layout: warp r / 16, lane 4·(r % 8) + (c % 8) / 2), then its place k = 2·((r % 16) / 8) + c % 2
// among that thread's four values of the group.
constexpr int64_t sm90_dqf_index(int r, int c) {
    const int t = 32 * (r / 16) + 4 * (r % 8) + (c % 8) / 2;
    return ((int64_t(c / 64) * 8 + (c % 64) / 8) * 128 + t) * 4 + 2 * ((r % 16) / 8) + c % 2;
}
constexpr size_t sm90_dkdv_smem(int d, size_t es = 2, bool fused_dq = false) {
    return (size_t(2 * sm90_dkdv_bn(d)) + size_t(2 * (sm90_dkdv_stages(d, es) + sm90_dkdv_t_stages(d, es)) * sm90_dkdv_bm(es))) *
               size_t(d) * es +
           (fused_dq ? sm90_dqf_smem(d) : 0) + size_t(sm90_dkdv_stages(d, es)) * sm90_dkdv_row_arrays(fused_dq) * sm90_dkdv_bm(es) * 4 +
           sm90_bar_bytes(1 + 2 * (sm90_dkdv_stages(d, es) + sm90_dkdv_t_stages(d, es)) + (fused_dq ? 2 * sm90_dqf_bufs() : 0) +
                          (es == 4 ? sm90_dkdv_stages(d, es) : 0)) +
           1024;
}
// The unfused sm90 backward's larger kernel (selection: whether the device can run it).
constexpr size_t sm90_bwd_smem(int d, size_t es = 2) {
    return sm90_dq_smem(d, es) > sm90_dkdv_smem(d, es) ? sm90_dq_smem(d, es) : sm90_dkdv_smem(d, es);
}

constexpr size_t sc_fwd_smem(int db) {  // Q rows, one K-or-V tile, P
    return (size_t(sc_rows() + sc_cols(db)) * sc_stride(db) + size_t(sc_rows()) * sc_cols(db)) * 4;
}
constexpr size_t sc_dq_smem(int db) {  // Q, dO rows, one K-or-V tile, dS
    return (size_t(2 * sc_rows() + sc_cols(db)) * sc_stride(db) + size_t(sc_rows()) * sc_cols(db)) * 4;
}
constexpr size_t sc_dbias_smem(int db) {  // Q, dO rows, K and V tiles
    return size_t(2 * sc_rows() + 2 * sc_cols(db)) * sc_stride(db) * 4;
}
constexpr size_t sc_dkdv_smem(int db) {  // K, V rows, Q and dO tiles, P and dS, lse', delta, ceiling
    return (size_t(2 * sc_rows() + 2 * sc_cols(db)) * sc_stride(db) +
            size_t(2 * sc_rows()) * sc_cols(db) + size_t(3 * sc_cols(db))) * 4;
}

}  // namespace fattn::cuda::attn
