// attn_cpu.cpp — entry points of the CPU softmax-attention backend: selection, sizes, dispatch.
//
// attn_select is the one "supported?" answer for the CPU (dispatch and fattn_attn_supports both
// call it). The kernels live in attn_fwd.cpp (fused forward), attn_bwd.cpp (backward, fused and
// exact share it) and attn_exact.cpp (materialized forward).
#include "cpu/attn_cpu.h"

namespace fattn::cpu {

namespace {
// Largest head dim the CPU kernels take: per-thread scratch grows with D and the tiles are
// sized for D <= 512; larger heads are valid attention but not something this backend runs.
constexpr int64_t kMaxHeadDim = 512;
}  // namespace

fattn_status attn_select(const AttnFwdParams &p, std::string *why) {
    auto fail = [&](fattn_status s, const std::string &msg) {
        if (why) *why = msg;
        return s;
    };
    if (p.d < 1 || p.dv < 1)
        return fail(FATTN_ERR_BAD_HEAD_DIM, "cpu: head dims must be >= 1 (d = " +
                                                std::to_string(p.d) + ", dv = " + std::to_string(p.dv) + ")");
    if (p.d > kMaxHeadDim || p.dv > kMaxHeadDim)
        return fail(FATTN_ERR_BAD_HEAD_DIM, "cpu: head dim " + std::to_string(p.d > p.dv ? p.d : p.dv) +
                                                " is larger than the CPU backend's limit of " +
                                                std::to_string(kMaxHeadDim));
    if (p.prec != FATTN_PREC_F32)
        return fail(FATTN_ERR_UNSUPPORTED, std::string("cpu: precision ") + fattn_prec_name(p.prec) +
                                               " needs CUDA tensor cores; the CPU runs F32 only");
    if (p.algo != FATTN_ALGO_FUSED && p.algo != FATTN_ALGO_EXACT)
        return fail(FATTN_ERR_UNSUPPORTED, "cpu: unknown algorithm");
    if (why) why->clear();
    return FATTN_OK;
}

size_t attn_workspace_size(const AttnFwdParams &, fattn_dir) { return 0; }

size_t attn_saved_size(const AttnFwdParams &p) {
    if (p.algo != FATTN_ALGO_EXACT) return 0;
    return size_t(p.batch) * size_t(p.hq) * size_t(p.seqlen_q) * size_t(p.seqlen_kv) * sizeof(float);
}

fattn_status attn_fwd(const AttnFwdParams &, void *, void *, std::string *err) {
    if (err) *err = "cpu: attention forward not implemented yet";
    return FATTN_ERR_INTERNAL;
}

fattn_status attn_bwd(const AttnBwdParams &, const void *, void *, std::string *err) {
    if (err) *err = "cpu: attention backward not implemented yet";
    return FATTN_ERR_INTERNAL;
}

}  // namespace fattn::cpu
