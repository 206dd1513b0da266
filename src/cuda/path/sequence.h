// sequence.h — the PaTH GPU backend's host side, written once for any launcher: it fills PathDev
// from the validated params and the workspace layout, uploads the per-sequence tables, runs the
// STRICT w / beta check, and enqueues the kernels of the forward and the backward in order.
// path_cuda.cu instantiates it with the CUDA launcher; tests/test_path_emu.cpp (and the
// emulated backend of fattn-test) with the CPU emulation of src/emu.
//
// A launcher L provides:
//   template <class K> void launch(int64_t grid_x, int grid_y, const PathDev &d)  // K::kThreads, K::smem()
//   void upload(void *dst, const void *src, size_t n)     // host -> workspace, stream-ordered
//   void download(void *dst, const void *src, size_t n)   // workspace -> host, synchronous
//   void fill(void *dst, int byte, size_t n)
//   fattn_status status(std::string *err)                 // launch errors so far
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/path_dispatch.h"
#include "core/path_params.h"
#include "cuda/path/bwd.cuh"
#include "cuda/path/fwd.cuh"
#include "cuda/path/gpu_layout.h"
#include "cuda/path/prep.cuh"
#include "cuda/path/small.cuh"

namespace fattn::pathk {

inline bool aligned16(const void *ptr, std::initializer_list<int64_t> strides, int64_t es) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16) return false;
    for (int64_t s : strides)
        if ((s * es) % 16) return false;
    return true;
}

// PathDev for one call. ws: the caller's workspace (any alignment), laid out by gpu_workspace.
inline PathDev make_dev(const PathBwdParams &p, const PathLayout &lay, const GpuWs &w, void *ws, bool bwd) {
    PathDev d{};
    char *b = gpu_ws_base(ws);
    auto at = [&](size_t off) -> void * { return off ? b + off : nullptr; };
    const int64_t es = int64_t(fattn_dtype_size(p.dtype));
    d.B = p.B, d.T = p.T, d.hq = int(p.hq), d.h = int(p.h), d.grp = int(p.hq / p.h);
    d.K = int(p.dk), d.V = int(p.dv), d.hk = int(hist_row(p.dk, es));
    d.scale = p.scale, d.sl2 = float(double(p.scale) * 1.4426950408889634);
    d.has_gate = p.g != nullptr;
    d.check_tol = p.check_tol;
    d.num_seqs = p.num_seqs;
    d.cu = static_cast<const int32_t *>(at(w.cu));
    d.chunk_base = static_cast<const int64_t *>(at(w.chunk_base));
    d.seg_base = static_cast<const int64_t *>(at(w.seg_base));
    d.hist_base = static_cast<const int64_t *>(at(w.hist_base));
    d.pair_base = static_cast<const int64_t *>(at(w.pair_base));
    d.total_chunks = lay.total_chunks, d.total_segs = lay.segments;
    d.hist_rect = p.history == FATTN_PATH_HISTORY_RECTANGULAR, d.rect_cols = lay.max_segments;
    d.q = p.q, d.q_sb = p.q_sb, d.q_ss = p.q_ss, d.q_sh = p.q_sh;
    d.k = p.k, d.k_sb = p.k_sb, d.k_ss = p.k_ss, d.k_sh = p.k_sh;
    d.v = p.v, d.v_sb = p.v_sb, d.v_ss = p.v_ss, d.v_sh = p.v_sh;
    d.w = p.w, d.w_sb = p.w_sb, d.w_ss = p.w_ss, d.w_sh = p.w_sh;
    d.beta = p.beta, d.beta_sb = p.beta_sb, d.beta_ss = p.beta_ss, d.beta_sh = p.beta_sh;
    d.g = p.g, d.g_sb = p.g_sb, d.g_ss = p.g_ss, d.g_sh = p.g_sh;
    d.o = p.o, d.o_sb = p.o_sb, d.o_ss = p.o_ss, d.o_sh = p.o_sh;
    d.lse = p.lse, d.lse_sb = p.lse_sb, d.lse_sh = p.lse_sh;
    // 16-byte loads need aligned rows and whole 16-byte vectors of K or V columns (common.cuh:
    // load_tile); other head dims take element loads
    const bool kvec = p.dk * es % 16 == 0, vvec = p.dv * es % 16 == 0, wvec = p.dk * 4 % 16 == 0;
    d.vec_q = kvec && aligned16(p.q, {p.q_sb, p.q_ss, p.q_sh}, es);
    d.vec_k = kvec && aligned16(p.k, {p.k_sb, p.k_ss, p.k_sh}, es);
    d.vec_v = vvec && aligned16(p.v, {p.v_sb, p.v_ss, p.v_sh}, es);
    d.vec_w = wvec && aligned16(p.w, {p.w_sb, p.w_ss, p.w_sh}, 4);
    d.vec_o = vvec && aligned16(p.o, {p.o_sb, p.o_ss, p.o_sh}, es);
    if (bwd) {
        d.dout = p.dout, d.do_sb = p.do_sb, d.do_ss = p.do_ss, d.do_sh = p.do_sh;
        d.dq = p.dq, d.dq_sb = p.dq_sb, d.dq_ss = p.dq_ss, d.dq_sh = p.dq_sh;
        d.dk = p.dk_, d.dk_sb = p.dk_sb, d.dk_ss = p.dk_ss, d.dk_sh = p.dk_sh;
        d.dv = p.dv_, d.dv_sb = p.dv_sb, d.dv_ss = p.dv_ss, d.dv_sh = p.dv_sh;
        d.dw = p.dw, d.dw_sb = p.dw_sb, d.dw_ss = p.dw_ss, d.dw_sh = p.dw_sh;
        d.dbeta = p.dbeta, d.dbeta_sb = p.dbeta_sb, d.dbeta_ss = p.dbeta_ss, d.dbeta_sh = p.dbeta_sh;
        d.dg = p.dg, d.dg_sb = p.dg_sb, d.dg_ss = p.dg_ss, d.dg_sh = p.dg_sh;
        d.vec_do = vvec && aligned16(p.dout, {p.do_sb, p.do_ss, p.do_sh}, es);
    }
    d.gsum = static_cast<float *>(at(w.gsum));
    d.uw = at(w.uw), d.ww = at(w.ww), d.kt = at(w.kt), d.dmat = at(w.dmat);
    d.kh = at(w.kh);
    d.emat = at(w.emat);
    d.hist = at(w.hist);
    d.delta = static_cast<float *>(at(w.delta));
    d.dkh = static_cast<float *>(at(w.dkh)), d.dvacc = static_cast<float *>(at(w.dvacc));
    d.dkt = static_cast<float *>(at(w.dkt)), d.dkt_hi = static_cast<float *>(at(w.dkt_hi)), d.dkt_split = w.dkt_split;
    d.du = static_cast<float *>(at(w.du));
    d.dwacc = static_cast<float *>(at(w.dwacc)), d.dko = static_cast<float *>(at(w.dko));
    d.ddm = static_cast<float *>(at(w.ddm)), d.dgs = static_cast<float *>(at(w.dgs));
    d.dep = static_cast<float *>(at(w.dep)), d.gam = static_cast<float *>(at(w.gam));
    d.seg_split = w.seg_split;
    d.qts = at(w.qts), d.pch = at(w.pch);
    d.dsi = at(w.dsi), d.rsi = static_cast<float *>(at(w.rsi)), d.icnt = static_cast<int *>(at(w.icnt));
    d.bad = static_cast<unsigned long long *>(at(w.bad));
    return d;
}

