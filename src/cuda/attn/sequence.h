// sequence.h — the forward and backward launch sequences of the fused CUDA attention kernels,
// written once against a launcher R: carve the workspace, run the pre-passes (bias tile map and
// ceilings; δ and lse' for the backward; the stats-mode forward for rows with a large ceiling),
// then the family's kernels, and the bias gradient's when asked for. launch.cu instantiates it with the CUDA launcher; src/emu/attn_emu.cpp
// with the CPU emulation's, so the emulation runs this very sequence.
//
// R provides, each returning R::Err (R::ok() when nothing failed):
//   bias_prep(p, w, map, vec, ceil), delta(p, a, rows, vec8),
//   native_fwd / tf32_fwd / scalar_fwd (p, a, db), native_bwd / tf32_bwd / scalar_bwd (p, a, db),
//   native_dbias / tf32_dbias / scalar_dbias (p, a, db), dbias_zero(p, rows),
//   with FATTN_HAVE_SM90: sm90_fwd, sm90_fwd_tf32 (.., w, workspace), sm90_bwd, sm90_bwd_tf32
//   (.., w, workspace) (as launch.h);
//   check(e, what, err): the status of e (and its message).
#pragma once

#include <cstdint>
#include <string>

#include "cuda/attn/attn_kernels.h"
#include "cuda/attn/prep.cuh"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {

// The sm90 backward reads dout through TMA like q, k, v (select.cpp checks those): 16-byte
// aligned, strides of dims with more than one index whole 16-byte chunks.
inline bool sm90_dout_ok(const AttnBwdParams &p) {
    return sm90_view_tma_ok(p.dout, p.dtype, p.do_ss, p.do_sh, p.do_sb, p.total_q, p.hq, p.cu_seqlens_q ? 1 : p.batch);
}

// The kernel arguments of one call: the bias map and ceilings computed, the workspace carved.
template <class R>
KArgs seq_prepare(R &r, const AttnFwdParams &p, const Choice &c, fattn_dir dir, void *workspace,
                  typename R::Err *e) {
    const Workspace w = Workspace::layout(p, c, dir);
    KArgs a{};
    *e = R::ok();
    if (p.bias && w.map_bytes > 0) {
        uint8_t *map = static_cast<uint8_t *>(workspace) + w.map_off;
        float *ceil = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.ceil_off);
        *e = r.bias_prep(p, w, map, bias_vec_ok(p), ceil);
        a.map = map;
        a.bias_pair = (reinterpret_cast<uintptr_t>(p.bias) % (p.bias_dtype == FATTN_F32 ? 8 : 4)) == 0;
        a.map_nh = w.map_nh;
        a.map_nm = w.map_nm;
        a.map_nn = w.map_nn;
        a.ceil = ceil;
    }
    if (dir == FATTN_DIR_BWD) {
        a.delta = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.delta_off);
        if (p.bias) a.lse_rel = reinterpret_cast<float *>(static_cast<char *>(workspace) + w.lse_rel_off);
    }
    return a;
}

template <class R>
fattn_status seq_fwd(R &r, const AttnFwdParams &p, const Choice &c, void *workspace, std::string *err) {
    if (p.batch == 0 || p.total_q == 0 || p.hq == 0) return FATTN_OK;
    typename R::Err e;
    KArgs a = seq_prepare(r, p, c, FATTN_DIR_FWD, workspace, &e);
    if (e != R::ok()) return r.check(e, "bias tile map", err);
    a.vec = vec_ok(p, nullptr, 0, 0, 0);
    switch (c.fwd_family) {
#ifdef FATTN_HAVE_SM90
    case Family::SM90_NATIVE: return r.check(r.sm90_fwd(p, a, c.d_bucket), "forward (sm90)", err);
    case Family::SM90_TF32:
        return r.check(r.sm90_fwd_tf32(p, a, c.d_bucket, Workspace::layout(p, c, FATTN_DIR_FWD), workspace),
                       "forward (sm90 tf32)", err);
#endif
    case Family::MMA_NATIVE: return r.check(r.native_fwd(p, a, c.d_bucket), "forward (mma)", err);
    case Family::MMA_TF32: return r.check(r.tf32_fwd(p, a, c.d_bucket), "forward (tf32)", err);
    case Family::SCALAR_F32: return r.check(r.scalar_fwd(p, a, c.d_bucket), "forward (f32)", err);
    default: break;
    }
    if (err) *err = "cuda fused attn: no forward kernel for this family";
    return FATTN_ERR_UNSUPPORTED;
}

