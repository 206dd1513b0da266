// bwd.cu — launcher of the sm_90a backward: the dK/dV kernel (bwd_dkdv_kernel.cuh) then the dQ
// kernel (bwd_dq_kernel.cuh), each with its own TMA tensor maps (tmap.cu; box heights follow the
// kernels' tiles), the grids, and the dtype × head-dim dispatch. δ, the bias map and ceilings
// come from launch.cu's pre-passes, as for the portable kernels. With the fused dQ (16-bit:
// Choice::dq_fused; the workspace then holds its regions) the dK/dV kernel also computes dQ,
// between its counters' zeroing and dq's conversion (dq_fused.cuh).
#include <algorithm>

#include "cuda/attn/launch.h"
#include "cuda/attn/sm90/bwd_dkdv_kernel.cuh"
#include "cuda/attn/sm90/bwd_dq_kernel.cuh"
#include "cuda/attn/sm90/dq_fused.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/sm90/tmap.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

static_assert(sm90bwd::dkdv_smem(128) <= 227 * 1024 && sm90bwd::dkdv_smem(128, 2, true) <= 227 * 1024 &&
                  sm90dq::dq_smem(128) <= 227 * 1024 &&
                  sm90dq::dq_smem(128, 4) <= 227 * 1024 && sm90bwd::dkdv_smem(128, 4) <= 227 * 1024,
              "sm90 bwd smem");
#if FATTN_SM90_D256
static_assert(sm90bwd::dkdv_smem(256) <= 227 * 1024 && sm90dq::dq_smem(256) <= 227 * 1024, "sm90 bwd smem at D 256");
#endif

// q and dout with query tiles of qrows rows, k and v with key tiles of kvrows rows.
cudaError_t maps_of(const AttnBwdParams &p, int qrows, int kvrows, Sm90Maps *m, CUtensorMap *tm_do) {
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    cudaError_t e;
    if ((e = sm90_map(&m->q, p.q, p.dtype, p.d, p.total_q, p.hq, bview, p.q_ss, p.q_sh, p.q_sb, qrows)) != cudaSuccess ||
        (e = sm90_map(tm_do, p.dout, p.dtype, p.dim_v, p.total_q, p.hq, bview, p.do_ss, p.do_sh, p.do_sb, qrows)) != cudaSuccess ||
        (e = sm90_map(&m->k, p.k, p.dtype, p.d, p.total_kv, p.hkv, bview, p.k_ss, p.k_sh, p.k_sb, kvrows)) != cudaSuccess ||
        (e = sm90_map(&m->v, p.v, p.dtype, p.dim_v, p.total_kv, p.hkv, bview, p.v_ss, p.v_sh, p.v_sb, kvrows)) != cudaSuccess)
        return e;
    return cudaSuccess;
}

