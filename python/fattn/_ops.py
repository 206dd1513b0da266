"""_ops.py — the torch operators of softmax attention over the fattn C API, built for a small
per-call host cost.

  fattn::attn_fwd(q, k, v, bias?, cu_seqlens_q?, cu_seqlens_k?, <scalars>) -> (o, lse, saved)
  fattn::attn_bwd(dout, q, k, v, o, lse, saved, bias?, cu_seqlens_q?, cu_seqlens_k?, <scalars>)
      -> (dq, dk, dv)
  fattn::attn_bwd_dbias(dout, q, k, v, o, lse, saved, bias, cu_seqlens_q?, cu_seqlens_k?,
                        <scalars>) -> (dq, dk, dv, dbias)

Registered with torch.library's low-level API (one schema, CPU and CUDA kernels, a fake kernel,
an Autograd kernel; Autocast kernels for the forward), so all are opaque ops with fake kernels
under torch.compile and pass torch.library.opcheck. `saved` is the library's auxiliary forward
buffer (uint8): empty for algo "fused", the probabilities for "exact" (an unbacked size in the fake
kernel). The <scalars> are _attn.normalize()'s: causal, window_left, window_right, window_align,
scale, max_seqlen_q, max_seqlen_k, prec, algo.

Host cost (issue 12; bench/bench_host.py measures it). What a call costs in Python is mostly
fixed overhead, so:
- a plan per (thread, context, shapes, strides, dtypes, scalars) caches the parameter struct,
  the tensor views and the saved / workspace sizes: a repeated call makes ONE library call
  (fattn_attn_fwd or _bwd, which validate everything themselves before writing anything) and
  only re-points the views' data. Varlen calls are not cached (their sizes depend on the
  cu_seqlens values), nor are first calls: those ask the size queries, which validate first.
- the Autograd kernel is a plain autograd.Function instead of torch.library.register_autograd,
  whose wrapper re-reads the 15-argument schema per call (~0.2 ms of the ~0.3 ms forward
  measured at B1 S8 H1 D16 on the CPU).
Every buffer the library writes (o, lse, saved, workspaces, grads) is a torch tensor on the
inputs' device, so CUDA memory comes from torch's caching allocator, never cudaMalloc.

The compiled ops (python/csrc/torch_ops.cpp, built by `pip install --no-build-isolation`
against the installed torch): when present and built for this torch, they register the CPU,
CUDA and Autograd kernels in C++ and the Python ones below are not registered; the schemas, the
fake kernels and the autocast kernels stay here either way. host_path() says which is in use;
FATTN_TORCH_SHIM=0 in the environment selects the ctypes kernels.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Optional

import torch
from torch import Tensor

from . import _lib
from ._lib import check, lib, lse_view, ptr, view

_SCALARS = "int causal, int window_left, int window_right, int window_align, float scale, " \
           "int max_seqlen_q, int max_seqlen_k, int prec, int algo"

_def = torch.library.Library("fattn", "DEF")
_def.define("attn_fwd(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? cu_seqlens_q, "
            f"Tensor? cu_seqlens_k, {_SCALARS}) -> (Tensor, Tensor, Tensor)",
            tags=(torch.Tag.pt2_compliant_tag,))
_def.define("attn_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
            "Tensor saved, Tensor? bias, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
            f"{_SCALARS}) -> (Tensor, Tensor, Tensor)", tags=(torch.Tag.pt2_compliant_tag,))
# The backward with the bias gradient (fattn_attn_bwd_ex), for a bias that requires grad:
# bias [B|1, Hq|1, Sq|1, Skv|1] -> dbias float32 of bias's shape (attn_bwd_dbias below).
_def.define("attn_bwd_dbias(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
            "Tensor saved, Tensor bias, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
            f"{_SCALARS}) -> (Tensor, Tensor, Tensor, Tensor)",
            tags=(torch.Tag.pt2_compliant_tag,))
attn_fwd_op = torch.ops.fattn.attn_fwd.default
attn_bwd_op = torch.ops.fattn.attn_bwd.default
attn_bwd_dbias_op = torch.ops.fattn.attn_bwd_dbias.default


def _load_shim():
    """Loads the compiled ops next to the library if they were built for this torch; returns
    (loaded, what host_path() reports)."""
    if os.environ.get("FATTN_TORCH_SHIM", "1") == "0":
        return False, "ctypes (FATTN_TORCH_SHIM=0)"
    try:
        libdir = os.path.dirname(_lib.library_path())
    except ImportError as e:  # no library at all: every call fails with this error anyway
        return False, f"ctypes (no library: {e})"
    # Installed: beside the library. Source tree (the library of pip's build cache): the
    # shim's own build folder.
    for d in (libdir, os.path.join(libdir, "python", "csrc")):
        path, stamp = os.path.join(d, "libfattn_torch.so"), os.path.join(d, "fattn_torch.txt")
        if os.path.isfile(path) and os.path.isfile(stamp):
            break
    else:
        return False, "ctypes (the compiled ops were not built: pip install --no-build-isolation)"
    with open(stamp) as f:
        built_for = f.read().strip()
    if built_for != torch.__version__:
        return False, (f"ctypes (the compiled ops were built for torch {built_for}, this is "
                       f"{torch.__version__}: reinstall fattn)")
    # The C++ runtime into the global symbol scope first. torch's own libraries load it
    # privately, so the shim's weak copies of libstdc++ template members (GCC 13 emits some; the
    # error text c10::str builds uses std::ostream's number insertion) would bind to themselves,
    # with facet ids of their own: the first error message then segfaulted (GPU machine, GCC
    # 13.3, test_error_dtype_mix). Global, the one runtime's definitions win.
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass  # no GNU C++ runtime by that name: nothing to share
    try:
        torch.ops.load_library(path)
    except OSError as e:
        return False, f"ctypes (the compiled ops failed to load: {e})"
    return True, f"compiled ({path}, torch {built_for})"


_SHIM, _HOST_PATH = _load_shim()


def host_path() -> str:
    """How the torch ops reach the library: "compiled (...)" for the C++ kernels of the
    compiled shim, "ctypes (why)" for the Python ones."""
    return _HOST_PATH


_SHIM_ERR = re.compile(r"^fattn\[(\d+)\] ")


def shim_error(e: RuntimeError) -> RuntimeError:
    """The compiled kernels raise RuntimeError("fattn[status] what: ..."): as FattnError with
    the ctypes kernels' text ("fattn: what: ...")."""
    text = str(e).split("\n", 1)[0]
    m = _SHIM_ERR.match(text)
    if m is None:
        return e
    return _lib.FattnError(int(m.group(1)), "fattn: " + text[m.end():])

