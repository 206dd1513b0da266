// torch_ops.cpp — the compiled kernels of the fattn::attn_fwd / fattn::attn_bwd torch operators
// (issue 12: the PyTorch call at FlashAttention's host cost).
//
// python/fattn/_ops.py defines the two schemas and their fake and autocast kernels; when this
// shim is built (pip install --no-build-isolation ./python, against the installed torch) and
// loaded, it registers the CPU, CUDA and Autograd kernels, so a call goes Python -> the
// dispatcher -> C++ autograd -> the C API with no Python in between. Without the shim _ops.py
// registers the same three kernels in Python (ctypes); fattn.host_path() says which is in use.
//
// What a kernel does is exactly what _ops.py's Python kernels do: the same checks and messages,
// the same output layouts, one context per (thread, CPU thread count) or (thread, device,
// stream), workspaces from torch's allocator (see wants_workspace), the library's own
// validation for everything else. Errors raise RuntimeError("fattn[status] what: ...");
// _ops.py turns them into fattn.FattnError with that status.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fattn/fattn.h"
#include "shim.h"

namespace {

using namespace fattn_shim;

struct Scalars {
    int64_t causal, wl, wr, walign;
    double scale;
    int64_t msq, msk, prec, algo;
};

fattn_attn_params params(const OptT &bias, const OptT &cu_q, const OptT &cu_k, const Scalars &s) {
    fattn_attn_params p = fattn_attn_params_default();
    p.scale = float(s.scale);
    if (opt(bias)) p.bias = view(*bias, "bias");
    p.causal = fattn_causal(s.causal);
    p.window_left = s.wl, p.window_right = s.wr;
    p.window_align = fattn_align(s.walign);
    for (const auto &[name, t] : {std::pair<const char *, const OptT *>{"cu_seqlens_q", &cu_q}, {"cu_seqlens_k", &cu_k}})
        if (opt(*t))
            TORCH_CHECK_TYPE(t->value().scalar_type() == at::kInt && t->value().is_contiguous(), "fattn: ", name,
                             " must be a contiguous int32 tensor, got ", py_dtype(t->value().scalar_type()));
    if (opt(cu_q)) {
        p.cu_seqlens_q = static_cast<const int32_t *>(cu_q->data_ptr());
        p.cu_seqlens_kv = opt(cu_k) ? static_cast<const int32_t *>(cu_k->data_ptr()) : nullptr;
        p.num_seqs = cu_q->numel() - 1;
    }
    p.max_seqlen_q = s.msq, p.max_seqlen_kv = s.msk;
    p.prec = fattn_prec(s.prec);
    p.algo = fattn_algo(s.algo);
    return p;
}

// ------------------------------------------------------------------------------- kernels
std::tuple<Tensor, Tensor, Tensor> attn_fwd(const Tensor &q, const Tensor &k, const Tensor &v, const OptT &bias,
                                            const OptT &cu_q, const OptT &cu_k, int64_t causal, int64_t wl,
                                            int64_t wr, int64_t walign, double scale, int64_t msq, int64_t msk,
                                            int64_t prec, int64_t algo) {
    same_device(q, {{"k", &k}, {"v", &v}, {"bias", opt(bias)}, {"cu_seqlens_q", opt(cu_q)},
                    {"cu_seqlens_k", opt(cu_k)}});
    const fattn_tensor qv = view(q, "q"), kv = view(k, "k"), vv = view(v, "v");
    const c10::OptionalDeviceGuard guard(q.is_cuda() ? std::optional<at::Device>(q.device()) : std::nullopt);
    fattn_ctx_t *ctx = context(q.device());
    const Scalars sc{causal, wl, wr, walign, scale, msq, msk, prec, algo};
    const fattn_attn_params p = params(bias, cu_q, cu_k, sc);
    // Each size query validates everything, so only the needed ones are asked: FUSED saves
    // nothing (fattn.h), and see wants_workspace().
    size_t n_saved = 0, n_ws = 0;
    if (algo != FATTN_ALGO_FUSED) check(ctx, fattn_attn_saved_size(ctx, &p, &qv, &kv, &vv, &n_saved), "attn_fwd");
    if (wants_workspace(q, k, v))
        check(ctx, fattn_attn_workspace_size(ctx, &p, &qv, &kv, &vv, FATTN_DIR_FWD, &n_ws), "attn_workspace_size");
    const int64_t B = q.size(0), Sq = q.size(1), Hq = q.size(2), Dv = v.size(3);
    Tensor o = Dv == q.size(3) ? at::empty_like(q, at::MemoryFormat::Contiguous)
                               : at::empty({B, Sq, Hq, Dv}, q.options());
    Tensor lse = at::empty({B, Hq, Sq}, q.options().dtype(at::kFloat));
    Tensor saved = at::empty({int64_t(n_saved)}, q.options().dtype(at::kByte));
    Tensor ws = workspace(n_ws, q.device());
    const fattn_tensor ov = view(o, "o"), lv = lse_view(lse);
    check(ctx, fattn_attn_fwd(ctx, &p, &qv, &kv, &vv, &ov, &lv, n_saved ? saved.data_ptr() : nullptr,
                              data_or_null(ws), n_ws),
          "attn_fwd");
    return {o, lse, saved};
}

std::tuple<Tensor, Tensor, Tensor> attn_bwd(const Tensor &dout_in, const Tensor &q, const Tensor &k, const Tensor &v,
                                            const Tensor &o, const Tensor &lse, const Tensor &saved,
                                            const OptT &bias, const OptT &cu_q, const OptT &cu_k, int64_t causal,
                                            int64_t wl, int64_t wr, int64_t walign, double scale, int64_t msq,
                                            int64_t msk, int64_t prec, int64_t algo) {
    same_device(q, {{"dout", &dout_in}, {"k", &k}, {"v", &v}, {"o", &o}, {"lse", &lse}, {"bias", opt(bias)},
                    {"cu_seqlens_q", opt(cu_q)}, {"cu_seqlens_k", opt(cu_k)}});
    Tensor dout = dout_in;
    // Autograd hands over whatever layout the next op produced (an expanded scalar gradient has
    // stride 0); the library needs unit innermost stride, and the CUDA exact arm (cuBLAS) a token
    // stride >= Dv. Only the incoming gradient is ever copied.
    if (dout.dim() == 4 && (dout.stride(3) != 1 ||
                            (algo == FATTN_ALGO_EXACT && dout.is_cuda() && dout.stride(1) < dout.size(3))))
        dout = dout.contiguous();
    const fattn_tensor qv = view(q, "q"), kv = view(k, "k"), vv = view(v, "v"), ov = view(o, "o");
    const fattn_tensor dov = view(dout, "dout");
    const c10::OptionalDeviceGuard guard(q.is_cuda() ? std::optional<at::Device>(q.device()) : std::nullopt);
    fattn_ctx_t *ctx = context(q.device());
    const Scalars sc{causal, wl, wr, walign, scale, msq, msk, prec, algo};
    const fattn_attn_params p = params(bias, cu_q, cu_k, sc);
    size_t n_ws = 0;
    if (wants_workspace(q, k, v))
        check(ctx, fattn_attn_workspace_size(ctx, &p, &qv, &kv, &vv, FATTN_DIR_BWD, &n_ws), "attn_workspace_size");
    Tensor dq = at::empty_like(q, at::MemoryFormat::Contiguous);
    Tensor dk = at::empty_like(k, at::MemoryFormat::Contiguous);
    Tensor dv = at::empty_like(v, at::MemoryFormat::Contiguous);
    Tensor ws = workspace(n_ws, q.device());
    const fattn_tensor lv = lse_view(lse), dqv = view(dq, "dq"), dkv = view(dk, "dk"), dvv = view(dv, "dv");
    check(ctx, fattn_attn_bwd(ctx, &p, &qv, &kv, &vv, &ov, &lv, saved.numel() ? saved.data_ptr() : nullptr, &dov,
                              &dqv, &dkv, &dvv, data_or_null(ws), n_ws),
          "attn_bwd");
    return {dq, dk, dv};
}

// ------------------------------------------------------------------------------- autograd
using FwdSig = decltype(attn_fwd);
using BwdSig = decltype(attn_bwd);

const c10::TypedOperatorHandle<FwdSig> &fwd_op() { return typed_op<FwdSig>("fattn::attn_fwd"); }
const c10::TypedOperatorHandle<BwdSig> &bwd_op() { return typed_op<BwdSig>("fattn::attn_bwd"); }

// fattn::attn_fwd's autograd formula is fattn::attn_bwd. No gradient to bias or through lse and
// saved (they get no history: non-differentiable); the gradients carry no graph (no double
// backward), as in _ops.py. Saved: q, k, v, lse, saved, bias, cu_q, cu_k.
struct AttnBackward : OpBackward {
    Scalars sc{};

    torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
        const auto [o, dout] = out_and_grad(grads);
        at::AutoDispatchBelowADInplaceOrView below;
        auto [dq, dk, dv] = bwd_op().call(dout, input(0), input(1), input(2), o, input(3), input(4), input_opt(5),
                                          input_opt(6), input_opt(7), sc.causal, sc.wl, sc.wr, sc.walign, sc.scale,
                                          sc.msq, sc.msk, sc.prec, sc.algo);
        return {dq, dk, dv};
    }
    std::string name() const override { return "fattn::AttnBackward"; }
};

std::tuple<Tensor, Tensor, Tensor> attn_fwd_autograd(const Tensor &q, const Tensor &k, const Tensor &v,
                                                     const OptT &bias, const OptT &cu_q, const OptT &cu_k,
                                                     int64_t causal, int64_t wl, int64_t wr, int64_t walign,
                                                     double scale, int64_t msq, int64_t msk, int64_t prec,
                                                     int64_t algo) {
    Tensor o, lse, saved;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(o, lse, saved) =
            fwd_op().call(q, k, v, bias, cu_q, cu_k, causal, wl, wr, walign, scale, msq, msk, prec, algo);
    }
    auto of = [](const OptT &t) { return opt(t) ? *t : Tensor(); };
    if (auto node = attach<AttnBackward>(o, {q, k, v}, {q, k, v, lse, saved, of(bias), of(cu_q), of(cu_k)}))
        node->sc = Scalars{causal, wl, wr, walign, scale, msq, msk, prec, algo};
    return {o, lse, saved};
}

