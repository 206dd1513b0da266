// select.cpp — the one selection function of the fused CUDA attention kernels (`choose`) and the
// workspace sizes derived from its answer. attn_select (support) and attn_fwd/attn_bwd (dispatch)
// both go through choose(), so a request is supported exactly when something here runs it.
//
// Families (attn_kernels.h):
//   F32    -> SCALAR_F32 (strict fp32 FMA; any sm_75+; head dims up to 256)
//   NATIVE -> MMA_NATIVE (bf16/f16 mma.sync m16n8k16; sm_80+; head-dim buckets 64/128)
//   TF32   -> MMA_TF32   (f32 mma.sync m16n8k8; sm_80+; head-dim buckets 64/128)
#include "cuda/attn/attn_kernels.h"
#include "cuda/attn/tiles.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {

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
    auto smem_ok = [&](size_t need, const char *what) {
        if (need <= dev.smem_optin) return true;
        if (why) *why = "cuda fused attn: " + std::string(what) + " needs " + std::to_string(need) +
                        " bytes of shared memory per block, device allows " + std::to_string(dev.smem_optin);
        return false;
    };
    switch (p.prec) {
    case FATTN_PREC_F32:
        c->family = Family::SCALAR_F32;
        c->d_bucket = dmax <= 64 ? 64 : dmax <= 128 ? 128 : 256;
        if (!smem_ok(sc_dkdv_smem(c->d_bucket), "the f32 dK/dV kernel")) return FATTN_ERR_UNSUPPORTED;
        return FATTN_OK;
    case FATTN_PREC_NATIVE:
        if (p.dtype == FATTN_F32)
            return no("prec NATIVE needs f16/bf16 inputs (f32 inputs: use TF32 or F32)");
        if (sm < 80) return no("prec NATIVE needs sm_80+ (mma.sync bf16/f16), device is sm_" +
                               std::to_string(sm));
        if (dmax > 128)
            return no("prec NATIVE: head dim " + std::to_string(dmax) +
                      " > 128 is not instantiated for tensor cores (use prec F32)");
        c->family = Family::MMA_NATIVE;
        c->d_bucket = dmax <= 64 ? 64 : 128;
        if (!smem_ok(mma_fwd_smem(c->d_bucket, 2), "the tensor-core forward kernel") ||
            !smem_ok(mma_dq_smem(c->d_bucket, 2), "the tensor-core dQ kernel"))
            return FATTN_ERR_UNSUPPORTED;
        return FATTN_OK;
    case FATTN_PREC_TF32:
        if (p.dtype != FATTN_F32) return no("prec TF32 needs f32 inputs");
        if (sm < 80) return no("prec TF32 needs sm_80+, device is sm_" + std::to_string(sm));
        if (dmax > 128)
            return no("prec TF32: head dim " + std::to_string(dmax) +
                      " > 128 is not instantiated for tensor cores (use prec F32)");
        c->family = Family::MMA_TF32;
        c->d_bucket = dmax <= 64 ? 64 : 128;
        if (!smem_ok(mma_fwd_smem(c->d_bucket, 4), "the tf32 forward kernel") ||
            !smem_ok(mma_dq_smem(c->d_bucket, 4), "the tf32 dQ kernel"))
            return FATTN_ERR_UNSUPPORTED;
        return FATTN_OK;
    default:
        return no("precision must be resolved (F32, TF32 or NATIVE) before selection");
    }
}

size_t workspace_size(const AttnFwdParams &p, const Choice &c, fattn_dir dir) {
    return Workspace::layout(p, c, dir).total;
}

}  // namespace fattn::cuda::attn
