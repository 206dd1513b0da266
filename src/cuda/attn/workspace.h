// workspace.h — how the fused kernels carve the caller's workspace (host/device shared header).
//   [bias tile map]  one byte per (bias batch, bias head, 64-row block, 64-col block) of the packed
//                    [total_q, total_kv] plane: 0 = all -inf (skip), 1 = has values other than
//                    0 and -inf (read the bias), 2 = all exactly 0 (no bias read; common.cuh).
//                    Present only with a bias; filled by a pre-pass in fwd and again in bwd.
//   [ceilings]       with a bias: each row's largest allowed bias, f32 [map_nb, map_nh, total_q]
//                    (common.cuh: bias ceilings); filled by a pre-pass in fwd and again in bwd.
//   [delta]          bwd only: rowsum(dO∘O) as f32 [B_view, Hq, total_q] (same indexing as lse).
//   [lse_rel]        bwd with a bias: lse' = lse − ceiling, f32 [B_view, Hq, total_q].
//   [kr] [tr]        the sm90 tf32 kernels (Family::SM90_TF32): key-side operands rounded to tf32
//                    by a pre-pass (sm90/stage_tf32.cu), since tf32 wgmma truncates and takes
//                    K-major operands only, each d_bucket columns wide (zeros past D: head dims
//                    below the bucket, FATTN_SM90_TF32_PAD; written Db below). kr = K as f32 [Hkv, R, Db] (R = B_view·total_kv flat key
//                    rows; fwd only: the backward's kernels read K and V rows in place and round
//                    them in shared memory); tr = a transposed copy, Vᵀ in fwd (O += P·V), Kᵀ in
//                    bwd (dQ += dS·K), as f32 [Hkv, Db, vt_cols]: sequence s's keys from column
//                    sm90_vt_col0(..) on (a multiple of 8), each 8-key group stored in the order
//                    of tf32_key_order().
//   [qt] [dot]       bwd on SM90_TF32, the dK/dV kernel's query side: Qᵀ, dOᵀ rounded, as
//                    [Hq, Db, q_cols] in the same per-sequence column scheme over the queries
//                    (Rq = B_view·total_q rows). Its Q and dO rows are read in place (TMA) and
//                    rounded in shared memory by the kernel.
//                    The backward stages and runs in passes of kv heads (tf32_bwd_pass_kv_heads):
//                    its regions hold one pass's heads (Hkv and Hq above read the pass's counts).
//   [dqf_acc] [dqf_cnt]  bwd on SM90_NATIVE with the fused dQ (Choice::dq_fused): dQ's f32
//                    accumulator [B_view, Hq, dqf_rows, d_bucket], one tile of 64 rows per query
//                    tile in the order of sm90_dqf_index (tiles.h), sequence s's tile at m0 from
//                    row q_begin + 64·s + m0 in varlen mode (dqf_rows = total_q + 64·B), from m0
//                    in dense mode (dqf_rows = total_q rounded up to 64), so no tile overlaps
//                    another sequence's; and one int counter per (sequence, query head, 64-row
//                    query tile of the longest sequence): sm90/bwd_dkdv_kernel.cuh.
// Every region starts 256-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attn_params.h"
#include "core/size_math.h"
#include "cuda/attn/attn_kernels.h"
#include "cuda/attn/tiles.h"

