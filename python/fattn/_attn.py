"""_attn.py — softmax attention's public Python API: fattn.attention and the query helpers
(resolve_prec, supports, memory, max_seqlen).

attention() normalizes its keyword arguments (causal / window / alignment / scale / prec /
algo, int64 cu_seqlens, bias broadcasting) into the plain scalars of the torch ops
fattn::attn_fwd / fattn::attn_bwd (_ops.py), which call the C API. The query helpers build the
same parameter struct and ask the library directly; they accept meta tensors.
"""
from __future__ import annotations

import ctypes
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _lib, _ops
from ._lib import check, lib, view

# ------------------------------------------------------------------------------- arguments


def _causal_code(causal) -> int:
    # True means bottom-right, FlashAttention's convention: the last query sees the last key,
    # which is what a decoder with a KV cache (Skv > Sq) needs.
    if causal is None or causal is False or causal == "none":
        return _lib.CAUSAL_NONE
    if causal is True or causal == "bottom_right":
        return _lib.CAUSAL_BOTTOM_RIGHT
    if causal == "top_left":
        return _lib.CAUSAL_TOP_LEFT
    raise ValueError(f"fattn: causal must be False, True, 'top_left' or 'bottom_right', got {causal!r}")


def _align_code(window_align, causal_code: int) -> int:
    if window_align is None:
        # A window measured from the same diagonal as the causal mask (the library requires it).
        return _lib.ALIGN_TOP_LEFT if causal_code == _lib.CAUSAL_TOP_LEFT else _lib.ALIGN_BOTTOM_RIGHT
    if window_align == "top_left":
        return _lib.ALIGN_TOP_LEFT
    if window_align == "bottom_right":
        return _lib.ALIGN_BOTTOM_RIGHT
    raise ValueError(f"fattn: window_align must be 'top_left' or 'bottom_right', got {window_align!r}")


def _enum(table: dict, value: str, name: str) -> int:
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"fattn: {name} must be one of {sorted(table)}, got {value!r}") from None


# The smallest positive float32 (subnormal). The library reads scale 0 as "1/sqrt(D)", so an
# explicit scale 0 (every logit 0: uniform attention, as SDPA and FA2 compute it) is passed as
# this: its logits round to 0 for any dot product below 2^149.
_ZERO_SCALE = math.ldexp(1.0, -149)


def scale_arg(scale, name: str = "scale") -> Optional[float]:
    """None -> None (the library's 1/sqrt(D)); 0 -> the zero-scale stand-in; else a float."""
    if scale is None:
        return None
    s = float(scale)
    if not math.isfinite(s):
        raise ValueError(f"fattn: {name} must be finite, got {scale!r}")
    return _ZERO_SCALE if s == 0.0 else s


def seqlens_arg(cu: Optional[Tensor], name: str) -> Optional[Tensor]:
    """cu_seqlens as the library reads it: int32, 1-d, contiguous. int64 (what torch's cumsum
    gives) is converted on the device without a sync; a value outside int32 becomes -1 or
    INT32_MAX, which the library then rejects by name instead of reading a wrapped value."""
    if cu is None:
        return None
    if cu.dim() != 1:
        raise ValueError(f"fattn: {name} must be 1-d [num_seqs + 1], got shape {tuple(cu.shape)}")
    if cu.dtype == torch.int64:
        cu = cu.clamp(-1, 2**31 - 1).to(torch.int32)
    elif cu.dtype != torch.int32:
        raise TypeError(f"fattn: {name} has dtype {cu.dtype}; it must be int32 (or int64, "
                        "converted)")
    return cu.contiguous()