// Varlen tables into the workspace (dense calls compute them in closed form): built on the host in
// the layout's span [cu, pair_base + tables) and copied in one upload (a copy from pageable memory
// first waits for the stream: one wait per call, not five).
template <class L> void upload_tables(L &l, const PathFwdParams &p, const GpuWs &w, void *ws) {
    if (!p.cu_seqlens) return;
    const size_t n1 = size_t(p.num_seqs) + 1, span = w.pair_base + n1 * 8 - w.cu;
    std::vector<char> h(span, 0);
    auto table = [&](size_t off) { return reinterpret_cast<int64_t *>(h.data() + (off - w.cu)); };
    std::memcpy(h.data(), p.cu_seqlens, n1 * 4);
    int64_t *cb = table(w.chunk_base), *sb = table(w.seg_base), *hb = table(w.hist_base), *pb = table(w.pair_base);
    for (size_t s = 0; s + 1 < n1; ++s) {
        const int64_t len = int64_t(p.cu_seqlens[s + 1]) - p.cu_seqlens[s];
        cb[s + 1] = cb[s] + ceil_div(len, kC);
        sb[s + 1] = sb[s] + ceil_div(len, kS);
        hb[s + 1] = hb[s] + path_packed_cells(len);
        pb[s + 1] = pb[s] + pairs_of(len);
    }
    l.upload(gpu_ws_base(ws) + w.cu, h.data(), span);
}

// STRICT: the device check, then (synchronously) the first offending token, with its values in
// the message, as the CPU check words it (core/path_api.cpp).
template <class L> fattn_status run_check(L &l, const PathFwdParams &p, const PathDev &d, std::string *err) {
    if (p.check == FATTN_PATH_CHECK_NONE) return FATTN_OK;
    l.fill(d.bad, 0xFF, 8);
    const int64_t n = p.B * p.T * p.h;
    l.template launch<KCheck>(ceil_div(n, KCheck::kThreads), 1, d);
    unsigned long long bad = ~0ull;
    l.download(&bad, d.bad, 8);
    fattn_status s = l.status(err);
    if (s != FATTN_OK || bad == ~0ull) return s;
    const int64_t row = int64_t(bad) / p.h, h = int64_t(bad) % p.h, b = row / p.T, t = row % p.T;
    std::vector<float> wv(size_t(p.dk));
    float be = 0.f;
    l.download(wv.data(), p.w + b * p.w_sb + t * p.w_ss + h * p.w_sh, wv.size() * 4);
    l.download(&be, p.beta + b * p.beta_sb + t * p.beta_ss + h * p.beta_sh, 4);
    double n2 = 0;
    for (float x : wv) n2 += double(x) * x;
    *err = path_check_message(std::sqrt(n2), be, b, t, h, p.check_tol);
    return FATTN_ERR_BAD_VALUE;
}