_PLAN_CAP = 256  # plans kept per thread (a training loop has a handful of shapes)


def params(bias, cu_q, cu_k, causal, wl, wr, walign, scale, msq, msk, prec, algo,
           bias_view=None) -> _lib.AttnParams:
    p = lib().fattn_attn_params_default()
    p.scale = scale
    if bias is not None:
        p.bias = bias_view if bias_view is not None else view(bias, "bias")
    p.causal = causal
    p.window_left, p.window_right, p.window_align = wl, wr, walign
    if cu_q is not None:
        p.cu_seqlens_q = ptr(cu_q)
        p.cu_seqlens_kv = ptr(cu_k)
        p.num_seqs = cu_q.numel() - 1
    p.max_seqlen_q, p.max_seqlen_kv = msq, msk
    p.prec, p.algo = prec, algo
    return p


def _same_device(q: Tensor, named) -> None:
    dev = q.device
    for name, t in named:
        if t is not None and t.device != dev:
            raise ValueError(f"fattn: {name} is on {t.device} but q is on {dev}: all "
                             "tensors of a call must be on one device")


def _four_dims(named) -> None:
    for name, t in named:
        if t.dim() != 4:
            raise ValueError(f"fattn: {name} must have 4 dims, got shape {tuple(t.shape)}")


def _meta(t: Optional[Tensor]):
    return None if t is None else (t.shape, t.stride(), t.dtype)


def _size(fn, ctx, args, what: str) -> int:
    n = ctypes.c_size_t()
    check(ctx, fn(ctx, *args, ctypes.byref(n)), what)
    return n.value


def _plans() -> dict:
    tls = _lib.thread_state()
    plans = getattr(tls, "attn_plans", None)
    if plans is None:
        plans = tls.attn_plans = {}
    elif len(plans) >= _PLAN_CAP:
        plans.clear()
    return plans


class _FwdPlan:
    __slots__ = ("p", "qv", "kv", "vv", "ov", "lv", "n_saved", "ws_bytes")


class _BwdPlan:
    __slots__ = ("p", "qv", "kv", "vv", "ov", "lv", "dov", "dqv", "dkv", "dvv", "ws_bytes")