namespace fattn::cuda::attn {

constexpr int64_t kMapBlock = 64;  // granularity of the bias tile map (rows and cols)

// Can TMA read a [B_view, rows, heads, D] view of dt elements in place: a 16-byte aligned base, and
// the strides of dims with more than one index positive whole 16-byte chunks, in bytes below 2^39
// (the sm90 kernels' q, k, v and dout: select.cpp, sequence.h).
inline bool sm90_view_tma_ok(const void *x, fattn_dtype dt, int64_t ss, int64_t sh, int64_t sb, int64_t rows, int64_t heads,
                             int64_t bview) {
    const int64_t es = dt == FATTN_F32 ? 4 : 2, chunk = 16 / es, smax = (int64_t(1) << 39) / es;
    auto st_ok = [&](int64_t s, int64_t extent) { return extent <= 1 || (s > 0 && s % chunk == 0 && s < smax); };
    return (reinterpret_cast<uintptr_t>(x) & 15) == 0 && st_ok(ss, rows) && st_ok(sh, heads) && st_ok(sb, bview);
}

// Whether the 16-bit sm90 backward of p (on the kernels of d_bucket) can take the fused dQ
// (Choice::dq_fused; the build's FATTN_SM90_DQ_FUSED decides whether it does): not with a bias,
// and its dK/dV kernel must fit the device's shared memory.
inline bool sm90_dq_fused_ok(const AttnFwdParams &p, int d_bucket, size_t smem_optin) {
    return !p.bias && d_bucket <= 128 && sm90_dkdv_smem(d_bucket, 2, true) <= smem_optin;
}

// The Vᵀ copy of the sm90 tf32 forward: where sequence s (flat key row flat0 = batch_index ·
// total_kv + kv_begin) starts: a multiple of 8, and at or past the end of the previous
// sequence's last 8-key group (its padded groups never overlap the next sequence's).
FATTN_HD int64_t sm90_vt_col0(int64_t flat0, int64_t s) { return (flat0 + 7) / 8 * 8 + 8 * s; }
// Columns of the Vᵀ copy for `seqs` sequences over `rows` flat key rows (every sequence's last
// padded group included; a multiple of 8, so each row is 16-byte aligned for TMA).
FATTN_HD int64_t sm90_vt_cols(int64_t rows, int64_t seqs) { return (rows + 7) / 8 * 8 + 8 * seqs + 8; }
// Column c of an 8-key group of Vᵀ holds key tf32_key_order(c) of the group: 0 2 4 6 1 3 5 7. The
// forward's P accumulator holds keys 2t, 2t + 1 in thread t of a quad, the tf32 A fragment of
// P·V wants k-columns t, t + 4: with this order the accumulator is the fragment as it stands.
FATTN_HD int tf32_key_order(int c) { return c < 4 ? 2 * c : 2 * (c - 4) + 1; }

// kv heads per pass of the sm90 tf32 backward. All heads at once, its staged copies take
// |K| + 2·|Q| bytes (Kᵀ; Qᵀ, dOᵀ) beside the caller's dq, dk, dv (3·|K| + 4·|Q| while K, V, Q and
// dO rows were copied too: 706 MiB of peak above the inputs at B2 H16 S4096 D128, where PyTorch's
// mem-efficient kernel takes 385). A pass
// stages its own kv heads (and their query heads) and runs both kernels on them, so the copies
// stay within about |Q| (cap_bytes) — unless a pass's dK/dV grid (key tiles · sequences · its kv
// heads) would then have fewer than min_ctas CTAs: a pass shorter than two waves loses more to
// its tail than the bytes are worth, so small problems keep one pass. The passes are equal (the
// last may be short). per_kv_head: the staged bytes of one kv head with its query heads.
//
// On by default; -DFATTN_TF32_BWD_PASSES=0 (host code: CMAKE_CXX_FLAGS) runs every head in one
// pass. Same-run A/B on an H100 (2026-12-06, `AB_PARITY=0 AB_PRESETS=targets-f32
// scripts/attn-ab.sh OUT base= "pass=-DCMAKE_CXX_FLAGS=-DFATTN_TF32_BWD_PASSES=1"`, two rounds):
// B2 H16 S4096 fwd+bwd 4.033 / 4.021 ms with passes against 3.857 / 3.840 at D64 (+4.7%), 6.471 /
// 6.483 against 6.272 / 6.280 at D128 (+3.2%); through PyTorch (bench/bench_sdpa.py, same card)
// the peak above the inputs is 305 MiB at D128 and 153 at D64, under mem-efficient's 322 and 162
// (one pass: 450 MiB at D128 on the H200). fattn-bench's peak falls less (353 -> 321, 706 -> 641
// MiB): it allocates the gradients before the forward, so the forward's workspace stays beside
// them. fattn-test's parity, determinism and --large cases pass with them (same day, same card).
#ifndef FATTN_TF32_BWD_PASSES
#define FATTN_TF32_BWD_PASSES 1
#endif
FATTN_HD int64_t tf32_bwd_pass_kv_heads(int64_t hkv, int64_t per_kv_head, int64_t cap_bytes, int64_t key_units,
                                        int64_t min_ctas) {
    if (hkv <= 1 || per_kv_head <= 0) return hkv < 1 ? 1 : hkv;
    int64_t by_mem = cap_bytes / per_kv_head;
    if (by_mem < 1) by_mem = 1;
    const int64_t by_par = key_units > 0 ? (min_ctas + key_units - 1) / key_units : hkv;
    int64_t g = by_mem > by_par ? by_mem : by_par;
    if (g >= hkv) return hkv;
    const int64_t passes = (hkv + g - 1) / g;
    return (hkv + passes - 1) / passes;
}

struct Workspace {
    size_t map_off = 0, map_bytes = 0;
    int64_t map_nb = 0, map_nh = 0, map_nm = 0, map_nn = 0;  // dims of the map
    size_t ceil_off = 0, ceil_bytes = 0;
    size_t delta_off = 0, delta_bytes = 0;
    size_t lse_rel_off = 0, lse_rel_bytes = 0;
    size_t kr_off = 0, kr_bytes = 0, tr_off = 0, tr_bytes = 0;
    int64_t kr_rows = 0, vt_cols = 0;  // R and vt_cols above
    size_t qt_off = 0, dot_off = 0, q_t_bytes = 0;
    int64_t q_rows = 0, q_cols = 0;  // Rq and q_cols above
    int64_t pass_kv_heads = 0;        // SM90_TF32 bwd: kv heads per pass (their regions' Hkv)
    size_t dqf_acc_off = 0, dqf_acc_bytes = 0, dqf_cnt_off = 0, dqf_cnt_bytes = 0;
    int64_t dqf_mtiles = 0;  // query tiles per (sequence, head) of the counters
    int64_t dqf_rows = 0;    // the accumulator's rows per (batch view, head)
    size_t total = 0;