def normalize(q: Tensor, *, causal=False, window=None, window_align=None, scale=None,
              cu_seqlens_q=None, max_seqlen_q=None, max_seqlen_k=None, cu_seqlens_k=None,
              prec="auto", algo="fused") -> tuple:
    """Keyword arguments -> the ops' scalar tuple (order of _SCALARS)."""
    c = _causal_code(causal)
    if window is None:
        wl, wr = -1, -1
    else:
        if not isinstance(window, Sequence) or len(window) != 2:
            raise ValueError(f"fattn: window must be (left, right), got {window!r}")
        wl, wr = (-1 if w is None else int(w) for w in window)
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError("fattn: cu_seqlens_q and cu_seqlens_k must be given together")
    msq = int(max_seqlen_q or 0)
    msk = int(max_seqlen_k or 0)
    if cu_seqlens_q is not None and q.device.type == "cuda" and (msq == 0 or msk == 0):
        # The CUDA backend needs the bounds to size its grid; derive them (one host sync),
        # as FlashAttention's callers usually pass them.
        if msq == 0:
            msq = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item())
        if msk == 0:
            msk = int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max().item())
    return (c, wl, wr, _align_code(window_align, c), scale_arg(scale) or 0.0, msq, msk,
            _enum(_lib.PREC, prec, "prec"), _enum(_lib.ALGO, algo, "algo"))


def _params(bias, cu_q, cu_k, *scalars, dummy_data: bool = False) -> _lib.AttnParams:
    bv = None if bias is None else _view(bias, "bias", dummy_data)
    return _ops.params(bias, cu_q, cu_k, *scalars, bias_view=bv)


def _view(t, name, dummy_data=False):
    if dummy_data and t is not None and t.device.type == "meta":
        # Shape-only queries (memory, supports) on meta tensors: the library reads no data.
        if t.dim() != 4:
            raise ValueError(f"fattn: {name} must have 4 dims, got shape {tuple(t.shape)}")
        v = _lib.Tensor()
        v.data = 64
        v.dtype = _lib.dtype_code(t, name)
        for i in range(4):
            v.ne[i], v.nb[i] = t.shape[i], t.stride(i)
        return v
    return view(t, name)


def _same_device(q: Tensor, named: dict) -> None:
    for name, t in named.items():
        if t is not None and t.device != q.device:
            raise ValueError(f"fattn: {name} is on {t.device} but q is on {q.device}: all "
                             "tensors of a call must be on one device")


# ------------------------------------------------------------------------------- public API
def attention(q: Tensor, k: Tensor, v: Tensor, *, bias: Optional[Tensor] = None,
              causal: Union[bool, str] = False, window: Optional[Tuple[int, int]] = None,
              window_align: Optional[str] = None, scale: Optional[float] = None,
              cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k: Optional[Tensor] = None,
              max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
              prec: str = "auto", algo: str = "fused", return_lse: bool = False):
    """O = softmax(scale·QKᵀ + bias + masks)·V, differentiable in q, k, v.

    q [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv] (FlashAttention's layout); any
    strides with a unit innermost one (views into a fused QKV buffer are not copied).
    Hq % Hkv == 0 (GQA/MQA by head counts). Varlen: cu_seqlens_q/k int32 [num_seqs + 1] on the
    tensors' device, and q/k/v either [1, total, H, D] or [total, H, D].
    causal: False, True (= "bottom_right", FlashAttention's convention: query i sees keys
    j <= i + Skv - Sq), "top_left" (j <= i) or "bottom_right".
    window: (left, right), None or -1 = unbounded, measured from the same diagonal
    (window_align, default: the causal alignment, else "bottom_right").
    bias: additive, broadcastable to [B, Hq, Sq, Skv] (size-1 or stride-0 dims; may hold -inf).
    A bias that requires grad gets its gradient (summed over its broadcast dims in the library,
    deterministic; eager and torch.compile) on the CPU and on CUDA, with either algo and any prec. prec: "auto" | "f32" | "tf32" | "native"; algo: "fused" | "exact".
    Returns o [B, Sq, Hq, Dv] in q's dtype, and with return_lse also lse [B, Hq, Sq] float32
    (natural log of each row's softmax denominator; -inf for a fully masked row; no gradient).
    """
    # Checked here too: a meta/fake tensor among real ones would otherwise route the op to
    # its fake kernel instead of failing.
    _same_device(q, {"k": k, "v": v, "bias": bias, "cu_seqlens_q": cu_seqlens_q,
                     "cu_seqlens_k": cu_seqlens_k})
    bias_grad = bias is not None and bias.requires_grad and torch.is_grad_enabled()
    squeeze = cu_seqlens_q is not None and q.dim() == 3
    if bias_grad:
        q, k, v, _ = _prepare(q, k, v, None, cu_seqlens_q)
        bias = _grad_bias(bias)
        if torch.is_autocast_enabled(q.device.type):
            # The forward op's Autocast kernel would cast below the autograd.Function, which
            # saves its inputs: cast them here instead (differentiable, as that kernel's
            # casts are), so the backward sees the dtypes the forward ran in.
            dev = q.device.type
            dt = torch.get_autocast_dtype(dev)
            q, k, v, bias = (_ops.autocast_cast(t, dev, dt) for t in (q, k, v, bias))
    else:
        q, k, v, bias = _prepare(q, k, v, bias, cu_seqlens_q)
    cu_seqlens_q = seqlens_arg(cu_seqlens_q, "cu_seqlens_q")
    cu_seqlens_k = seqlens_arg(cu_seqlens_k, "cu_seqlens_k")
    scalars = normalize(q, causal=causal, window=window, window_align=window_align, scale=scale,
                        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, prec=prec,
                        algo=algo)
    try:
        if bias_grad:
            # The library's view of the bias is made out here: under torch.compile the shape
            # checks its expand() makes then specialize sizes in the outer graph, not inside
            # the autograd.Function (dynamo cannot return a size specialized in there).
            o, lse = _AttnBiasFn.apply(scalars, q, k, v, bias, _bias_view_tensor(bias, q, k),
                                       cu_seqlens_q, cu_seqlens_k)
        else:
            o, lse, _ = _ops.attn_fwd(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, scalars)
    except _lib.FattnError as e:
        hint = None if cu_seqlens_q is not None else _layout_hint(q, k, v, bias)
        if hint is None:
            raise
        raise _lib.FattnError(e.status, f"{e}\n{hint}") from None
    if squeeze:
        o, lse = o.squeeze(0), lse.squeeze(0)
    return (o, lse) if return_lse else o


