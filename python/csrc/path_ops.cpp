// path_ops.cpp — the compiled kernels of the fattn::path_fwd / fattn::path_bwd torch operators
// (PaTH attention), beside torch_ops.cpp's softmax ones and built into the same module.
//
// python/fattn/path.py defines the schemas and fake kernels; with this module loaded it registers
// neither its Python (ctypes) kernels nor its Python autograd formula, and a call goes Python ->
// the dispatcher -> C++ autograd -> the C API. What a kernel does is what path.py's _path_fwd /
// _path_bwd do: the same output layouts, cu_seqlens read on the host (int32; int64 past 2^31 - 1
// refused by name), the forward's host copy of cu_seqlens as its third output (the backward
// reuses it), workspaces from torch's allocator.

#include <cstdint>
#include <limits>
#include <tuple>

#include "shim.h"

namespace {

using namespace fattn_shim;

// cu_seqlens as the library reads it: int32 in host memory; an undefined tensor when dense.
Tensor host_cu(const OptT &cu) {
    if (!opt(cu) || cu->numel() == 0) return Tensor();
    Tensor c = cu->detach().to(at::kCPU);
    if (c.scalar_type() == at::kLong)
        TORCH_CHECK_VALUE(c.max().item<int64_t>() <= std::numeric_limits<int32_t>::max(),
                          "fattn: cu_seqlens: offsets past 2^31 - 1 cannot index the tokens");
    return c.to(at::kInt).contiguous();
}

fattn_path_params params(double scale, const Tensor &cu, int64_t history, int64_t check_mode) {
    fattn_path_params p = fattn_path_params_default();
    p.scale = float(scale);
    if (cu.defined()) p.cu_seqlens = cu.data_ptr<int32_t>(), p.num_seqs = cu.numel() - 1;
    p.history = fattn_path_history(history);
    p.check = fattn_path_check(check_mode);
    return p;
}

// [B, T, H] -> view with ne = [B, T, H, 1]; "not given" for an undefined or empty 1-d tensor.
fattn_tensor view1(const Tensor *t, const char *name) {
    if (!t || (t->numel() == 0 && t->dim() == 1)) return fattn_tensor_none();
    return view(t->unsqueeze(-1), name);
}

struct PathIns {
    fattn_tensor q, k, v, w, beta, g;
};

PathIns ins_of(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &w, const Tensor &beta, const OptT &g) {
    same_device(q, {{"k", &k}, {"v", &v}, {"w", &w}, {"beta", &beta}, {"g", opt(g)}});
    return {view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), view1(&beta, "beta"), view1(opt(g), "g")};
}

// What a call of either direction sets up: the context of q's device (under the caller's device
// guard), cu_seqlens on the host, the params, and the direction's workspace.
struct PathCall {
    fattn_ctx_t *ctx;
    Tensor cu, ws;
    fattn_path_params p;
};

PathCall path_call(const Tensor &q, const PathIns &in, const OptT &cu_seqlens, double scale, int64_t history,
                   int64_t check_mode, fattn_dir dir) {
    PathCall c;
    c.ctx = context(q.device());
    c.cu = host_cu(cu_seqlens);
    c.p = params(scale, c.cu, history, check_mode);
    fattn_path_workspace_info wi{};
    check(c.ctx, fattn_path_workspace_size(c.ctx, &c.p, &in.q, &in.k, &in.v, &in.w, &in.beta, &in.g, dir, &wi),
          "path_workspace_size");
    c.ws = at::empty({std::max<int64_t>(int64_t(wi.total_bytes), 1)}, q.options().dtype(at::kByte));
    return c;
}