_CPU_WS_KEEP = 256 << 20  # CPU workspaces up to this size are kept per thread between calls


def _alloc_ws(n: int, device) -> Optional[Tensor]:
    """The call's workspace. CPU calls are synchronous, so one per-thread buffer serves every
    call (an allocation per call costs more than a tiny call's kernel, and re-faults the pages
    of a large one); CUDA workspaces come from torch's stream-ordered caching allocator."""
    if not n:
        return None
    if device.type != "cpu" or n > _CPU_WS_KEEP:
        return torch.empty(n, dtype=torch.uint8, device=device)
    tls = _lib.thread_state()
    ws = getattr(tls, "cpu_ws", None)
    if ws is None or ws.numel() < n:
        ws = tls.cpu_ws = torch.empty(n, dtype=torch.uint8)
    return ws


# ------------------------------------------------------------------------------- forward
def _fwd(q, k, v, bias, cu_q, cu_k, *scalars):
    _same_device(q, (("k", k), ("v", v), ("bias", bias), ("cu_seqlens_q", cu_q),
                     ("cu_seqlens_k", cu_k)))
    _four_dims((("q", q), ("k", k), ("v", v)))
    c = _lib.context_entry(q.device)
    ctx, L, dev = c.handle, lib(), q.device
    B, Sq, Hq, _ = q.shape
    # empty_like is the cheapest allocation (~2 µs against ~8 µs for torch.empty(shape, ...))
    o = (torch.empty_like(q, memory_format=torch.contiguous_format) if v.shape[3] == q.shape[3]
         else torch.empty((B, Sq, Hq, v.shape[3]), dtype=q.dtype, device=dev))
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=dev)
    key = None if cu_q is not None else (
        "f", c.key, q.shape, q.stride(), q.dtype, k.shape, k.stride(), v.shape, v.stride(),
        _meta(bias)) + scalars
    plan = None if key is None else _plans().get(key)
    if plan is None:
        plan = _FwdPlan()
        plan.p = params(bias, cu_q, cu_k, *scalars)
        plan.qv, plan.kv, plan.vv = view(q, "q"), view(k, "k"), view(v, "v")
        args = (ctypes.byref(plan.p), ctypes.byref(plan.qv), ctypes.byref(plan.kv),
                ctypes.byref(plan.vv))
        # saved_size validates every argument first: a bad call fails before any allocation.
        plan.n_saved = _size(L.fattn_attn_saved_size, ctx, args, "attn_fwd")
        plan.ws_bytes = _size(L.fattn_attn_workspace_size, ctx, args + (_lib.DIR_FWD,),
                              "attn_workspace_size")
        plan.ov, plan.lv = view(o, "o"), lse_view(lse)
        if key is not None:
            _plans()[key] = plan
    else:
        if bias is not None:
            plan.p.bias.data = bias.data_ptr() or None
        plan.qv.data, plan.kv.data = q.data_ptr() or None, k.data_ptr() or None
        plan.vv.data = v.data_ptr() or None
        plan.ov.data, plan.lv.data = o.data_ptr() or None, lse.data_ptr() or None
    saved = torch.empty(plan.n_saved, dtype=torch.uint8, device=dev)
    ws = _alloc_ws(plan.ws_bytes, dev)
    check(ctx, L.fattn_attn_fwd(ctx, plan.p, plan.qv, plan.kv, plan.vv, plan.ov, plan.lv,
                                ptr(saved), ptr(ws), plan.ws_bytes), "attn_fwd")
    return o, lse, saved


def _fwd_kernel(*args):
    with _lib.device_guard(args[0].device):
        return _fwd(*args)


@torch.library.register_fake("fattn::attn_fwd")
def _fwd_fake(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, causal, window_left, window_right,
              window_align, scale, max_seqlen_q, max_seqlen_k, prec, algo):
    B, Sq, Hq, _ = q.shape
    o = q.new_empty((B, Sq, Hq, v.shape[3]))
    lse = q.new_empty((B, Hq, Sq), dtype=torch.float32)
    if algo == _lib.ALGO["exact"]:
        # The probabilities' byte count is the backend's business: an unbacked size.
        n = torch.library.get_ctx().new_dynamic_size()
    else:
        n = 0  # FUSED keeps nothing but o and lse (fattn.h: saved size 0)
    return o, lse, q.new_empty((n,), dtype=torch.uint8)


