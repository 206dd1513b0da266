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
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
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

namespace {

using at::Tensor;
using OptT = std::optional<Tensor>;

// ------------------------------------------------------------------------------- errors
[[noreturn]] void fail(fattn_ctx_t *ctx, fattn_status s, const char *what) {
    const char *msg = fattn_ctx_last_error(ctx);
    TORCH_CHECK(false, "fattn[", int(s), "] ", what, ": ", fattn_status_string(s), ": ", msg ? msg : "");
}

void check(fattn_ctx_t *ctx, fattn_status s, const char *what) {
    if (s != FATTN_OK) fail(ctx, s, what);
}

// ------------------------------------------------------------------------------- contexts
struct CtxDeleter {
    void operator()(fattn_ctx_t *c) const { fattn_ctx_free(c); }
};
using CtxPtr = std::unique_ptr<fattn_ctx_t, CtxDeleter>;

struct CpuCtx {
    CtxPtr ctx;
    int nthreads = 0;
};

// at::parallel_for runs on torch's threads only where its OpenMP body was compiled in (the
// CMakeLists compiles the shim with OpenMP under torch's OpenMP backend); elsewhere it would run
// serially, and the CPU contexts keep fattn's own pool.
#if !AT_PARALLEL_OPENMP || defined(_OPENMP)
#define FATTN_TORCH_RUNNER 1
#endif

// The CPU contexts' parallel runner (fattn_ctx_set_parallel): fattn's loops run on torch's
// intra-op threads. With fattn's own pool, torch's OpenMP workers, which spin for milliseconds
// after every torch op, share the cores with fattn's threads: a fattn forward right after a torch
// op measured up to 40% slower (B1 S1024 H4 D64 f32, 2 threads, dev machine). Items are claimed
// from a counter by as many workers as at::parallel_for starts (dynamic, like fattn's pool);
// inside a parallel region (a nested call) they run on the caller.
#ifdef FATTN_TORCH_RUNNER
void torch_runner(void *, int64_t n, int max_threads, fattn_task_fn task, void *task_ctx) {
    const int64_t workers = std::min<int64_t>(n, std::min(max_threads, at::get_num_threads()));
    if (workers <= 1 || at::in_parallel_region()) {
        for (int64_t i = 0; i < n; ++i) task(task_ctx, i);
        return;
    }
    std::atomic<int64_t> next{0};
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
             i = next.fetch_add(1, std::memory_order_relaxed))
            task(task_ctx, i);
    });
}
#endif

// Contexts are per thread (a context's last error is its own), like _lib.context_entry.
fattn_ctx_t *context(const at::Device &dev) {
    if (dev.is_cpu()) {
        thread_local CpuCtx cpu;
        const int n = at::get_num_threads();
        if (!cpu.ctx) {
            fattn_ctx_t *c = nullptr;
            const fattn_status s = fattn_ctx_init_cpu(n, &c);
            if (s != FATTN_OK) fail(nullptr, s, "context");
            cpu.ctx.reset(c), cpu.nthreads = n;
#ifdef FATTN_TORCH_RUNNER
            check(c, fattn_ctx_set_parallel(c, torch_runner, nullptr), "context");
#endif
        } else if (cpu.nthreads != n) {
            check(cpu.ctx.get(), fattn_ctx_set_nthreads(cpu.ctx.get(), n), "context");
            cpu.nthreads = n;
        }
        return cpu.ctx.get();
    }
    TORCH_CHECK(dev.is_cuda(), "fattn: tensors on device type '", dev.type(),
                "' are not supported (cpu and cuda only)");
    // The current stream of the tensors' device, as torch.cuda.current_stream(device) (no CUDA
    // headers needed: the stream's native handle is the cudaStream_t).
    const c10::impl::DeviceGuardImplInterface *impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const c10::Stream st = impl->getStream(dev);
    void *stream = st.native_handle();
    thread_local std::map<std::pair<int, void *>, CtxPtr> cuda;
    CtxPtr &slot = cuda[{int(dev.index()), stream}];
    if (!slot) {
        fattn_ctx_t *c = nullptr;
        const fattn_status s = fattn_ctx_init_cuda(int(dev.index()), stream, &c);
        if (s != FATTN_OK) fail(nullptr, s, "context");
        slot.reset(c);
    }
    return slot.get();
}