std::tuple<Tensor, Tensor, Tensor> path_fwd(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &w,
                                            const Tensor &beta, const OptT &g, const OptT &cu_seqlens, double scale,
                                            int64_t history, int64_t check_mode) {
    const PathIns in = ins_of(q, k, v, w, beta, g);
    const c10::OptionalDeviceGuard guard(q.is_cuda() ? std::optional<at::Device>(q.device()) : std::nullopt);
    const PathCall c = path_call(q, in, cu_seqlens, scale, history, check_mode, FATTN_DIR_FWD);
    Tensor o = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
    const fattn_tensor ov = view(o, "o"), lv = lse_view(lse);
    check(c.ctx, fattn_path_fwd(c.ctx, &c.p, &in.q, &in.k, &in.v, &in.w, &in.beta, &in.g, &ov, &lv, c.ws.data_ptr(),
                                size_t(c.ws.numel())),
          "path_fwd");
    // a tensor of its own (an op's output never aliases its input)
    return {o, lse, c.cu.defined() ? c.cu.clone() : at::empty({0}, at::TensorOptions().dtype(at::kInt))};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
path_bwd(const Tensor &dout_in, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &w, const Tensor &beta,
         const OptT &g, const Tensor &o, const Tensor &lse, const OptT &cu_seqlens, double scale, int64_t history,
         int64_t check_mode) {
    const PathIns in = ins_of(q, k, v, w, beta, g);
    same_device(q, {{"dout", &dout_in}, {"o", &o}, {"lse", &lse}});
    const Tensor dout = dout_in.to(q.scalar_type()).contiguous();
    const c10::OptionalDeviceGuard guard(q.is_cuda() ? std::optional<at::Device>(q.device()) : std::nullopt);
    const PathCall c = path_call(q, in, cu_seqlens, scale, history, check_mode, FATTN_DIR_BWD);
    Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v), dw = at::empty_like(w),
           dbeta = at::empty_like(beta);
    Tensor dg = opt(g) ? at::empty_like(*g) : at::empty({0}, q.options().dtype(at::kFloat));
    const fattn_tensor ov = view(o, "o"), lv = lse_view(lse), dov = view(dout, "dout"), dqv = view(dq, "dq"),
                       dkv = view(dk, "dk"), dvv = view(dv, "dv"), dwv = view(dw, "dw"), dbv = view1(&dbeta, "dbeta"),
                       dgv = view1(opt(g) ? &dg : nullptr, "dg");
    check(c.ctx, fattn_path_bwd(c.ctx, &c.p, &in.q, &in.k, &in.v, &in.w, &in.beta, &in.g, &ov, &lv, &dov, &dqv, &dkv,
                                &dvv, &dwv, &dbv, &dgv, c.ws.data_ptr(), size_t(c.ws.numel())),
          "path_bwd");
    return {dq, dk, dv, dw, dbeta, dg};
}

// ------------------------------------------------------------------------------- autograd
using FwdSig = decltype(path_fwd);
using BwdSig = decltype(path_bwd);

const c10::TypedOperatorHandle<FwdSig> &fwd_op() { return typed_op<FwdSig>("fattn::path_fwd"); }
const c10::TypedOperatorHandle<BwdSig> &bwd_op() { return typed_op<BwdSig>("fattn::path_bwd"); }

// fattn::path_fwd's autograd formula is fattn::path_bwd (path.py's _backward): gradients to q, k,
// v, w, beta and g; none through lse and the host cu_seqlens; no double backward. Saved: q, k, v,
// w, beta, g, lse, the host cu_seqlens.
struct PathBackward : OpBackward {
    double scale = 0;
    int64_t history = 0, check_mode = 0;

    torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
        const auto [o, dout] = out_and_grad(grads);
        const OptT g = input_opt(5);
        at::AutoDispatchBelowADInplaceOrView below;
        auto [dq, dk, dv, dw, db, dg] = bwd_op().call(dout, input(0), input(1), input(2), input(3), input(4), g, o,
                                                      input(6), input_opt(7), scale, history, check_mode);
        return {dq, dk, dv, dw, db, g ? dg : Tensor()};
    }
    std::string name() const override { return "fattn::PathBackward"; }
};

std::tuple<Tensor, Tensor, Tensor> path_fwd_autograd(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &w,
                                                     const Tensor &beta, const OptT &g, const OptT &cu_seqlens,
                                                     double scale, int64_t history, int64_t check_mode) {
    Tensor o, lse, cu_host;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(o, lse, cu_host) = fwd_op().call(q, k, v, w, beta, g, cu_seqlens, scale, history, check_mode);
    }
    const Tensor gt = opt(g) ? *g : Tensor();
    if (auto node = attach<PathBackward>(o, {q, k, v, w, beta, gt},
                                         {q, k, v, w, beta, gt, lse, cu_host.numel() ? cu_host : Tensor()}))
        node->scale = scale, node->history = history, node->check_mode = check_mode;
    return {o, lse, cu_host};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
path_bwd_autograd(const Tensor &dout, const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &w,
                  const Tensor &beta, const OptT &g, const Tensor &o, const Tensor &lse, const OptT &cu_seqlens,
                  double scale, int64_t history, int64_t check_mode) {
    at::AutoDispatchBelowADInplaceOrView below;
    return bwd_op().call(dout, q, k, v, w, beta, g, o, lse, cu_seqlens, scale, history, check_mode);
}

}  // namespace

TORCH_LIBRARY_IMPL(fattn, CPU, m) { impl_pair(m, "path_fwd", path_fwd, "path_bwd", path_bwd); }
TORCH_LIBRARY_IMPL(fattn, CUDA, m) { impl_pair(m, "path_fwd", path_fwd, "path_bwd", path_bwd); }
TORCH_LIBRARY_IMPL(fattn, Autograd, m) { impl_pair(m, "path_fwd", path_fwd_autograd, "path_bwd", path_bwd_autograd); }
