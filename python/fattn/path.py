"""fattn.path — PaTH attention for PyTorch (CPU and CUDA), a thin ctypes client of the C API.

    from fattn.path import path_attention
    o = path_attention(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None)

    # FlashLinearAttention's name, argument order and return value: switch by the import
    from fattn.path import parallel_path_attn      # was: from fla.ops.path_attn import ...
    o, _ = parallel_path_attn(q, k, v, w, beta, g, scale, cu_seqlens)

Shapes as FLA's parallel_path_attn: q [B, T, Hq, K], k/w [B, T, H, K], v [B, T, H, V],
beta [B, T, H] float32, g [B, T, Hq] float32 (log forget gate, prefix-summed inside) or None.
q/k/v: float32 (TF32 tensor cores on CUDA), float16 or bfloat16; all tensors on one device.
cu_seqlens: int32 or int64 tensor [N+1] on any device (B must be 1; it is read on the host, so a
CUDA tensor costs one copy per forward, which waits for the stream: the backward reuses the
forward's host copy). The output has q's dtype; gradients flow to q, k, v, w, beta and g.
check="strict" (default) rejects |w_t| != 1 or beta outside [0, 2] naming the token (on CUDA the
check synchronizes the stream once per call); "none" skips it. Deterministic: the same inputs
give the same bits. Registered as the torch ops fattn::path_fwd / fattn::path_bwd with fake
kernels (torch.compile) and an autograd formula; an eager call on plain tensors runs the same
kernels without the dispatcher (_PathFn). Workspaces come from torch's allocator.
"""
import ctypes
from typing import Optional

import torch

from ._lib import Tensor, check, context, device_guard, lib, lse_view, view
from ._ops import backward_call, eager_plain, forward_saved, shim_error

__all__ = ["path_attention", "parallel_path_attn", "path_memory"]

_P = ctypes.POINTER
_c = ctypes.c_void_p


class PathParams(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("cu_seqlens", ctypes.c_void_p),
                ("num_seqs", ctypes.c_int64), ("history", ctypes.c_int), ("check", ctypes.c_int),
                ("check_tol", ctypes.c_float)]


class PathMemoryInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "inputs_bytes", "saved_bytes", "fwd_workspace_bytes", "bwd_workspace_bytes",
        "history_packed_bytes", "history_rectangular_bytes", "grads_bytes", "fwd_peak_bytes",
        "bwd_peak_bytes")]


class PathWorkspaceInfo(ctypes.Structure):
    _fields_ = [("total_bytes", ctypes.c_uint64), ("history_bytes", ctypes.c_uint64)]


_T = _P(Tensor)
_SIGS = {
    "fattn_path_params_default": (PathParams, []),
    "fattn_path_fwd": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 8 + [_c, ctypes.c_size_t]),
    "fattn_path_bwd": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 15 + [_c, ctypes.c_size_t]),
    "fattn_path_memory": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 6 + [_P(PathMemoryInfo)]),
    "fattn_path_workspace_size": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 6 +
                                  [ctypes.c_int, _P(PathWorkspaceInfo)]),
}
_fns = {}
_HISTORY = {"packed": 0, "rectangular": 1}
_CHECK = {"strict": 0, "none": 1}


def _fn(name):
    if name not in _fns:
        f = getattr(lib()._handle, name)
        f.restype, f.argtypes = _SIGS[name]
        _fns[name] = f
    return _fns[name]


def _params(scale, cu, history, check_mode):
    p = _fn("fattn_path_params_default")()
    p.scale = float(scale)
    if cu is not None and cu.numel():
        p.cu_seqlens = cu.data_ptr()
        p.num_seqs = cu.numel() - 1
    p.history = int(history)
    p.check = int(check_mode)
    return p


def _host_cu(cu: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """cu_seqlens as the library reads it: int32 in host memory (values past INT32_MAX are
    rejected by the library by name, never wrapped: int64 is checked before the cast)."""
    if cu is None or cu.numel() == 0:
        return None
    c = cu.detach().to("cpu")
    if c.dtype == torch.int64 and c.numel() and int(c.max()) > 2**31 - 1:
        raise ValueError("fattn: cu_seqlens: offsets past 2^31 - 1 cannot index the tokens")
    return c.to(torch.int32).contiguous()


def _v1(t: Optional[torch.Tensor], name: str) -> Tensor:
    """[B, T, H] -> view with ne = [B, T, H, 1]."""
    return view(None if t is None or t.numel() == 0 and t.dim() == 1 else t.unsqueeze(-1), name)


def _workspace(ctx, p, ins, direction, device) -> torch.Tensor:
    wi = PathWorkspaceInfo()
    check(ctx, _fn("fattn_path_workspace_size")(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in ins],
                                                direction, ctypes.byref(wi)), "path_workspace_size")
    return torch.empty(max(int(wi.total_bytes), 1), dtype=torch.uint8, device=device)