template <typename T, int D>
cudaError_t launch(const AttnBwdParams &p, const KArgs &a, const Workspace &w, void *workspace, cudaStream_t st) {
    Sm90Maps m;
    CUtensorMap tm_do;
    cudaError_t e;
    const dim3 grid_kv(ceil_div_u(p.seqlen_kv, sm90bwd::bn(D)), unsigned(p.hkv), unsigned(p.batch));
    // dK/dV: 128-key CTAs (D256: 64), 64-row query items (no Qᵀ/dOᵀ maps: 16-bit)
    if ((e = maps_of(p, sm90bwd::bm(D), sm90bwd::bn(D), &m, &tm_do)) != cudaSuccess) return e;
    // fused dQ (instantiated only in a build with the switch, whose selection is the one that
    // asks for it): zero the counters, dK/dV/dQ (grid x reversed), convert dq
    if constexpr (FATTN_SM90_DQ_FUSED != 0 && D <= 128) {
        if (w.dqf_acc_bytes > 0) {
            char *ws = static_cast<char *>(workspace);
            const Sm90DqAcc fd{reinterpret_cast<float *>(ws + w.dqf_acc_off), reinterpret_cast<int *>(ws + w.dqf_cnt_off),
                               w.dqf_mtiles, w.dqf_rows};
            const int64_t ncnt = p.batch * p.hq * w.dqf_mtiles, nacc = int64_t(w.dqf_acc_bytes / 4);
            auto zero = [&](void *x, int64_t n) {
                return launch_kernel(sm90_zero_words_kernel, dim3(ceil_div_u(n, kDqfThreads)), kDqfThreads, 0, st,
                                     static_cast<uint32_t *>(x), n);
            };
            if ((e = zero(fd.cnt, ncnt)) != cudaSuccess || (FATTN_SM90_DQ_FUSED == 2 && (e = zero(fd.acc, nacc)) != cudaSuccess) ||
                (e = launch_kernel(sm90_dkdv_kernel<T, D, true>, grid_kv, sm90bwd::threads(), sm90bwd::dkdv_smem(D, 2, true), st, p,
                                   a, m, tm_do, tm_do, tm_do, fd)) != cudaSuccess)
                return e;
            const dim3 grid_q(unsigned(w.dqf_mtiles), unsigned(p.hq), unsigned(p.batch));
            return launch_kernel(sm90_dq_convert_kernel<T, D>, grid_q, kDqfThreads, 0, st, p, fd);
        }
    }
    if ((e = launch_kernel(sm90_dkdv_kernel<T, D>, grid_kv, sm90bwd::threads(), sm90bwd::dkdv_smem(D), st, p, a, m, tm_do,
                           tm_do, tm_do, Sm90DqAcc{})) != cudaSuccess)
        return e;
    {  // dQ: 128-row CTAs, 32-key (D256), 64-key (D128) or 128-key (D64) steps
        if ((e = maps_of(p, sm90dq::kBM, sm90dq::bn(D), &m, &tm_do)) != cudaSuccess) return e;
        const dim3 grid(ceil_div_u(p.seqlen_q, sm90dq::kBM), unsigned(p.hq), unsigned(p.batch));
        // no Kᵀ map: 16-bit
        if ((e = launch_kernel(sm90_dq_kernel<T, D>, grid, sm90dq::kThreads, sm90dq::dq_smem(D), st, p, a, m, tm_do, tm_do)) !=
            cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

// f32 inputs: the dK/dV and dQ kernels on tf32 wgmma over the pre-pass's rounded transposed copies
// (stage_tf32.cu; workspace.h): Kᵀ (key side), Qᵀ and dOᵀ (query side); q, k, v and dout rows are
// read in place (TMA-legal: select.cpp) and rounded in shared memory by the kernels.
// In passes of w.pass_kv_heads kv heads (workspace.h: tf32_bwd_pass_kv_heads): each stages its
// heads' copies into the same regions and runs both kernels on them (KArgs::kv_head0), so the
// workspace holds one pass's copies. Every output element is written by one pass, in the same
// arithmetic as in one pass.
template <int D>
cudaError_t launch_tf32(const AttnBwdParams &p, const KArgs &a_all, const Workspace &w, void *workspace,
                        cudaStream_t st) {
    char *ws = static_cast<char *>(workspace);
    auto at = [&](size_t off) { return reinterpret_cast<float *>(ws + off); };
    float *kt = at(w.tr_off), *qt = at(w.qt_off), *dot = at(w.dot_off);
    const int64_t G = p.group(), pass = w.pass_kv_heads > 0 ? w.pass_kv_heads : p.hkv;
    const int64_t bview = p.cu_seqlens_q ? 1 : p.batch;
    // The tensors in place (box: rows per tile; p.d = p.dim_v <= D columns, TMA reads zeros past
    // them), transposed copies [heads, D, cols].
    auto in_place = [&](CUtensorMap *mp, const void *x, int64_t rows, int64_t heads, int64_t ss, int64_t sh, int64_t sb,
                        int box) { return sm90_map(mp, x, FATTN_F32, p.d, rows, heads, bview, ss, sh, sb, box); };
    auto t_map = [&](CUtensorMap *mp, float *x, int64_t cols, int64_t heads) {
        return sm90_map(mp, x, FATTN_F32, cols, D, heads, 1, cols, D * cols, 0, D);
    };
    cudaError_t e;
    for (int64_t g0 = 0; g0 < p.hkv; g0 += pass) {
        const int64_t nk = std::min(pass, p.hkv - g0), nq = nk * G, q0 = g0 * G;  // this pass's kv / query heads
        KArgs a = a_all;
        a.kv_head0 = g0;
        const Sm90Stage::Src k{static_cast<const float *>(p.k) + g0 * p.k_sh, p.k_sb, p.k_ss, p.k_sh},
            q{static_cast<const float *>(p.q) + q0 * p.q_sh, p.q_sb, p.q_ss, p.q_sh},
            dout{static_cast<const float *>(p.dout) + q0 * p.do_sh, p.do_sb, p.do_ss, p.do_sh};
        Sm90Stage keys{false, nk, {}, {}, 0, {k, {}}, {kt, nullptr}, 1};  // the rows: read in place
        Sm90Stage queries{true, nq, {}, {}, 0, {q, dout}, {qt, dot}, 2};
        if ((e = sm90_tf32_stage(p, D, keys, w.kr_rows, w.vt_cols, st)) != cudaSuccess ||
            (e = sm90_tf32_stage(p, D, queries, w.q_rows, w.q_cols, st)) != cudaSuccess)
            return e;
        {  // dK/dV: 128-key CTAs, 32-query items
            Sm90Maps m;
            CUtensorMap tm_do, tm_qt, tm_dot;
            const int bm = sm90bwd::bm(D, 4), bn = sm90bwd::bn(D);
            if ((e = in_place(&m.k, p.k, p.total_kv, p.hkv, p.k_ss, p.k_sh, p.k_sb, bn)) != cudaSuccess ||
                (e = in_place(&m.v, p.v, p.total_kv, p.hkv, p.v_ss, p.v_sh, p.v_sb, bn)) != cudaSuccess ||
                (e = in_place(&m.q, p.q, p.total_q, p.hq, p.q_ss, p.q_sh, p.q_sb, bm)) != cudaSuccess ||
                (e = in_place(&tm_do, p.dout, p.total_q, p.hq, p.do_ss, p.do_sh, p.do_sb, bm)) != cudaSuccess ||
                (e = t_map(&tm_qt, qt, w.q_cols, nq)) != cudaSuccess || (e = t_map(&tm_dot, dot, w.q_cols, nq)) != cudaSuccess)
                return e;
            const dim3 grid(ceil_div_u(p.seqlen_kv, sm90bwd::bn(D)), unsigned(nk), unsigned(p.batch));
            if ((e = launch_kernel(sm90_dkdv_kernel<float, D>, grid, sm90bwd::threads(4), sm90bwd::dkdv_smem(D, 4), st, p, a,
                                   m, tm_do, tm_qt, tm_dot, Sm90DqAcc{})) != cudaSuccess)
                return e;
        }
        {  // dQ: 128-row CTAs over K, V rows in place and Kᵀ
            Sm90Maps m;
            CUtensorMap tm_do, tm_kt;
            const int bn = sm90dq::bn(D, 4);
            if ((e = in_place(&m.q, p.q, p.total_q, p.hq, p.q_ss, p.q_sh, p.q_sb, sm90dq::kBM)) != cudaSuccess ||
                (e = in_place(&tm_do, p.dout, p.total_q, p.hq, p.do_ss, p.do_sh, p.do_sb, sm90dq::kBM)) != cudaSuccess ||
                (e = in_place(&m.k, p.k, p.total_kv, p.hkv, p.k_ss, p.k_sh, p.k_sb, bn)) != cudaSuccess ||
                (e = in_place(&m.v, p.v, p.total_kv, p.hkv, p.v_ss, p.v_sh, p.v_sb, bn)) != cudaSuccess ||
                (e = t_map(&tm_kt, kt, w.vt_cols, nk)) != cudaSuccess)
                return e;
            const dim3 grid(ceil_div_u(p.seqlen_q, sm90dq::kBM), unsigned(nq), unsigned(p.batch));
            if ((e = launch_kernel(sm90_dq_kernel<float, D>, grid, sm90dq::kThreads, sm90dq::dq_smem(D, 4), st, p, a, m, tm_do,
                                   tm_kt)) != cudaSuccess)
                return e;
        }
    }
    return cudaSuccess;
}

}  // namespace

cudaError_t sm90_bwd_tf32(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                          cudaStream_t st) {
    return db == 64 ? launch_tf32<64>(p, a, w, workspace, st) : launch_tf32<128>(p, a, w, workspace, st);
}

cudaError_t sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace, cudaStream_t st) {
#if FATTN_SM90_D256
    if (db == 256)
        return p.dtype == FATTN_BF16 ? launch<__nv_bfloat16, 256>(p, a, w, workspace, st)
                                     : launch<__half, 256>(p, a, w, workspace, st);
#else
    if (db == 256) return cudaErrorInvalidValue;  // not built here (selection never asks for it then)
#endif
    if (p.dtype == FATTN_BF16)
        return db == 64 ? launch<__nv_bfloat16, 64>(p, a, w, workspace, st) : launch<__nv_bfloat16, 128>(p, a, w, workspace, st);
    return db == 64 ? launch<__half, 64>(p, a, w, workspace, st) : launch<__half, 128>(p, a, w, workspace, st);
}

}  // namespace fattn::cuda::attn