// ------------------------------------------------------------------------------- views
// A dtype as Python prints it (torch.float64), so both host paths word errors alike.
std::string py_dtype(at::ScalarType s) {
    switch (s) {
    case at::kDouble: return "torch.float64";
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(s);
    }
}

fattn_dtype dtype_code(const Tensor &t, const char *name) {
    switch (t.scalar_type()) {
    case at::kFloat: return FATTN_F32;
    case at::kHalf: return FATTN_F16;
    case at::kBFloat16: return FATTN_BF16;
    default:
        TORCH_CHECK_TYPE(false, "fattn: ", name, " has dtype ", py_dtype(t.scalar_type()),
                         "; the library takes float32, float16 or bfloat16");
    }
}

// Row-major strides for a tensor with no elements, whose torch strides can be anything
// (_lib._dense_strides: no element is read through them).
void dense_strides(const Tensor &t, int n, int64_t *nb) {
    int64_t acc = 1;
    for (int i = n - 1; i >= 0; --i) nb[i] = acc, acc *= std::max<int64_t>(t.size(i), 1);
}

fattn_tensor view(const Tensor &t, const char *name) {
    TORCH_CHECK_VALUE(t.dim() == 4, "fattn: ", name, " must have 4 dims, got shape ", t.sizes());
    fattn_tensor v{};
    v.data = t.data_ptr();
    v.dtype = dtype_code(t, name);
    for (int i = 0; i < 4; ++i) v.ne[i] = t.size(i), v.nb[i] = t.stride(i);
    if (t.numel() == 0) dense_strides(t, 4, v.nb);
    return v;
}

fattn_tensor lse_view(const Tensor &lse) {  // [B, Hq, Sq] f32 as ne = [B, Hq, Sq, 1]
    fattn_tensor v{};
    v.data = lse.data_ptr();
    v.dtype = FATTN_F32;
    for (int i = 0; i < 3; ++i) v.ne[i] = lse.size(i), v.nb[i] = lse.stride(i);
    if (lse.numel() == 0) dense_strides(lse, 3, v.nb);
    v.ne[3] = v.nb[3] = 1;
    return v;
}

void same_device(const Tensor &q, std::initializer_list<std::pair<const char *, const Tensor *>> named) {
    for (const auto &[name, t] : named)
        if (t && t->defined() && t->device() != q.device())
            TORCH_CHECK_VALUE(false, "fattn: ", name, " is on ", t->device(), " but q is on ", q.device(),
                              ": all tensors of a call must be on one device");
}

const Tensor *opt(const OptT &t) { return t && t->defined() ? &*t : nullptr; }

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

// Whether to ask for the workspace size and pass a workspace. CUDA: always (from torch's
// stream-ordered caching allocator, never cudaMalloc). CPU: only for calls of more than 2^20
// q/k/v elements, through one per-thread buffer (up to 256 MiB) that keeps its pages between
// calls; a smaller call passes none and the context's own allocation costs less than the size
// query (which validates everything: ~3.5 µs at a tiny shape on a 2-core EPYC).
bool wants_workspace(const Tensor &q, const Tensor &k, const Tensor &v) {
    return !q.is_cpu() || q.numel() + k.numel() + v.numel() > (int64_t(1) << 20);
}