# ---- the ops: fattn::path_fwd, fattn::path_bwd (a gate-less call passes g as an empty tensor) ----
_lib_def = torch.library.Library("fattn", "FRAGMENT")
# path_fwd's third output is cu_seqlens as the library reads it (int32, host; empty when dense),
# saved for the backward so that it does not copy a CUDA cu_seqlens again (a copy that waits for
# the stream, with the backward's launches behind it)
_lib_def.define("path_fwd(Tensor q, Tensor k, Tensor v, Tensor w, Tensor beta, Tensor? g, Tensor? cu_seqlens, "
                "float scale, int history, int check) -> (Tensor, Tensor, Tensor)")
_lib_def.define("path_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor w, Tensor beta, Tensor? g, "
                "Tensor o, Tensor lse, Tensor? cu_seqlens, float scale, int history, int check) "
                "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")


def _path_call(direction, q, k, v, w, beta, g, cu, scale, history, check_mode, outs):
    """fattn_path_fwd (direction 0) or fattn_path_bwd (1) on q's device: the views of q, k, v, w,
    beta and g, then those outs() makes, and a workspace of the size the library asks for. cu:
    _host_cu's result."""
    name = ("path_fwd", "path_bwd")[direction]
    with device_guard(q.device):
        ctx = context(q.device)
        p = _params(scale, cu, history, check_mode)
        ins = [view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), _v1(beta, "beta"), _v1(g, "g")]
        ws = _workspace(ctx, p, ins, direction, q.device)
        vs = ins + outs()
        check(ctx, _fn("fattn_" + name)(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in vs],
                                        ws.data_ptr(), ws.numel()), name)