template <class L, typename Tin, int D> void fwd_kernels(L &l, const PathDev &d) {
    if (d.has_gate) l.template launch<KScan<false>>(d.num_seqs, d.hq, d);
    l.template launch<KPrep<Tin, D>>(d.total_chunks, d.h, d);
    l.template launch<KFwd<Tin, D>>(d.total_chunks, d.hq, d);
}

template <class L, typename Tin, int D> void bwd_kernels(L &l, const PathDev &d) {
    if (d.has_gate) l.template launch<KScan<false>>(d.num_seqs, d.hq, d);
    l.template launch<KPrep<Tin, D>>(d.total_chunks, d.h, d);
    bwd_sequence<L, Tin, D>(l, d);
    if (d.has_gate) l.template launch<KScan<true>>(d.num_seqs, d.hq, d);
}

template <class L, typename Tin> void dispatch_d(L &l, const PathDev &d, int D, bool bwd) {
    switch (D) {
    case 32: bwd ? bwd_kernels<L, Tin, 32>(l, d) : fwd_kernels<L, Tin, 32>(l, d); break;
    case 64: bwd ? bwd_kernels<L, Tin, 64>(l, d) : fwd_kernels<L, Tin, 64>(l, d); break;
    default: bwd ? bwd_kernels<L, Tin, 128>(l, d) : fwd_kernels<L, Tin, 128>(l, d); break;
    }
}

// The whole call for one input dtype. ws: gpu_workspace(p, lay, dir).total bytes.
template <class L, typename Tin> fattn_status gpu_run_t(L &l, const PathBwdParams &p, void *ws, bool bwd, std::string *err) {
    const PathLayout lay = path_layout(p, /*bases=*/false);
    const GpuWs w = gpu_workspace(p, lay, bwd ? FATTN_DIR_BWD : FATTN_DIR_FWD);
    PathDev d = make_dev(p, lay, w, ws, bwd);
    d.keep_t0 = bwd && l.keep_t0;
    upload_tables(l, p, w, ws);
    fattn_status s = run_check(l, p, d, err);
    if (s != FATTN_OK) return s;
    dispatch_d<L, Tin>(l, d, w.D, bwd);
    return l.status(err);
}

template <class L> fattn_status gpu_run(L &l, const PathBwdParams &p, void *ws, bool bwd, std::string *err) {
    switch (p.dtype) {
    case FATTN_F32: return gpu_run_t<L, float>(l, p, ws, bwd, err);
    case FATTN_F16: return gpu_run_t<L, f16_t>(l, p, ws, bwd, err);
    default: return gpu_run_t<L, bf16_t>(l, p, ws, bwd, err);
    }
}

// The largest dynamic shared memory of the (dtype, D) kernel set (what selection checks).
template <typename Tin, int D> constexpr size_t max_smem_of() {
    size_t m = 0;
    for (size_t s : {KPrep<Tin, D>::smem(), KFwd<Tin, D>::smem(), KSegPrep<Tin, D>::smem(), KHist<Tin, D>::smem(),
                     KDkv<Tin, D>::smem(), KSegInter<Tin, D>::smem(), KSegIntra<Tin, D>::smem(), KOwn<Tin, D>::smem(),
                     KChainA<Tin, D>::smem(), KChainB<Tin, D>::smem()})
        m = s > m ? s : m;
#if FATTN_PATH_DKV_SM90_BUILT
    if constexpr (dkv_sm90_at(sizeof(Tin), D)) m = KDkvSm90<Tin, D>::smem() > m ? KDkvSm90<Tin, D>::smem() : m;
#endif
#if FATTN_PATH_SEG_SM90_BUILT
    if constexpr (seg_sm90_at(sizeof(Tin), D)) m = KSegInterSm90<Tin, D>::smem() > m ? KSegInterSm90<Tin, D>::smem() : m;
#endif
#if FATTN_PATH_HIST_SM90_BUILT
    if constexpr (hist_sm90_at(sizeof(Tin), D)) m = KHistSm90<Tin, D>::smem() > m ? KHistSm90<Tin, D>::smem() : m;
#endif
    return m;
}
template <typename Tin> size_t max_smem(int D) {
    return D == 32 ? max_smem_of<Tin, 32>() : D == 64 ? max_smem_of<Tin, 64>() : max_smem_of<Tin, 128>();
}

}  // namespace fattn::pathk