Tensor workspace(size_t n, const at::Device &dev) {
    if (!n) return Tensor();
    const auto opts = at::TensorOptions().dtype(at::kByte).device(dev);
    if (!dev.is_cpu() || n > (size_t(256) << 20)) return at::empty({int64_t(n)}, opts);
    thread_local Tensor ws;
    if (!ws.defined() || size_t(ws.numel()) < n) ws = at::empty({int64_t(n)}, opts);
    return ws;
}

void *data_or_null(const Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; }

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

const c10::TypedOperatorHandle<FwdSig> &fwd_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fattn::attn_fwd", "").typed<FwdSig>();
    return op;
}
const c10::TypedOperatorHandle<BwdSig> &bwd_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fattn::attn_bwd", "").typed<BwdSig>();
    return op;
}

// fattn::attn_fwd's autograd formula is fattn::attn_bwd. No gradient to bias or through lse and
// saved (they get no history: non-differentiable); the gradients carry no graph (no double
// backward), as in _ops.py. A Node of its own rather than torch::autograd::Function, whose
// IValue-boxed saved data and per-argument bookkeeping cost ~14 µs a call at a tiny shape
// (measured on the 2-core EPYC: op with grad 31 µs, without 17).
struct AttnBackward : torch::autograd::Node {
    torch::autograd::SavedVariable q, k, v, o, lse, saved, bias, cu_q, cu_k;
    Scalars sc{};

    torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
        const auto self = shared_from_this();
        const Tensor o_ = o.unpack(self);
        Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(o_);
        auto opt_of = [](const torch::autograd::SavedVariable &sv) {
            Tensor t = sv.unpack();
            return t.defined() ? OptT(t) : OptT();
        };
        at::AutoDispatchBelowADInplaceOrView below;
        auto [dq, dk, dv] = bwd_op().call(dout, q.unpack(), k.unpack(), v.unpack(), o_, lse.unpack(), saved.unpack(),
                                          opt_of(bias), opt_of(cu_q), opt_of(cu_k), sc.causal, sc.wl, sc.wr,
                                          sc.walign, sc.scale, sc.msq, sc.msk, sc.prec, sc.algo);
        return {dq, dk, dv};
    }
    std::string name() const override { return "fattn::AttnBackward"; }
    void release_variables() override {
        for (torch::autograd::SavedVariable *sv : {&q, &k, &v, &o, &lse, &saved, &bias, &cu_q, &cu_k})
            sv->reset_data();
    }
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
    if (torch::autograd::compute_requires_grad(q, k, v)) {
        std::shared_ptr<AttnBackward> node(new AttnBackward(), torch::autograd::deleteNode);
        node->set_next_edges(torch::autograd::collect_next_edges(q, k, v));
        node->q = torch::autograd::SavedVariable(q, false);
        node->k = torch::autograd::SavedVariable(k, false);
        node->v = torch::autograd::SavedVariable(v, false);
        node->lse = torch::autograd::SavedVariable(lse, false);
        node->saved = torch::autograd::SavedVariable(saved, false);
        node->bias = torch::autograd::SavedVariable(bias, false);
        node->cu_q = torch::autograd::SavedVariable(cu_q, false);
        node->cu_k = torch::autograd::SavedVariable(cu_k, false);
        node->sc = Scalars{causal, wl, wr, walign, scale, msq, msk, prec, algo};
        torch::autograd::set_history(o, node);  // o is the node's one differentiable output
        node->o = torch::autograd::SavedVariable(o, true);
    }
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

TORCH_LIBRARY_IMPL(fattn, CPU, m) {
    m.impl("attn_fwd", attn_fwd);
    m.impl("attn_bwd", attn_bwd);
}

TORCH_LIBRARY_IMPL(fattn, CUDA, m) {
    m.impl("attn_fwd", attn_fwd);
    m.impl("attn_bwd", attn_bwd);
}

TORCH_LIBRARY_IMPL(fattn, Autograd, m) {
    m.impl("attn_fwd", attn_fwd_autograd);
    m.impl("attn_bwd", attn_bwd_autograd);
}