def _path_fwd(q, k, v, w, beta, g, cu_seqlens, scale, history, check_mode):
    B, T, HQ, _ = q.shape
    o = torch.empty(B, T, HQ, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(B, HQ, T, dtype=torch.float32, device=q.device)
    cu = _host_cu(cu_seqlens)
    _path_call(0, q, k, v, w, beta, g, cu, scale, history, check_mode, lambda: [view(o, "o"), lse_view(lse)])
    # a tensor of its own (an op's output never aliases its input)
    cu_host = cu.clone() if cu is not None else torch.empty(0, dtype=torch.int32)
    return o, lse, cu_host


def _path_bwd(dout, q, k, v, w, beta, g, o, lse, cu_seqlens, scale, history, check_mode):
    dout = dout.to(q.dtype).contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dw, dbeta = torch.empty_like(w), torch.empty_like(beta)
    dg = torch.empty_like(g) if g is not None else torch.empty(0, dtype=torch.float32, device=q.device)
    _path_call(1, q, k, v, w, beta, g, _host_cu(cu_seqlens), scale, history, check_mode,
               lambda: [view(o, "o"), lse_view(lse), view(dout, "dout"), view(dq, "dq"), view(dk, "dk"),
                        view(dv, "dv"), view(dw, "dw"), _v1(dbeta, "dbeta"),
                        _v1(dg if g is not None else None, "dg")])
    return dq, dk, dv, dw, dbeta, dg


# The compiled module (python/csrc/path_ops.cpp, loaded by _ops.py with the softmax ops) brings
# the CPU, CUDA and Autograd kernels of both ops; without it they are this file's.
_SHIM = torch._C._dispatch_has_kernel_for_dispatch_key("fattn::path_fwd", "CPU")
if not _SHIM:
    for _key in ("CPU", "CUDA"):
        _lib_def.impl("path_fwd", _path_fwd, _key)
        _lib_def.impl("path_bwd", _path_bwd, _key)


@torch.library.register_fake("fattn::path_fwd")
def _path_fwd_fake(q, k, v, w, beta, g, cu_seqlens, scale, history, check_mode):
    B, T, HQ, _ = q.shape
    n = cu_seqlens.numel() if cu_seqlens is not None else 0
    return (q.new_empty(B, T, HQ, v.shape[-1]), q.new_empty(B, HQ, T, dtype=torch.float32),
            torch.empty(n, dtype=torch.int32, device="cpu"))


@torch.library.register_fake("fattn::path_bwd")
def _path_bwd_fake(dout, q, k, v, w, beta, g, o, lse, cu_seqlens, scale, history, check_mode):
    dg = torch.empty_like(g) if g is not None else q.new_empty(0, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(w), \
        torch.empty_like(beta), dg


def _setup_context(ctx, inputs, output):
    q, k, v, w, beta, g, _, scale, history, check_mode = inputs
    o, lse, cu_host = output
    ctx.save_for_backward(q, k, v, w, beta, g, o, lse, cu_host if cu_host.numel() else None)
    ctx.meta = (scale, history, check_mode)


def _backward(ctx, do, dlse, dcu):
    q, k, v, w, beta, g, o, lse, cu = ctx.saved_tensors
    scale, history, check_mode = ctx.meta
    dq, dk, dv, dw, dbeta, dg = torch.ops.fattn.path_bwd(do, q, k, v, w, beta, g, o, lse, cu, scale, history,
                                                         check_mode)
    return dq, dk, dv, dw, dbeta, (dg if g is not None else None), None, None, None, None


if not _SHIM:
    torch.library.register_autograd("fattn::path_fwd", _backward, setup_context=_setup_context)


class _PathFn(torch.autograd.Function):
    """The eager form of fattn::path_fwd's autograd formula (fattn::path_bwd), for plain tensors
    (eager_plain): the backend kernels called directly, without register_autograd's wrapper and
    two dispatcher round trips per direction. The same kernels in the same order as the op: the
    same bits."""

    # The three scalars travel as one tuple (autograd.Function.apply costs per argument)
    @staticmethod
    def forward(ctx, scalars, q, k, v, w, beta, g, cu_seqlens):
        o, lse, cu_host = _path_fwd(q, k, v, w, beta, g, cu_seqlens, *scalars)
        return forward_saved(ctx, scalars, (o, lse, cu_host),
                             (q, k, v, w, beta, g, o, lse, cu_host if cu_host.numel() else None))

    @staticmethod
    def backward(ctx, do, _dlse, _dcu):
        q, k, v, w, beta, g, o, lse, cu = ctx.saved_tensors
        dq, dk, dv, dw, dbeta, dg = backward_call(_path_bwd, torch.ops.fattn.path_bwd.default,
                                                  (do, q, k, v, w, beta, g, o, lse, cu) + ctx.scalars)
        return None, dq, dk, dv, dw, dbeta, (dg if g is not None else None), None


def path_attention(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, history="packed",
                   check="strict"):
    """PaTH attention output o [B, T, Hq, V] (see the module docstring)."""
    scalars = (0.0 if scale is None else float(scale), _HISTORY[history], _CHECK[check])  # scale 0: K^-0.5
    ts = (q, k, v, w, beta, g, cu_seqlens)
    if _SHIM:
        try:
            return torch.ops.fattn.path_fwd(*ts, *scalars)[0]
        except RuntimeError as e:
            raise shim_error(e) from None
    if q.device.type in ("cpu", "cuda") and eager_plain(q.device.type, ts):
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts[:6]):
            return _PathFn.apply(scalars, *ts)[0]
        return _path_fwd(*ts, *scalars)[0]
    return torch.ops.fattn.path_fwd(*ts, *scalars)[0]


def parallel_path_attn(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, use_cache=False):
    """FLA's signature and return value (o, k_cache); k_cache is not computed (use_cache=True
    raises NotImplementedError: fattn trains, the decoding cache is FLA's)."""
    if use_cache:
        raise NotImplementedError("fattn.path.parallel_path_attn: use_cache (the decoding k cache) is not provided")
    return path_attention(q, k, v, w, beta, g, scale, cu_seqlens), None


def path_memory(q, k, v, w, beta, g=None, history="packed", cu_seqlens=None):
    """The library's memory model for these shapes (and sequence lengths), as a dict of bytes."""
    cu = _host_cu(cu_seqlens)
    with device_guard(q.device):
        ctx = context(q.device)
        p = _params(0.0, cu, _HISTORY[history], 0)
        m = PathMemoryInfo()
        vs = [view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), _v1(beta, "beta"), _v1(g, "g")]
        check(ctx, _fn("fattn_path_memory")(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in vs],
                                            ctypes.byref(m)), "path_memory")
    return {n: getattr(m, n) for n, _ in PathMemoryInfo._fields_}