def _grad_bias(bias):
    """The bias input of _AttnBiasFn: 4 dims, and a stride-0 dim of size > 1 (an expanded view)
    narrowed to size 1. Its elements along that dim are one value, so the forward is the same;
    autograd gives the whole summed gradient to index 0 of the view and the expand's backward
    sums that into the tensor it was expanded from."""
    if bias.dim() < 4:
        bias = bias[(None,) * (4 - bias.dim())]
    for d in range(3):
        if bias.shape[d] > 1 and bias.stride(d) == 0:
            bias = bias.narrow(d, 0, 1)
    return bias


def _bias_view_tensor(bias, q, k):
    """bias [b|1, h|1, Sq|1, Skv|1] as the library reads it: query dim expanded by stride 0,
    a size-1 key dim materialized (the library needs a unit key stride)."""
    sq, skv = q.shape[1], k.shape[1]
    if bias.shape[3] != skv or bias.stride(3) != 1:
        bias = bias.expand(bias.shape[0], bias.shape[1], bias.shape[2], skv).contiguous()
    return bias.expand(bias.shape[0], bias.shape[1], sq, skv)


class _AttnBiasFn(torch.autograd.Function):
    """attention() with a bias that requires grad (CPU and CUDA): fattn::attn_fwd, and a backward that
    also returns dbias (fattn::attn_bwd_dbias, fattn_attn_bwd_ex), summed over the bias's
    broadcast dims inside the library (bitwise deterministic), in the bias's dtype and shape.
    Eager plain tensors call the kernels directly; anything else (torch.compile tracing, a
    dispatch mode) goes through the ops and their fake kernels."""

    @staticmethod
    def forward(ctx, scalars, q, k, v, bias, bias_lib, cu_q, cu_k):
        # bias: the leaf-shaped input the gradient is for; bias_lib: its _bias_view_tensor()
        args = (q, k, v, bias_lib, cu_q, cu_k) + scalars
        if _ops.eager_plain(q.device.type, (q, k, v, bias_lib)):
            o, lse, saved = _ops._fwd_kernel(*args)
        else:
            o, lse, saved = _ops.attn_fwd_op(*args)
        ctx.save_for_backward(q, k, v, o, lse, saved, bias, cu_q, cu_k)
        ctx.scalars = scalars
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, saved, bias, cu_q, cu_k = ctx.saved_tensors
        args = (do, q, k, v, o, lse, saved, bias, cu_q, cu_k) + ctx.scalars
        if not do.requires_grad and _ops.eager_plain(q.device.type, (do, q, bias)):
            dq, dk, dv, db = _ops.attn_bwd_dbias(*args)
        else:
            dq, dk, dv, db = _ops.attn_bwd_dbias_op(*args)
        return None, dq, dk, dv, db.to(bias.dtype), None, None, None