template <class R>
fattn_status seq_bwd(R &r, const AttnBwdParams &p, const DeviceInfo &dev, const Choice &chosen, void *workspace,
                     std::string *err) {
    if (p.batch == 0 || p.hq == 0) return FATTN_OK;
    Choice c = chosen;
    if ((c.family == Family::SM90_NATIVE || c.family == Family::SM90_TF32) && !sm90_dout_ok(p)) {
        // AUTO serves such a dout with the portable backward (same results, same contract); a
        // context pinned to SM90 gets the reason instead.
        if (dev.family == FATTN_CUDA_FAMILY_SM90) {
            if (err) *err = "cuda fused attn: sm90 backward: dout must be 16-byte aligned with strides in whole 16-byte chunks (TMA)";
            return FATTN_ERR_UNSUPPORTED;
        }
        c.family = c.family == Family::SM90_TF32 ? Family::MMA_TF32 : Family::MMA_NATIVE;
    }
    typename R::Err e;
    KArgs a = seq_prepare(r, p, c, FATTN_DIR_BWD, workspace, &e);
    if (e != R::ok()) return r.check(e, "bias tile map", err);
    a.vec = vec_ok(p, p.dout, p.do_sb, p.do_ss, p.do_sh);
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    const int64_t rows = bview * p.total_q * p.hq;
    if (rows > 0) {
        if (fattn_status s = r.check(r.delta(p, a, rows, delta_vec_ok(p)), "delta preprocess", err); s != FATTN_OK)
            return s;
    }
    if (p.bias) {
        // Rows whose ceiling is large: lse − ceiling may have lost log Σ (at finfo.min the saved
        // LSE is the ceiling exactly), so the forward recomputes their lse' (stats mode; q tiles
        // without such a row return at once). Whether any exists is only known on the device.
        KArgs sa = a;
        sa.stats = const_cast<float *>(a.lse_rel);
        typename R::Err se = R::ok();
        switch (c.family) {
        case Family::SM90_NATIVE:  // the sm90 forward has no stats mode; the portable one serves it
        case Family::MMA_NATIVE: se = r.native_fwd(p, sa, c.d_bucket); break;
        case Family::SM90_TF32:
        case Family::MMA_TF32: se = r.tf32_fwd(p, sa, c.d_bucket); break;
        case Family::SCALAR_F32: se = r.scalar_fwd(p, sa, c.d_bucket); break;
        default: break;
        }
        if (fattn_status s = r.check(se, "row statistics (stats-mode forward)", err); s != FATTN_OK) return s;
    }
    fattn_status s = FATTN_ERR_UNSUPPORTED;
    switch (c.family) {
#ifdef FATTN_HAVE_SM90
    case Family::SM90_NATIVE:
        s = r.check(r.sm90_bwd(p, a, c.d_bucket, Workspace::layout(p, c, FATTN_DIR_BWD), workspace), "backward (sm90)", err);
        break;
    case Family::SM90_TF32:
        s = r.check(r.sm90_bwd_tf32(p, a, c.d_bucket, Workspace::layout(p, c, FATTN_DIR_BWD), workspace),
                    "backward (sm90 tf32)", err);
        break;
#endif
    case Family::MMA_NATIVE: s = r.check(r.native_bwd(p, a, c.d_bucket), "backward (mma)", err); break;
    case Family::MMA_TF32: s = r.check(r.tf32_bwd(p, a, c.d_bucket), "backward (tf32)", err); break;
    case Family::SCALAR_F32: s = r.check(r.scalar_bwd(p, a, c.d_bucket), "backward (f32)", err); break;
    default:
        if (err) *err = "cuda fused attn: no backward kernel for this family";
        break;
    }
    if (s != FATTN_OK || !p.dbias) return s;
    // The bias gradient, after any family's backward: the mma.sync kernel for the input type
    // (NATIVE, TF32: also after the sm90 ones), the scalar one for prec F32. Varlen: the entries
    // between two sequences, which no CTA owns, are zeroed first.
    const bool native = c.family == Family::MMA_NATIVE || c.family == Family::SM90_NATIVE;
    if (p.cu_seqlens_q) {
        const int64_t rows = (p.dbias_sh ? p.hq : 1) * (p.dbias_si ? p.total_q : 1);
        if (rows > 0)
            if (fattn_status z = r.check(r.dbias_zero(p, rows), "dbias zero", err); z != FATTN_OK) return z;
    }
    if (c.family == Family::SCALAR_F32) return r.check(r.scalar_dbias(p, a, c.d_bucket), "bias gradient (f32)", err);
    return native ? r.check(r.native_dbias(p, a, c.d_bucket), "bias gradient (mma)", err)
                  : r.check(r.tf32_dbias(p, a, c.d_bucket), "bias gradient (tf32)", err);
}

}  // namespace fattn::cuda::attn