std::tuple<Tensor, Tensor, Tensor> attn_bwd_autograd(const Tensor &dout, const Tensor &q, const Tensor &k,
                                                     const Tensor &v, const Tensor &o, const Tensor &lse,
                                                     const Tensor &saved, const OptT &bias, const OptT &cu_q,
                                                     const OptT &cu_k, int64_t causal, int64_t wl, int64_t wr,
                                                     int64_t walign, double scale, int64_t msq, int64_t msk,
                                                     int64_t prec, int64_t algo) {
    at::AutoDispatchBelowADInplaceOrView below;
    return bwd_op().call(dout, q, k, v, o, lse, saved, bias, cu_q, cu_k, causal, wl, wr, walign, scale, msq, msk,
                         prec, algo);
}

}  // namespace

TORCH_LIBRARY_IMPL(fattn, CPU, m) { impl_pair(m, "attn_fwd", attn_fwd, "attn_bwd", attn_bwd); }
TORCH_LIBRARY_IMPL(fattn, CUDA, m) { impl_pair(m, "attn_fwd", attn_fwd, "attn_bwd", attn_bwd); }
TORCH_LIBRARY_IMPL(fattn, Autograd, m) { impl_pair(m, "attn_fwd", attn_fwd_autograd, "attn_bwd", attn_bwd_autograd); }
