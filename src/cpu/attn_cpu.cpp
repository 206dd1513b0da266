// attn_cpu.cpp — entry points of the CPU softmax-attention backend: selection, sizes, dispatch.
//
// attn_select is the one "supported?" answer for the CPU (dispatch and fattn_attn_supports both
// call it). The kernels live in attn_fwd.cpp (fused forward), attn_bwd.cpp (backward, fused and
// exact share it) and attn_exact.cpp (materialized forward); attn_impl.h lists the shared parts.
#include "cpu/attn_cpu.h"

#include <cstdint>

#include "cpu/attn_impl.h"

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
    if (p.d < 1 || p.dim_v < 1)
        return fail(FATTN_ERR_BAD_HEAD_DIM, "cpu: head dims must be >= 1 (d = " +
                                                std::to_string(p.d) + ", dv = " + std::to_string(p.dim_v) + ")");
    if (p.d > kMaxHeadDim || p.dim_v > kMaxHeadDim)
        return fail(FATTN_ERR_BAD_HEAD_DIM, "cpu: head dim " + std::to_string(p.d > p.dim_v ? p.d : p.dim_v) +
                                                " is larger than the CPU backend's limit of " +
                                                std::to_string(kMaxHeadDim));
    if (p.prec != FATTN_PREC_F32)
        return fail(FATTN_ERR_UNSUPPORTED, std::string("cpu: precision ") + fattn_prec_name(p.prec) +
                                               " needs CUDA tensor cores; the CPU runs F32 only");
    if (p.algo != FATTN_ALGO_FUSED && p.algo != FATTN_ALGO_EXACT)
        return fail(FATTN_ERR_UNSUPPORTED, "cpu: unknown algorithm");
    // EXACT keeps [B, Hq, Sq, Skv] f32: refuse sizes whose byte count does not fit (it would wrap
    // in size_t and the saved buffer would be reported as 0 bytes).
    const long double p_bytes = (long double)p.batch * p.hq * p.seqlen_q * p.seqlen_kv * sizeof(float);
    if (p.algo == FATTN_ALGO_EXACT && p_bytes > (long double)(INT64_MAX / 2))
        return fail(FATTN_ERR_UNSUPPORTED, "cpu: EXACT would keep " + std::to_string(double(p_bytes)) +
                                               " bytes of probabilities [B, Hq, Sq, Skv]; use FUSED");
    if (why) why->clear();
    return FATTN_OK;
}

size_t attn_workspace_size(const AttnFwdParams &p, fattn_dir dir) {
    return detail::workspace_layout(p, dir, nullptr, nullptr);
}

size_t attn_saved_size(const AttnFwdParams &p) {
    if (p.algo != FATTN_ALGO_EXACT) return 0;
    return size_t(p.batch) * size_t(p.hq) * size_t(p.seqlen_q) * size_t(p.seqlen_kv) * sizeof(float);
}

namespace {

bool empty_problem(const AttnFwdParams &p) { return p.batch <= 0 || p.hq <= 0 || p.hkv <= 0; }

// The caller's workspace may start anywhere; the layout reserved 64 bytes to align it.
void *align64(void *w) {
    uintptr_t u = reinterpret_cast<uintptr_t>(w);
    return reinterpret_cast<void *>((u + 63) / 64 * 64);
}

}  // namespace

namespace {

// The shared frame of both directions: select (the one "supported?" answer), no-op on empty
// problems, buffer checks, workspace carve + bias tile map, then `run(ws)`; exceptions (only the
// small task tables allocate) become OUT_OF_MEMORY.
template <class Run>
fattn_status run_call(const AttnFwdParams &p, fattn_dir dir, const void *saved, void *workspace,
                      std::string *err, Run &&run) {
    std::string why;
    fattn_status st = attn_select(p, &why);
    if (st != FATTN_OK) {
        if (err) *err = why;
        return st;
    }
    if (empty_problem(p)) return FATTN_OK;
    if (!workspace || (p.algo == FATTN_ALGO_EXACT && !saved && attn_saved_size(p) > 0)) {
        if (err)
            *err = std::string("cpu: attention ") + (dir == FATTN_DIR_FWD ? "forward" : "backward") +
                   " needs its workspace (and saved buffer for EXACT)";
        return FATTN_ERR_NULL_POINTER;
    }
    try {
        detail::Workspace ws;
        detail::workspace_layout(p, dir, align64(workspace), &ws);
        detail::build_bias_map(p, &ws);
        detail::build_bias_ceiling(p, &ws);
        return run(ws);
    } catch (...) {
        if (err) *err = "cpu: out of memory for the task tables";
        return FATTN_ERR_OUT_OF_MEMORY;
    }
}

}  // namespace

fattn_status attn_fwd(const AttnFwdParams &p, void *saved, void *workspace, std::string *err) {
    return run_call(p, FATTN_DIR_FWD, saved, workspace, err, [&](detail::Workspace &ws) {
        if (p.algo == FATTN_ALGO_EXACT) return detail::exact_fwd(p, static_cast<float *>(saved), ws);
        return detail::fused_fwd(p, ws);
    });
}

fattn_status attn_bwd(const AttnBwdParams &p, const void *saved, void *workspace, std::string *err) {
    return run_call(p, FATTN_DIR_BWD, saved, workspace, err, [&](detail::Workspace &ws) {
        if (p.algo == FATTN_ALGO_EXACT)
            return detail::attn_bwd_impl<true>(p, static_cast<const float *>(saved), ws);
        return detail::attn_bwd_impl<false>(p, nullptr, ws);
    });
}

}  // namespace fattn::cpu
