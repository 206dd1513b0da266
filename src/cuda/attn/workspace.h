// workspace.h — how the fused kernels carve the caller's workspace (host/device shared header).
//   [bias tile map]  one byte per (bias batch, bias head, 64-row block, 64-col block) of the packed
//                    [total_q, total_kv] plane: 0 = all -inf (skip), 1 = has values other than
//                    0 and -inf (read the bias), 2 = all exactly 0 (no bias read; common.cuh).
//                    Present only with a bias; filled by a pre-pass in fwd and again in bwd.
//   [ceilings]       with a bias: each row's largest allowed bias, f32 [map_nb, map_nh, total_q]
//                    (common.cuh: bias ceilings); filled by a pre-pass in fwd and again in bwd.
//   [delta]          bwd only: rowsum(dO∘O) as f32 [B_view, Hq, total_q] (same indexing as lse).
//   [lse_rel]        bwd with a bias: lse' = lse − ceiling, f32 [B_view, Hq, total_q].
// Every region starts 256-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attn_params.h"
#include "core/size_math.h"

namespace fattn::cuda::attn {

constexpr int64_t kMapBlock = 64;  // granularity of the bias tile map (rows and cols)

struct Workspace {
    size_t map_off = 0, map_bytes = 0;
    int64_t map_nb = 0, map_nh = 0, map_nm = 0, map_nn = 0;  // dims of the map
    size_t ceil_off = 0, ceil_bytes = 0;
    size_t delta_off = 0, delta_bytes = 0;
    size_t lse_rel_off = 0, lse_rel_bytes = 0;
    size_t total = 0;

    static size_t align(size_t x) { return (x + 255) & ~size_t(255); }

    template <typename C>
    static Workspace layout(const AttnFwdParams &p, const C &, fattn_dir dir) {
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
        w.total = off;
        return w;
    }
};

}  // namespace fattn::cuda::attn