def keys_dense(mask: Tensor, Skv: int) -> Tensor:
    """A mask whose key dim the library cannot read in place (innermost stride not 1, e.g. a
    transposed mask, or size 1 broadcast over Skv > 1 keys) -> one whose key dim is Skv long with
    stride 1. Only the distinct values are copied: stride-0 (expanded) dims stay stride 0."""
    n = Skv if mask.shape[-1] == 1 else mask.shape[-1]
    if n <= 1 or (mask.shape[-1] == n and mask.stride(-1) == 1):
        return mask
    base = mask[tuple(slice(0, 1) if mask.stride(d) == 0 and mask.shape[d] > 1 else slice(None)
                      for d in range(mask.dim() - 1))]
    base = base.expand(*base.shape[:-1], n).contiguous()
    return base.expand(*mask.shape[:-1], n)


def _prepare(q, k, v, bias, cu_seqlens_q):
    """Varlen 3-d -> 4-d; bias to 4 dims with its size-1 query dim expanded (stride 0, no copy:
    the library broadcasts by strides) and a size-1 (or strided) key dim made dense, copying
    only the distinct values (the library reads the keys of a bias row with stride 1)."""
    if cu_seqlens_q is not None and q.dim() == 3:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if bias is not None:
        if bias.dim() < 4:
            bias = bias[(None,) * (4 - bias.dim())]
    if bias is not None and q.dim() == 4 and k.dim() == 4 and bias.dim() == 4:
        sq = q.shape[1] if bias.shape[2] == 1 else bias.shape[2]
        skv = k.shape[1] if bias.shape[3] == 1 else bias.shape[3]
        bias = keys_dense(bias, skv)  # the library reads a key row with stride 1
        bias = bias.expand(bias.shape[0], bias.shape[1], sq, skv)
    return q, k, v, bias