    static size_t align(size_t x) { return (x + 255) & ~size_t(255); }

    static Workspace layout(const AttnFwdParams &p, const Choice &c, fattn_dir dir) {
        Workspace w;
        const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
        if (p.bias) {
            w.map_nb = p.bias_sb == 0 ? 1 : bview;
            w.map_nh = p.bias_sh == 0 ? 1 : p.hq;
            w.map_nm = (p.total_q + kMapBlock - 1) / kMapBlock;
            w.map_nn = (p.total_kv + kMapBlock - 1) / kMapBlock;
            // Saturating (size_math.h): Sq/64 x Skv/64 of a huge broadcast size query exceeds
            // 64 bits; the size must read SIZE_MAX then, never wrap to a small number.
            w.map_bytes = sat_prod({w.map_nb, w.map_nh, w.map_nm, w.map_nn});
        }
        w.map_off = 0;
        size_t off = sat_round(w.map_bytes, 256);
        if (p.bias) {
            w.ceil_off = off;
            w.ceil_bytes = sat_prod({w.map_nb, w.map_nh, p.total_q, int64_t(sizeof(float))});
            off = sat_add(off, sat_round(w.ceil_bytes, 256));
        }
        if (dir == FATTN_DIR_BWD) {
            w.delta_off = off;
            w.delta_bytes = sat_prod({bview, p.hq, p.total_q, int64_t(sizeof(float))});
            off = sat_add(off, sat_round(w.delta_bytes, 256));
            if (p.bias) {
                w.lse_rel_off = off;
                w.lse_rel_bytes = w.delta_bytes;
                off = sat_add(off, sat_round(w.lse_rel_bytes, 256));
            }
        }
        const bool fwd = dir == FATTN_DIR_FWD;
        if ((fwd ? c.fwd_family : c.family) == Family::SM90_TF32) {  // D = Dv <= d_bucket there (select.cpp)
            // the copies are d_bucket columns wide (zeros past D: stage_tf32.cu), never fewer than D
            const int64_t db = c.d_bucket > p.d ? c.d_bucket : p.d;
            w.kr_rows = bview * p.total_kv;
            w.vt_cols = sm90_vt_cols(w.kr_rows, p.batch);
            // The forward stages every head; the backward one pass's (Choice::tf32_pass_kv_heads).
            const int64_t hkv = fwd || c.tf32_pass_kv_heads <= 0 || c.tf32_pass_kv_heads > p.hkv ? p.hkv
                                                                                                 : c.tf32_pass_kv_heads;
            const int64_t hq = hkv * p.group();
            w.pass_kv_heads = hkv;
            if (fwd) {  // the backward reads K and V rows in place (select.cpp: kv_tma_ok)
                w.kr_off = off;
                w.kr_bytes = sat_prod({hkv, w.kr_rows, db, int64_t(sizeof(float))});
                off = sat_add(off, sat_round(w.kr_bytes, 256));
            }
            w.tr_off = off;
            w.tr_bytes = sat_prod({hkv, db, w.vt_cols, int64_t(sizeof(float))});
            off = sat_add(off, sat_round(w.tr_bytes, 256));
            if (!fwd) {
                w.q_rows = bview * p.total_q;
                w.q_cols = sm90_vt_cols(w.q_rows, p.batch);
                w.q_t_bytes = sat_prod({hq, db, w.q_cols, int64_t(sizeof(float))});
                w.qt_off = off;
                off = sat_add(off, sat_round(w.q_t_bytes, 256));
                w.dot_off = off;
                off = sat_add(off, sat_round(w.q_t_bytes, 256));
            }
        }
        if (!fwd && c.family == Family::SM90_NATIVE && c.dq_fused) {
            w.dqf_mtiles = (p.seqlen_q + sm90_dkdv_bm() - 1) / sm90_dkdv_bm();
            w.dqf_acc_off = off;
            const int64_t bm = sm90_dkdv_bm();
            w.dqf_rows = p.cu_seqlens_q ? p.total_q + bm * p.batch : (p.total_q + bm - 1) / bm * bm;
            w.dqf_acc_bytes = sat_prod({bview, p.hq, w.dqf_rows, int64_t(c.d_bucket), int64_t(sizeof(float))});
            off = sat_add(off, sat_round(w.dqf_acc_bytes, 256));
            w.dqf_cnt_off = off;
            w.dqf_cnt_bytes = sat_prod({p.batch, p.hq, w.dqf_mtiles, int64_t(sizeof(int))});
            off = sat_add(off, sat_round(w.dqf_cnt_bytes, 256));
        }
        w.total = off;
        return w;
    }
};

}  // namespace fattn::cuda::attn
