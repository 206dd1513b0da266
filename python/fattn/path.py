"""fattn.path — PaTH attention (CPU backend) for PyTorch, a thin ctypes client of the C API.

    from fattn.path import path_attention
    o = path_attention(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None)

Shapes as FLA's parallel_path_attn: q [B, T, Hq, K], k/w [B, T, H, K], v [B, T, H, V],
beta [B, T, H] float32, g [B, T, Hq] float32 (log forget gate, prefix-summed inside) or None.
q/k/v: float32, float16 or bfloat16. cu_seqlens: int tensor [N+1] (B must be 1). The output has
q's dtype; gradients flow to q, k, v, w, beta and g (torch.autograd.Function calling
fattn_path_bwd). check="strict" (default) rejects |w_t| != 1 or beta outside [0, 2];
"none" computes the definition as is. CPU tensors only in this version (the library answers
FATTN_ERR_UNSUPPORTED on CUDA).
"""
import ctypes
from typing import Optional

import torch

from ._lib import Tensor, check, context, lib, lse_view, view

__all__ = ["path_attention", "path_memory"]

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


_T = _P(Tensor)
_SIGS = {
    "fattn_path_params_default": (PathParams, []),
    "fattn_path_fwd": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 8 + [_c, ctypes.c_size_t]),
    "fattn_path_bwd": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 15 + [_c, ctypes.c_size_t]),
    "fattn_path_memory": (ctypes.c_int, [_c, _P(PathParams)] + [_T] * 6 + [_P(PathMemoryInfo)]),
}
_fns = {}


def _fn(name):
    if name not in _fns:
        f = getattr(lib()._handle, name)
        f.restype, f.argtypes = _SIGS[name]
        _fns[name] = f
    return _fns[name]


def _params(scale, cu, history, check_mode):
    p = _fn("fattn_path_params_default")()
    p.scale = 0.0 if scale is None else float(scale)
    if cu is not None:
        p.cu_seqlens = cu.data_ptr()
        p.num_seqs = cu.numel() - 1
    p.history = {"packed": 0, "rectangular": 1}[history]
    p.check = {"strict": 0, "none": 1}[check_mode]
    return p


def _v1(t: Optional[torch.Tensor], name: str) -> Tensor:
    """[B, T, H] -> view with ne = [B, T, H, 1]."""
    return view(None if t is None else t.unsqueeze(-1), name)


class _PathFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx, q, k, v, w, beta, g, scale, cu, history, check_mode):
        B, T, HQ, _ = q.shape
        o = torch.empty(B, T, HQ, v.shape[-1], dtype=q.dtype)
        lse = torch.empty(B, HQ, T, dtype=torch.float32)
        ctx = context(q.device)
        p = _params(scale, cu, history, check_mode)
        vs = [view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), _v1(beta, "beta"), _v1(g, "g"),
              view(o, "o"), lse_view(lse)]
        check(ctx, _fn("fattn_path_fwd")(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in vs], None, 0),
              "path_fwd")
        fctx.save_for_backward(q, k, v, w, beta, g, o, lse)
        fctx.meta = (scale, cu, history, check_mode)
        return o

    @staticmethod
    def backward(fctx, do):
        q, k, v, w, beta, g, o, lse = fctx.saved_tensors
        scale, cu, history, check_mode = fctx.meta
        do = do.to(q.dtype).contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dw, dbeta = torch.empty_like(w), torch.empty_like(beta)
        dg = torch.empty_like(g) if g is not None else None
        ctx = context(q.device)
        p = _params(scale, cu, history, check_mode)
        vs = [view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), _v1(beta, "beta"), _v1(g, "g"),
              view(o, "o"), lse_view(lse), view(do, "dout"), view(dq, "dq"), view(dk, "dk"),
              view(dv, "dv"), view(dw, "dw"), _v1(dbeta, "dbeta"), _v1(dg, "dg")]
        check(ctx, _fn("fattn_path_bwd")(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in vs], None, 0),
              "path_bwd")
        return dq, dk, dv, dw, dbeta, dg, None, None, None, None


def path_attention(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, history="packed",
                   check="strict"):
    """PaTH attention output o [B, T, Hq, V] (see the module docstring)."""
    cu = None
    if cu_seqlens is not None:
        cu = cu_seqlens.to(device="cpu", dtype=torch.int32).contiguous()
    return _PathFn.apply(q, k, v, w, beta, g, scale, cu, history, check)


def path_memory(q, k, v, w, beta, g=None, history="packed"):
    """The library's memory model for these shapes, as a dict of bytes."""
    ctx = context(q.device)
    p = _params(None, None, history, "strict")
    m = PathMemoryInfo()
    vs = [view(q, "q"), view(k, "k"), view(v, "v"), view(w, "w"), _v1(beta, "beta"), _v1(g, "g")]
    check(ctx, _fn("fattn_path_memory")(ctx, ctypes.byref(p), *[ctypes.byref(x) for x in vs],
                                        ctypes.byref(m)), "path_memory")
    return {n: getattr(m, n) for n, _ in PathMemoryInfo._fields_}