def _layout_hint(q, k, v, bias) -> Optional[str]:
    """For a call the library rejected: a hint when the shapes, invalid read as [B, S, H, D],
    are valid read as [B, H, S, D] (SDPA's layout). Only a hint on an error: when both
    readings are valid (e.g. self-attention with equal head counts) no check can tell them
    apart, so a call is never refused for its layout; the docs send SDPA users to fattn.sdpa."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or tuple(k.shape[:3]) != tuple(v.shape[:3]):
        return None

    def valid(sq, hq, skv, hkv):
        if hkv == 0 or hq % hkv != 0:
            return False
        if bias is not None and bias.dim() == 4:
            # a size-1 or stride-0 (expanded) bias dim broadcasts
            want = (q.shape[0], hq, sq, skv)
            return all(bias.shape[d] in (1, want[d]) or bias.stride(d) == 0 for d in range(4))
        return True

    if valid(q.shape[1], q.shape[2], k.shape[1], k.shape[2]) or \
            not valid(q.shape[2], q.shape[1], k.shape[2], k.shape[1]):
        return None
    return (f"fattn.attention reads q {tuple(q.shape)} and k {tuple(k.shape)} as [B, S, H, D] "
            "(FlashAttention's layout); these shapes fit [B, H, S, D] (SDPA's layout): for "
            "that layout call fattn.sdpa(q, k, v, ...), or pass q.transpose(1, 2), "
            "k.transpose(1, 2), v.transpose(1, 2) (views, no copy)")


def _query_args(q, k, v, bias, kw):
    kw = dict(kw)
    device = kw.pop("device", None)
    q, k, v, bias = _prepare(q, k, v, bias, kw.get("cu_seqlens_q"))
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        kw[name] = seqlens_arg(kw.get(name), name)
    cu_q, cu_k = kw.get("cu_seqlens_q"), kw.get("cu_seqlens_k")
    scalars = normalize(q, **kw)
    device = q.device if q.device.type != "meta" else torch.device(device or "cpu")
    ctx = _lib.context(device)
    p = _params(bias, cu_q, cu_k, *scalars, dummy_data=True)
    # p holds raw pointers: keep the (possibly converted) tensors alive as long as p is
    p.keep_alive = (bias, cu_q, cu_k)
    return ctx, p, _view(q, "q", True), _view(k, "k", True), _view(v, "v", True)


def resolve_prec(q: Tensor, k: Optional[Tensor] = None, v: Optional[Tensor] = None, *,
                 bias=None, device=None, **kw) -> str:
    """The precision a call with these arguments would run ("f32", "tf32" or "native"),
    never "auto". Log this, not the requested one."""
    if kw.get("cu_seqlens_q") is not None and q.dim() == 3:
        q = q.unsqueeze(0)
    scalars = normalize(q, **kw)
    dev = q.device if q.device.type != "meta" else torch.device(device or "cpu")
    ctx = _lib.context(dev)
    p = _params(None, kw.get("cu_seqlens_q"), kw.get("cu_seqlens_k"), *scalars)
    qv = _view(q, "q", True)
    return _lib.PREC_NAME.get(lib().fattn_resolve_prec(ctx, ctypes.byref(p), ctypes.byref(qv)),
                              "unknown")


def supports(q: Tensor, k: Tensor, v: Tensor, *, bias=None, **kw) -> Tuple[bool, str]:
    """(True, "") if this device's backend runs forward and backward for these arguments,
    else (False, the library's reason). Tensors may be on the meta device (pass device=)."""
    ctx, p, qv, kv, vv = _query_args(q, k, v, bias, kw)
    why = ctypes.create_string_buffer(512)
    s = lib().fattn_attn_supports(ctx, ctypes.byref(p), ctypes.byref(qv), ctypes.byref(kv),
                                  ctypes.byref(vv), why, len(why))
    return s == _lib.FATTN_OK, why.value.decode(errors="replace")


def memory(q: Tensor, k: Tensor, v: Tensor, *, bias=None, **kw) -> dict:
    """fattn_attn_memory(): bytes for one call with these shapes and algo (docs/CONTRACT.md §6) as a dict
    (inputs, saved, fwd/bwd workspace, grads, fwd/bwd peak). Meta tensors work (pass device=)."""
    ctx, p, qv, kv, vv = _query_args(q, k, v, bias, kw)
    info = _lib.AttnMemoryInfo()
    check(ctx, lib().fattn_attn_memory(ctx, ctypes.byref(p), ctypes.byref(qv), ctypes.byref(kv),
                                       ctypes.byref(vv), ctypes.byref(info)), "attn_memory")
    return {name: int(getattr(info, name)) for name, _ in info._fields_}


def max_seqlen(budget_bytes: int, *, dtype=torch.bfloat16, batch: int = 1, heads_q: int,
               heads_kv: Optional[int] = None, head_dim: int, head_dim_v: Optional[int] = None,
               device="cpu", **kw) -> int:
    """Longest self-attention S whose backward peak fits in budget_bytes (fattn_attn_max_seqlen)."""
    dev = torch.device(device)
    scalars = normalize(torch.empty(0, device="meta"), **kw)
    ctx = _lib.context(dev)
    p = _params(None, None, None, *scalars)
    out = ctypes.c_int64()
    check(ctx, lib().fattn_attn_max_seqlen(ctx, ctypes.byref(p), _lib.DTYPE[dtype], batch, heads_q,
                                           heads_kv or heads_q, head_dim, head_dim_v or head_dim,
                                           int(budget_bytes), ctypes.byref(out)), "attn_max_seqlen")
    return int(out.value)
