// shim.h — what the compiled torch kernels share (torch_ops.cpp: softmax attention;
// path_ops.cpp: PaTH): errors, the per-thread contexts, tensor views, workspaces. Functions are
// inline (one per-thread context table for the whole module).
#pragma once

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
#include <utility>
#include <vector>

#include "fattn/fattn.h"

namespace fattn_shim {

using at::Tensor;
using OptT = std::optional<Tensor>;

// ------------------------------------------------------------------------------- errors
[[noreturn]] inline void fail(fattn_ctx_t *ctx, fattn_status s, const char *what) {
    const char *msg = fattn_ctx_last_error(ctx);
    TORCH_CHECK(false, "fattn[", int(s), "] ", what, ": ", fattn_status_string(s), ": ", msg ? msg : "");
}

inline void check(fattn_ctx_t *ctx, fattn_status s, const char *what) {
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
inline void torch_runner(void *, int64_t n, int max_threads, fattn_task_fn task, void *task_ctx) {
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
inline fattn_ctx_t *context(const at::Device &dev) {
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
inline std::string py_dtype(at::ScalarType s) {
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

inline fattn_dtype dtype_code(const Tensor &t, const char *name) {
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
inline void dense_strides(const Tensor &t, int n, int64_t *nb) {
    int64_t acc = 1;
    for (int i = n - 1; i >= 0; --i) nb[i] = acc, acc *= std::max<int64_t>(t.size(i), 1);
}

inline fattn_tensor view(const Tensor &t, const char *name) {
    TORCH_CHECK_VALUE(t.dim() == 4, "fattn: ", name, " must have 4 dims, got shape ", t.sizes());
    fattn_tensor v{};
    v.data = t.data_ptr();
    v.dtype = dtype_code(t, name);
    for (int i = 0; i < 4; ++i) v.ne[i] = t.size(i), v.nb[i] = t.stride(i);
    if (t.numel() == 0) dense_strides(t, 4, v.nb);
    return v;
}

inline fattn_tensor lse_view(const Tensor &lse) {  // [B, Hq, Sq] f32 as ne = [B, Hq, Sq, 1]
    fattn_tensor v{};
    v.data = lse.data_ptr();
    v.dtype = FATTN_F32;
    for (int i = 0; i < 3; ++i) v.ne[i] = lse.size(i), v.nb[i] = lse.stride(i);
    if (lse.numel() == 0) dense_strides(lse, 3, v.nb);
    v.ne[3] = v.nb[3] = 1;
    return v;
}

inline void same_device(const Tensor &q, std::initializer_list<std::pair<const char *, const Tensor *>> named) {
    for (const auto &[name, t] : named)
        if (t && t->defined() && t->device() != q.device())
            TORCH_CHECK_VALUE(false, "fattn: ", name, " is on ", t->device(), " but q is on ", q.device(),
                              ": all tensors of a call must be on one device");
}

inline const Tensor *opt(const OptT &t) { return t && t->defined() ? &*t : nullptr; }

// Whether to ask for the workspace size and pass a workspace. CUDA: always (from torch's
// stream-ordered caching allocator, never cudaMalloc). CPU: only for calls of more than 2^20
// q/k/v elements, through one per-thread buffer (up to 256 MiB) that keeps its pages between
// calls; a smaller call passes none and the context's own allocation costs less than the size
// query (which validates everything: ~3.5 µs at a tiny shape on a 2-core EPYC).
inline bool wants_workspace(const Tensor &q, const Tensor &k, const Tensor &v) {
    return !q.is_cpu() || q.numel() + k.numel() + v.numel() > (int64_t(1) << 20);
}

inline Tensor workspace(size_t n, const at::Device &dev) {
    if (!n) return Tensor();
    const auto opts = at::TensorOptions().dtype(at::kByte).device(dev);
    if (!dev.is_cpu() || n > (size_t(256) << 20)) return at::empty({int64_t(n)}, opts);
    thread_local Tensor ws;
    if (!ws.defined() || size_t(ws.numel()) < n) ws = at::empty({int64_t(n)}, opts);
    return ws;
}

inline void *data_or_null(const Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; }

// ------------------------------------------------------------------------------- autograd
// The typed dispatcher handle of the op with signature Sig, looked up at its first use (the
// schemas are defined by the Python package after this module loads). One handle per signature
// type: every op of the module has its own.
template <class Sig> const c10::TypedOperatorHandle<Sig> &typed_op(const char *name) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
    return op;
}

// The backward node of an op with one differentiable output: the tensors apply() needs, saved
// in its order (undefined where the op had none), and the output. A Node of its own rather than
// torch::autograd::Function, whose IValue-boxed saved data and per-argument bookkeeping cost
// ~14 µs a call at a tiny shape (measured on the 2-core EPYC: op with grad 31 µs, without 17).
struct OpBackward : torch::autograd::Node {
    std::vector<torch::autograd::SavedVariable> in;
    torch::autograd::SavedVariable out;

    Tensor input(size_t i) const { return in[i].unpack(); }
    OptT input_opt(size_t i) const {
        Tensor t = in[i].unpack();
        return t.defined() ? OptT(t) : OptT();
    }
    // The output as saved, and the gradient that reached it (zeros when none did)
    std::pair<Tensor, Tensor> out_and_grad(const torch::autograd::variable_list &grads) {
        Tensor o = out.unpack(shared_from_this());
        Tensor d = grads[0].defined() ? grads[0] : at::zeros_like(o);
        return {o, d};
    }
    void release_variables() override {
        for (torch::autograd::SavedVariable &sv : in) sv.reset_data();
        out.reset_data();
    }
};

// When any of `edges` requires grad: a node of type N becomes the history of o (the op's one
// differentiable output), with edges to `edges` (apply() returns their gradients in that order),
// `saved` and o saved; returns it to take the op's scalars, else null.
template <class N>
std::shared_ptr<N> attach(Tensor &o, const std::vector<Tensor> &edges, const std::vector<Tensor> &saved) {
    if (!torch::autograd::compute_requires_grad(edges)) return nullptr;
    std::shared_ptr<N> node(new N(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(edges));
    node->in.reserve(saved.size());
    for (const Tensor &t : saved) node->in.emplace_back(t, false);
    torch::autograd::set_history(o, node);
    node->out = torch::autograd::SavedVariable(o, true);
    return node;
}

// Registers fwd and bwd as the kernels of ops fwd_name and bwd_name for m's dispatch key.
template <class F, class B>
void impl_pair(torch::Library &m, const char *fwd_name, F fwd, const char *bwd_name, B bwd) {
    m.impl(fwd_name, fwd);
    m.impl(bwd_name, bwd);
}

}  // namespace fattn_shim
