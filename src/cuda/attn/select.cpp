// select.cpp — the one selection function of the fused CUDA attention kernels (`choose`) and the
// workspace sizes derived from its answer. attn_select (support) and attn_fwd/attn_bwd (dispatch)
// both go through choose(), so a request is supported exactly when something here runs it.
//
// Families (attn_kernels.h):
//   F32    -> SCALAR_F32 (strict fp32 FMA; any sm_75+; head dims up to 256)
//   NATIVE -> MMA_NATIVE (bf16/f16 mma.sync m16n8k16; sm_80+; head-dim buckets 64/128)
//   TF32   -> MMA_TF32   (f32 mma.sync m16n8k8; sm_80+; head-dim buckets 64/128)
//   NATIVE on an sm_90 device -> SM90_NATIVE (wgmma + TMA), forward and backward, where
//   sm90_fwd_legal says so and the context's family allows it (fattn_ctx_set_cuda_family). The
//   backward also needs dout TMA-legal, which only the call shows (sequence.h: sm90_dout_ok).
//   TF32 on an sm_90 device -> SM90_TF32 (tf32 wgmma: forward, dK/dV, dQ) where sm90_fwd_legal
//   says so and the family allows it; as for NATIVE, the backward also needs dout TMA-legal.
#include <algorithm>
#include <cstdint>

#include "cuda/attn/attn_kernels.h"
#include "cuda/attn/tiles.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {

namespace {

// Can TMA read q, or k and v, in place (workspace.h: sm90_view_tma_ok)?
bool q_tma_ok(const AttnFwdParams &p) {
    return sm90_view_tma_ok(p.q, p.dtype, p.q_ss, p.q_sh, p.q_sb, p.total_q, p.hq, p.cu_seqlens_q ? 1 : p.batch);
}
bool kv_tma_ok(const AttnFwdParams &p) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    return sm90_view_tma_ok(p.k, p.dtype, p.k_ss, p.k_sh, p.k_sb, p.total_kv, p.hkv, bview) &&
           sm90_view_tma_ok(p.v, p.dtype, p.v_ss, p.v_sh, p.v_sb, p.total_kv, p.hkv, bview);
}

// Can the sm90 forward run p? Its TMA tensor maps need 16-byte aligned bases and strides, and the
// kernels are instantiated for D = Dv = 64, 128 (and 16-bit 256), smaller D = Dv running on the
// next one. With f32 inputs (tf32) only q is read through TMA: k and v reach the kernel as the
// pre-pass's rounded copies (workspace.h: kr, tr).
bool sm90_fwd_legal(const AttnFwdParams &p, const DeviceInfo &dev, std::string *why) {
    auto no = [&](const std::string &m) {
        if (why) *why = "sm90 forward: " + m;
        return false;
    };
#ifndef FATTN_HAVE_SM90
    return no("this build has no sm_90a code (FATTN_CUDA_ARCHS lacks 90a)");
#else
    if (dev.sm_major != 9 || dev.sm_minor != 0)
        return no("needs an sm_90 device, this one is sm_" + std::to_string(dev.sm_major * 10 + dev.sm_minor));
    const bool tf32 = p.prec == FATTN_PREC_TF32 && p.dtype == FATTN_F32;
    if (!tf32 && (p.prec != FATTN_PREC_NATIVE || (p.dtype != FATTN_BF16 && p.dtype != FATTN_F16)))
        return no("bf16/f16 inputs at prec NATIVE, or f32 inputs at prec TF32, only");
    // Any D = Dv in whole 16-byte rows on the kernels of the bucket above it (TMA reads zeros past
    // D, the pre-pass's tf32 copies hold zeros there, the stores stop at it): 16-bit up to 128, or
    // 256 with FATTN_SM90_D256 (tiles.h); tf32 64 or 128, or with FATTN_SM90_TF32_PAD up to 128.
    const bool buckets_only = tf32 && !FATTN_SM90_TF32_PAD;
    const int64_t unit = buckets_only ? 64 : tf32 ? 4 : 8, dmax_sm90 = !tf32 && FATTN_SM90_D256 ? 256 : 128;
    if (p.d != p.dim_v || p.d % unit != 0 || p.d > dmax_sm90)
        return no("head dims " + std::to_string(p.d) + "/" + std::to_string(p.dim_v) +
                  (buckets_only ? std::string(" (needs D = Dv = 64 or 128)")
                                : " (needs D = Dv, a multiple of " + std::to_string(unit) + " up to " +
                                      std::to_string(dmax_sm90) + ")"));
    // A tensor map needs at least one row: no queries (the backward still zeroes dK/dV) or no
    // keys go to the portable kernels.
    if (p.total_q < 1 || p.total_kv < 1) return no("no queries or no keys");
    if (!q_tma_ok(p)) return no("q must be 16-byte aligned with strides in whole 16-byte chunks (TMA)");
    if (!tf32 && !kv_tma_ok(p)) return no("k and v must be 16-byte aligned with strides in whole 16-byte chunks (TMA)");
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    // TMA coordinates are 32-bit: query and key rows; with tf32 the flat key rows of the kr copy
    // and the columns of the Vᵀ copy (workspace.h: sm90_vt_cols).
    const int64_t kv_rows = tf32 ? sm90_vt_cols(bview * p.total_kv, p.batch) : p.total_kv;
    if (p.total_q >= (int64_t(1) << 31) || kv_rows >= (int64_t(1) << 31))
        return no("more than 2^31 rows (TMA coordinates are 32-bit)");
    if (sm90_fwd_smem(p.d <= 64 ? 64 : p.d <= 128 ? 128 : 256, tf32 ? 4 : 2) > dev.smem_optin)
        return no("needs more shared memory than the device allows");
    return true;
#endif
}