# ------------------------------------------------------------------------------- backward
def _dout_for_library(dout, scalars):
    """The incoming gradient as the library takes it. Autograd hands over whatever layout the next
    op produced (e.g. an expanded scalar gradient with stride 0); the library needs unit innermost
    stride, and the CUDA exact arm (cuBLAS) a token stride >= Dv, checked only at call time.
    Inputs q/k/v are never copied: this is the incoming gradient only."""
    if dout.dim() == 4 and (dout.stride(3) != 1 or (scalars[-1] == _lib.ALGO["exact"] and
                                                    dout.is_cuda and dout.stride(1) < dout.shape[3])):
        return dout.contiguous()
    return dout


def _bwd(dout, q, k, v, o, lse, saved, bias, cu_q, cu_k, *scalars):
    _same_device(q, (("dout", dout), ("k", k), ("v", v), ("o", o), ("lse", lse),
                     ("bias", bias), ("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)))
    dout = _dout_for_library(dout, scalars)
    _four_dims((("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout)))
    c = _lib.context_entry(q.device)
    ctx, L, dev = c.handle, lib(), q.device
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    key = None if cu_q is not None else (
        "b", c.key, q.shape, q.stride(), q.dtype, k.shape, k.stride(), v.shape, v.stride(),
        _meta(bias), dout.shape, dout.stride(), o.stride(), lse.stride(), saved.numel()) + scalars
    plan = None if key is None else _plans().get(key)
    if plan is None:
        plan = _BwdPlan()
        plan.p = params(bias, cu_q, cu_k, *scalars)
        plan.qv, plan.kv, plan.vv = view(q, "q"), view(k, "k"), view(v, "v")
        plan.ws_bytes = _size(L.fattn_attn_workspace_size, ctx,
                              (ctypes.byref(plan.p), ctypes.byref(plan.qv), ctypes.byref(plan.kv),
                               ctypes.byref(plan.vv), _lib.DIR_BWD), "attn_workspace_size")
        plan.ov, plan.lv, plan.dov = view(o, "o"), lse_view(lse), view(dout, "dout")
        plan.dqv, plan.dkv, plan.dvv = view(dq, "dq"), view(dk, "dk"), view(dv, "dv")
        if key is not None:
            _plans()[key] = plan
    else:
        if bias is not None:
            plan.p.bias.data = bias.data_ptr() or None
        for vw, t in ((plan.qv, q), (plan.kv, k), (plan.vv, v), (plan.ov, o), (plan.lv, lse),
                      (plan.dov, dout), (plan.dqv, dq), (plan.dkv, dk), (plan.dvv, dv)):
            vw.data = t.data_ptr() or None
    ws = _alloc_ws(plan.ws_bytes, dev)
    check(ctx, L.fattn_attn_bwd(ctx, plan.p, plan.qv, plan.kv, plan.vv, plan.ov, plan.lv,
                                ptr(saved), plan.dov, plan.dqv, plan.dkv, plan.dvv, ptr(ws),
                                plan.ws_bytes), "attn_bwd")
    return dq, dk, dv


def _bwd_kernel(*args):
    with _lib.device_guard(args[1].device):
        return _bwd(*args)


def _bwd_dbias(dout, q, k, v, o, lse, saved, bias, cu_q, cu_k, *scalars):
    """fattn::attn_bwd_dbias's kernel (fattn_attn_bwd_ex): dq, dk, dv and dbias = the gradient
    of bias as a tensor broadcast to [B, Hq, Sq, Skv], float32 of bias's shape: summed over
    its size-1 dims (inside the library, in a fixed order), per element elsewhere. bias is
    [B|1, Hq|1, Sq|1, Skv|1]; the library's view of it is made here (query dim expanded by
    stride 0; copied dense when its key dim is size 1 or strided, or a dim of size > 1 has
    stride 0), so the output shape never depends on strides. No plan cache."""
    dout = _dout_for_library(dout, scalars)
    _same_device(q, (("dout", dout), ("k", k), ("v", v), ("o", o), ("lse", lse),
                     ("bias", bias), ("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)))
    _four_dims((("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout), ("bias", bias)))
    shape = bias.shape
    Sq, Skv = q.shape[1], k.shape[1]
    if (shape[3] != Skv or bias.stride(3) != 1
            or any(bias.shape[d] > 1 and bias.stride(d) == 0 for d in range(3))):
        # Distinct elements only in bias's own shape, keys dense (the library reads a key row
        # with stride 1 and sums over every dim it steps by 0).
        bias = bias.expand(shape[0], shape[1], shape[2], Skv).contiguous()
    lib_bias = bias.expand(shape[0], shape[1], Sq, Skv)
    c = _lib.context_entry(q.device)
    ctx, L = c.handle, lib()
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    dbias = torch.empty((shape[0], shape[1], shape[2], Skv), dtype=torch.float32, device=q.device)
    p = params(lib_bias, cu_q, cu_k, *scalars)
    qv, kv, vv = view(q, "q"), view(k, "k"), view(v, "v")
    # dbias needs no workspace beyond the plain backward's (fattn.h)
    ws_bytes = _size(L.fattn_attn_workspace_size, ctx,
                     (ctypes.byref(p), ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv),
                      _lib.DIR_BWD), "attn_workspace_size")
    ws = _alloc_ws(ws_bytes, q.device)
    check(ctx, L.fattn_attn_bwd_ex(ctx, p, qv, kv, vv, view(o, "o"), lse_view(lse), ptr(saved),
                                   view(dout, "dout"), view(dq, "dq"), view(dk, "dk"),
                                   view(dv, "dv"), view(dbias, "dbias"), ptr(ws), ws_bytes),
          "attn_bwd")
    if shape[3] != Skv:  # a size-1 key dim: its keys' gradients summed
        dbias = dbias.sum(3, keepdim=True)
    return dq, dk, dv, dbias


def attn_bwd_dbias(*args):
    with _lib.device_guard(args[1].device):
        return _bwd_dbias(*args)


@torch.library.register_fake("fattn::attn_bwd")
def _bwd_fake(dout, q, k, v, o, lse, saved, bias, cu_seqlens_q, cu_seqlens_k, *scalars):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake("fattn::attn_bwd_dbias")
def _bwd_dbias_fake(dout, q, k, v, o, lse, saved, bias, cu_seqlens_q, cu_seqlens_k, *scalars):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            bias.new_empty(bias.shape, dtype=torch.float32))


# The bias backward has Python kernels whether or not the compiled ops are loaded.
_def.impl("attn_bwd_dbias", attn_bwd_dbias, "CPU")
_def.impl("attn_bwd_dbias", attn_bwd_dbias, "CUDA")


if not _SHIM:
    for _name, _kernel in (("attn_fwd", _fwd_kernel), ("attn_bwd", _bwd_kernel)):
        _def.impl(_name, _kernel, "CPU")
        _def.impl(_name, _kernel, "CUDA")


# ------------------------------------------------------------------------------- autograd
# Below Autograd, plain CPU / CUDA tensors reach the backend kernel with nothing in between, so
# for them the kernel is called directly instead of through a second Python redispatch (~20 µs);
# anything else (fake tensors under torch.compile, functionalization, a Python dispatch mode)
# goes through the dispatcher.
_DIRECT = (torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA)


def _below_autograd(op, kernel, keyset, args):
    ks = keyset & torch._C._after_autograd_keyset
    with torch._C._AutoDispatchBelowAutograd():
        if ks.highestPriorityTypeId() in _DIRECT:
            return kernel(*args)
        return op.redispatch(ks, *args)


_BACKEND_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)  # "below autograd: plain"


def eager_plain(device_type: str, tensors) -> bool:
    """May an eager call skip the dispatcher? Only for plain tensors with nothing that
    intercepts ops: no torch.compile tracing, no dispatch or function mode (FakeTensor,
    FlopCounter, ...), no functorch transform, no autocast region, no profiler (which should
    see the op). Then the dispatcher would route straight to this file's kernels, so calling
    them is the same computation minus two Python round trips (~25 µs per direction)."""
    if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
            or torch._C._is_torch_function_mode_enabled()
            or torch._C._are_functorch_transforms_active()
            or torch.is_autocast_enabled(device_type) or torch.autograd._profiler_enabled()):
        return False
    for t in tensors:
        if t is not None and type(t) is not Tensor:
            return False
    return True


def attn_fwd(q, k, v, bias, cu_q, cu_k, scalars):
    """fattn::attn_fwd with autograd, for attention(): with the compiled ops, the op (C++ from
    the dispatcher on); else the op through the dispatcher, or its Python kernels directly
    where eager_plain() allows."""
    if _SHIM:
        try:
            return attn_fwd_op(q, k, v, bias, cu_q, cu_k, *scalars)
        except RuntimeError as e:
            raise shim_error(e) from None
    if q.device.type not in ("cpu", "cuda") or not eager_plain(q.device.type, (q, k, v, bias)):
        return attn_fwd_op(q, k, v, bias, cu_q, cu_k, *scalars)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _AttnFn.apply(_BACKEND_KEYSET, scalars, q, k, v, bias, cu_q, cu_k)
    return _fwd_kernel(q, k, v, bias, cu_q, cu_k, *scalars)


def forward_saved(ctx, scalars, outs, saved):
    """An autograd.Function's forward bookkeeping: saves the tensors and the scalars for the
    backward, marks every output but the first non-differentiable, returns the outputs."""
    ctx.save_for_backward(*saved)
    ctx.scalars = scalars
    ctx.mark_non_differentiable(*outs[1:])
    return outs


def backward_call(kernel, op, args):
    """An autograd.Function's backward: the Python kernel directly for a plain eager call whose
    incoming gradient needs no graph (args[0] is it, args[1] is q), else the op (double backward,
    torch.compile, modes)."""
    if not args[0].requires_grad and eager_plain(args[1].device.type, args[:2]):
        return kernel(*args)
    return op(*args)


class _AttnFn(torch.autograd.Function):
    """fattn::attn_fwd's autograd formula: fattn::attn_bwd. No gradient to bias or through lse
    (marked non-differentiable rather than returning zeros)."""

    # The nine scalars travel as one tuple: autograd.Function.apply costs ~1.3 µs per argument.
    @staticmethod
    def forward(ctx, keyset, scalars, q, k, v, bias, cu_q, cu_k):
        o, lse, saved = _below_autograd(attn_fwd_op, _fwd_kernel, keyset,
                                        (q, k, v, bias, cu_q, cu_k) + scalars)
        return forward_saved(ctx, scalars, (o, lse, saved), (q, k, v, o, lse, saved, bias, cu_q, cu_k))

    @staticmethod
    def backward(ctx, do, _dlse, _dsaved):
        q, k, v, o, lse, saved, bias, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = backward_call(_bwd_kernel, attn_bwd_op,
                                   (do, q, k, v, o, lse, saved, bias, cu_q, cu_k) + ctx.scalars)
        return None, None, dq, dk, dv, None, None, None


def _fwd_autograd(keyset, *args):
    if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return _AttnFn.apply(keyset, args[6:], *args[:6])
    return _below_autograd(attn_fwd_op, _fwd_kernel, keyset, args)


def _bwd_autograd(keyset, *args):
    # No double backward: the gradients are computed below autograd and carry no graph.
    return _below_autograd(attn_bwd_op, _bwd_kernel, keyset, args)


def _bwd_dbias_autograd(keyset, *args):
    # No double backward either.
    return _below_autograd(attn_bwd_dbias_op, attn_bwd_dbias, keyset, args)


if not _SHIM:
    _def.impl("attn_fwd", _fwd_autograd, "Autograd", with_keyset=True)
    _def.impl("attn_bwd", _bwd_autograd, "Autograd", with_keyset=True)
_def.impl("attn_bwd_dbias", _bwd_dbias_autograd, "Autograd", with_keyset=True)


# ------------------------------------------------------------------------------- autocast
# SDPA's rule under autocast: its floating inputs (q, k, v and the mask; not float64) are cast
# to the region's lower-precision dtype and the op runs in it, on the CPU as on CUDA.
# torch.library.register_autocast casts to one dtype fixed at registration, so the kernel below
# is its same mechanism (Autocast dispatch keys, autocast excluded inside) reading the region's
# dtype per call: autocast(bfloat16) gives bf16, autocast(float16) f16. Only the forward is
# registered: the backward runs on the tensors the forward saved, in their dtype.
_AUTOCAST_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA))


def autocast_cast(a, device_type: str, dt):
    """SDPA's autocast rule for one argument: a floating tensor (not float64) on the region's
    device goes to the region's dtype dt; anything else is left as is."""
    if (isinstance(a, Tensor) and a.is_floating_point() and a.dtype != torch.float64
            and a.device.type == device_type):
        return a.to(dt)
    return a


def _autocast_kernel(device_type: str):
    def kernel(_keyset, *args):
        dt = torch.get_autocast_dtype(device_type)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return attn_fwd_op(*(autocast_cast(a, device_type, dt) for a in args))
    return kernel


for _dev, _key in (("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")):
    _def.impl("attn_fwd", _autocast_kernel(_dev), _key, with_keyset=True)