// The sm90 tf32 backward's kv heads per pass (workspace.h: tf32_bwd_pass_kv_heads), from the
// bytes its regions take per kv head: at least two waves of the dK/dV kernel (one CTA per SM).
int64_t tf32_pass_kv_heads(const AttnFwdParams &p, int64_t db, const DeviceInfo &dev) {
    if (!FATTN_TF32_BWD_PASSES) return p.hkv;  // workspace.h: on by default
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch, rk = bview * p.total_kv, rq = bview * p.total_q;
    const size_t key_side = sat_prod({db, sm90_vt_cols(rk, p.batch), 4});  // Kᵀ (K, V rows: in place)
    const size_t query_side = sat_prod({2, db, sm90_vt_cols(rq, p.batch), 4});  // Qᵀ, dOᵀ (Q, dO rows: in place)
    const size_t per_head = sat_add(key_side, sat_mul(query_side, size_t(p.group())));
    const size_t cap = sat_prod({p.hq, rq, p.d, 4});
    constexpr size_t kMax = size_t(INT64_MAX);
    const int64_t key_units = p.batch * ((p.seqlen_kv + sm90_dkdv_bn() - 1) / sm90_dkdv_bn());
    return tf32_bwd_pass_kv_heads(p.hkv, int64_t(std::min(per_head, kMax)), int64_t(std::min(cap, kMax)), key_units,
                                  2 * int64_t(dev.num_sms));
}

}  // namespace

fattn_status choose(const AttnFwdParams &p, const DeviceInfo &dev, Choice *c, std::string *why) {
    auto no = [&](const std::string &msg) {
        if (why) *why = "cuda fused attn: " + msg;
        return FATTN_ERR_UNSUPPORTED;
    };
    const int sm = dev.sm_major * 10 + dev.sm_minor;
    const int64_t dmax = p.d > p.dim_v ? p.d : p.dim_v;
    if (sm < 75) return no("needs sm_75 or newer, device is sm_" + std::to_string(sm));
    if (dmax > 256)
        return no("head dim " + std::to_string(dmax) + " > 256 is not instantiated");
    if (p.d < 1 || p.dim_v < 1) return no("head dims must be >= 1");
    // Grid y = heads, z = sequences (CUDA limits those dims to 65535).
    if (p.hq > 65535 || p.batch > 65535)
        return no("more than 65535 heads or sequences is not supported by the launch grid");
    auto smem_ok = [&](size_t need, const std::string &what) {
        if (need <= dev.smem_optin) return true;
        if (why) *why = "cuda fused attn: " + what + " needs " + std::to_string(need) +
                        " bytes of shared memory per block, device allows " + std::to_string(dev.smem_optin);
        return false;
    };
    // The mma.sync families (prec NATIVE: es 2, prec TF32: es 4): sm_80+, head dims up to 256
    // (buckets 64, 128, 256), each kernel's shared memory. prec: the precision's name; sm_note: what needs sm_80;
    // kernels: the kernels' name in the shared-memory message.
    auto mma_family = [&](Family f, size_t es, const std::string &prec, const std::string &sm_note,
                          const std::string &kernels) {
        if (sm < 80) return no(prec + " needs sm_80+" + sm_note + ", device is sm_" + std::to_string(sm));
        c->family = c->fwd_family = f;
        c->d_bucket = dmax <= 64 ? 64 : dmax <= 128 ? 128 : 256;  // dmax <= 256: checked above
        if (!smem_ok(mma_fwd_smem(c->d_bucket, es), "the " + kernels + " forward kernel") ||
            !smem_ok(mma_dq_smem(c->d_bucket, es), "the " + kernels + " dQ kernel") ||
            !smem_ok(mma_dkdv_smem(c->d_bucket, es), "the " + kernels + " dK/dV kernel") ||
            (p.want_dbias && !smem_ok(mma_dbias_smem(c->d_bucket, es), "the " + kernels + " bias-gradient kernel")))
            return FATTN_ERR_UNSUPPORTED;
        return FATTN_OK;
    };
    // The bias gradient is the mma.sync kernel's (mma_bwd.cuh: mma_dbias_kernel), after whichever
    // backward ran (it needs only the LSE, δ and the bias map, which every family's sequence
    // computes): dq, dk, dv are the same bits with and without dbias.
    switch (p.prec) {
    case FATTN_PREC_F32:
        if (dev.family == FATTN_CUDA_FAMILY_SM90) return no("family SM90 has no strict-F32 kernels (prec F32)");
        c->family = c->fwd_family = Family::SCALAR_F32;
        c->d_bucket = dmax <= 64 ? 64 : dmax <= 128 ? 128 : 256;
        if (!smem_ok(sc_dkdv_smem(c->d_bucket), "the f32 dK/dV kernel") ||
            (p.want_dbias && !smem_ok(sc_dbias_smem(c->d_bucket), "the f32 bias-gradient kernel")))
            return FATTN_ERR_UNSUPPORTED;
        return FATTN_OK;
    case FATTN_PREC_NATIVE:
        if (p.dtype == FATTN_F32)
            return no("prec NATIVE needs f16/bf16 inputs (f32 inputs: use TF32 or F32)");
        if (fattn_status s = mma_family(Family::MMA_NATIVE, 2, "prec NATIVE", " (mma.sync bf16/f16)", "tensor-core");
            s != FATTN_OK)
            return s;
        if (dev.family != FATTN_CUDA_FAMILY_PORTABLE) {
            std::string w;
            if (sm90_fwd_legal(p, dev, &w)) {
                c->fwd_family = Family::SM90_NATIVE;
                // above D 128 (FATTN_SM90_D256) the backward too, on bucket 256's sm90 kernels,
                // where their shared memory fits
                const bool bwd256 = FATTN_SM90_D256 && sm90_bwd_smem(256) <= dev.smem_optin;
                if (c->d_bucket <= 128 || bwd256) {
                    c->family = Family::SM90_NATIVE;
                    // dQ inside the dK/dV kernel (tiles.h: FATTN_SM90_DQ_FUSED), not with a bias
                    // (workspace.h: Choice::dq_fused)
                    c->dq_fused = FATTN_SM90_DQ_FUSED != 0 && sm90_dq_fused_ok(p, c->d_bucket, dev.smem_optin);
                } else if (dev.family == FATTN_CUDA_FAMILY_SM90) {
                    return no("sm90 backward at head dim " + std::to_string(dmax) + ": needs " +
                              std::to_string(sm90_bwd_smem(256)) +
                              " bytes of shared memory per block, device allows " + std::to_string(dev.smem_optin) +
                              " (family SM90 was asked for)");
                }
            } else if (dev.family == FATTN_CUDA_FAMILY_SM90) {
                return no(w + " (family SM90 was asked for)");
            }
        }
        return FATTN_OK;
    case FATTN_PREC_TF32:
        if (p.dtype != FATTN_F32) return no("prec TF32 needs f32 inputs");
        if (fattn_status s = mma_family(Family::MMA_TF32, 4, "prec TF32", "", "tf32"); s != FATTN_OK) return s;
        if (dev.family != FATTN_CUDA_FAMILY_PORTABLE) {
            std::string w;
            // The backward's kernels take more shared memory than the forward (sm90_fwd_legal's
            // check): at D128 dQ 225 KB, dK/dV 231.5 KB (tiles.h).
            if (sm90_fwd_legal(p, dev, &w) && sm90_bwd_smem(c->d_bucket, 4) <= dev.smem_optin) {
                c->fwd_family = Family::SM90_TF32;
                // The backward reads k and v in place through TMA (the forward, the pre-pass's
                // copies): where TMA cannot, AUTO runs the portable backward.
                if (kv_tma_ok(p)) {
                    c->family = Family::SM90_TF32;
                    c->tf32_pass_kv_heads = tf32_pass_kv_heads(p, c->d_bucket, dev);
                } else if (dev.family == FATTN_CUDA_FAMILY_SM90) {
                    return no("sm90 tf32 backward: k and v must be 16-byte aligned with strides in whole 16-byte chunks "
                              "(TMA) (family SM90 was asked for)");
                }
            }
            else if (dev.family == FATTN_CUDA_FAMILY_SM90)
                return no((w.empty() ? std::string("sm90 tf32 backward: needs more shared memory than the device allows") : w) +
                          " (family SM90 was asked for)");
        }
        return FATTN_OK;
    default:
        return no("precision must be resolved (F32, TF32 or NATIVE) before selection");
    }
}

bool selects_sm90_d256() { return FATTN_SM90_D256 != 0; }
bool selects_sm90_tf32_pad() { return FATTN_SM90_TF32_PAD != 0; }

size_t workspace_size(const AttnFwdParams &p, const Choice &c, fattn_dir dir) {
    return Workspace::layout(p, c, dir).total;
}

}  // namespace fattn::cuda::attn
