"""_compat.py — the two signatures PyTorch users already write, over fattn.attention.

  sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
       enable_gqa=False)
      torch.nn.functional.scaled_dot_product_attention's signature, layout [..., H, S, D] and
      semantics: bool masks True = attend, float masks added, is_causal top-left, GQA only with
      enable_gqa=True.
  flash_attn_func / flash_attn_varlen_func / flash_attn_qkvpacked_func / flash_attn_kvpacked_func
      FlashAttention-2's signatures, positional order and defaults, layout [B, S, H, D]:
      causal and window_size bottom-right (query i sees keys
      i + Sk - Sq - window_size[0] .. i + Sk - Sq + window_size[1]; -1 = unbounded).

Both only rearrange arguments: the tensors are passed as views (SDPA's [B, H, S, D] is
transposed to [B, S, H, D] without a copy), and everything else is fattn.attention. Both take
any strides, as their originals do: a tensor (or SDPA mask) whose innermost stride is not 1, e.g.
a [B, H, D, S] buffer transposed, is made contiguous first (FA2 makes the same copy; under
autograd, so gradients come back in the caller's layout), where fattn.attention and the C API
refuse it. return_attn_probs=True returns (out, softmax_lse, None) in FA2's lse layout. What
fattn does not implement (dropout, softcap, ALiBi, paged KV, the probabilities themselves) is an
error that names the argument, never an argument silently ignored. `deterministic` is accepted
and has no effect: every fattn backward is deterministic.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._attn import attention, keys_dense, scale_arg


def _unit_inner(t: Tensor) -> Tensor:
    """t, or a contiguous copy of it when its innermost stride is not 1 (the library reads
    rows of the last dim in place). SDPA and FA2 take any strides (FA2 copies the same way);
    .contiguous() is differentiable, so the gradient reaches t in t's own layout."""
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    return t


def _no_dropout(dropout_p, fn: str) -> None:
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"fattn.{fn}: dropout_p={dropout_p!r}: fattn has no attention dropout; pass "
            "dropout_p=0.0 (e.g. `dropout_p=p if self.training else 0.0`)")


# ------------------------------------------------------------------------------- SDPA
def _sdpa_split(t: Tensor, name: str) -> Tuple[Tensor, tuple]:
    """[..., H, S, D] (or [N, S, D]) -> the [B, S, H, D] view fattn reads, plus the leading
    dims to restore. A 3-d tensor has one head; dims before H beyond one are merged (a view
    when their strides allow, as for any contiguous tensor)."""
    if t.dim() < 3:
        raise ValueError(f"fattn.sdpa: {name} must have at least 3 dims ([N, ..., S, E]), got "
                         f"shape {tuple(t.shape)}")
    lead = tuple(t.shape[:-3]) if t.dim() > 3 else None
    if t.dim() == 3:
        t = t.unsqueeze(1)
    elif t.dim() > 4:
        t = t.flatten(0, t.dim() - 4)
    return t.transpose(1, 2), lead


def _sdpa_bias(mask: Tensor, q: Tensor, ndim: int, Skv: int) -> Tensor:
    """SDPA's attn_mask, broadcastable to [..., Hq, Sq, Skv] of an ndim-d query -> an additive
    bias broadcastable to fattn's [B, Hq, Sq, Skv] (size-1 and stride-0 dims kept)."""
    if mask.dtype == torch.bool:
        # True = take part in attention: 0 there, -inf elsewhere (a row with no True gets o = 0
        # and zero gradients, as SDPA's math path gives for it).
        dt = q.dtype if q.dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.float32
        zero = torch.zeros((), dtype=dt, device=mask.device)
        mask = torch.where(mask, zero, torch.full((), float("-inf"), dtype=dt, device=mask.device))
    elif not mask.is_floating_point():
        raise TypeError(f"fattn.sdpa: attn_mask must be bool (True = attend) or floating point "
                        f"(added to the logits), got {mask.dtype}")
    if mask.dim() > ndim:
        raise ValueError(f"fattn.sdpa: attn_mask has {mask.dim()} dims, query {ndim}")
    mask = mask[(None,) * (ndim - mask.dim())]                # leading size-1 dims, a view
    mask = keys_dense(mask, Skv)
    if ndim == 3:
        mask = mask.unsqueeze(1)                              # [N, 1, Sq, Skv]
    elif ndim > 4:
        lead = tuple(q.shape[:-3])
        mask = mask.expand(lead + tuple(mask.shape[-3:])).flatten(0, ndim - 4)
    return mask


def sdpa(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
         enable_gqa: bool = False) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention computed by fattn.

    query [N, ..., Hq, L, E], key [N, ..., H, S, E], value [N, ..., H, S, Ev] (3-d tensors
    [N, L, E] have one head); returns [N, ..., Hq, L, Ev] in query's dtype. attn_mask: bool
    (True = attend) or float (added), broadcastable to [N, ..., Hq, L, S]; a float mask that
    requires grad gets its gradient (summed over its broadcast dims), on CPU and CUDA. is_causal: query i sees keys j <= i (top-left, as SDPA; cannot be combined with
    attn_mask, as in SDPA). scale: None = 1/sqrt(E). enable_gqa: allow Hq != H
    (Hq % H == 0, query head h reads kv head h // (Hq / H)). dropout_p must be 0.
    Differentiable in query, key, value; deterministic; f32/f16/bf16 (no float64). Any strides,
    as SDPA: a tensor or mask whose innermost stride is not 1 (and a mask broadcast over the
    keys, [..., L, 1]) is copied to a contiguous one, gradients coming back in the caller's
    layout; everything else is read in place.

    Rows with no allowed key: a bool row with no True (or a float row of -inf) gives o = 0 and
    zero gradients, as SDPA's math path and FlashAttention do. A float row whose every key gets
    the same huge negative value (Hugging Face's padding rows: torch.finfo(dtype).min, or -1e9)
    is not masked: softmax does not change under a constant added to a row, and fattn computes
    it exactly, so o is that row's attention over its own scores, as if it had no mask. SDPA's
    math path instead rounds every scale·q·k + finfo.min to finfo.min and returns the mean of V
    (and FlashAttention has no additive mask). Neither answer is 0; rows that should give 0 need
    a bool mask or -inf:
        m = torch.zeros(L, S); m[-1] = torch.finfo(torch.float32).min
        fattn.sdpa(q, k, v, attn_mask=m)[..., -1, :]       # that of fattn.sdpa(q, k, v)
        F.scaled_dot_product_attention(q, k, v, attn_mask=m)[..., -1, :]   # v.mean(-2)
        fattn.sdpa(q, k, v, attn_mask=m > -1)[..., -1, :]  # 0 (bool mask, True = attend)"""
    _no_dropout(dropout_p, "sdpa")
    if is_causal and attn_mask is not None:
        raise ValueError("fattn.sdpa: attn_mask and is_causal=True were both given (SDPA rejects "
                         "this too): fold the causal mask into attn_mask, or drop attn_mask")
    ndim = query.dim()
    if key.dim() != ndim or value.dim() != ndim:
        raise ValueError(f"fattn.sdpa: query, key and value must have the same number of dims, "
                         f"got {ndim}, {key.dim()}, {value.dim()}")
    if ndim > 3 and not enable_gqa and query.shape[-3] != key.shape[-3]:
        raise ValueError(f"fattn.sdpa: query has {query.shape[-3]} heads and key "
                         f"{key.shape[-3]}: pass enable_gqa=True for grouped-query attention")
    q, lead = _sdpa_split(_unit_inner(query), "query")
    k, _ = _sdpa_split(_unit_inner(key), "key")
    v, _ = _sdpa_split(_unit_inner(value), "value")
    bias = None if attn_mask is None else _sdpa_bias(attn_mask, query, ndim, k.shape[1])
    o = attention(q, k, v, bias=bias, causal="top_left" if is_causal else False,
                  scale=scale_arg(scale, "scale"))
    o = o.transpose(1, 2)                                     # [B, Hq, L, Ev]
    if ndim == 3:
        return o.squeeze(1)
    if lead is not None:
        return o.unflatten(0, lead)
    return o


# ------------------------------------------------------------------------------- FlashAttention-2
def _fa2_common(fn: str, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                return_attn_probs) -> dict:
    """The checks every FA2 form makes, and fattn.attention's keywords for the rest."""
    _no_dropout(dropout_p, fn)
    _fa2_unsupported(fn, softcap, alibi_slopes)
    return dict(scale=scale_arg(softmax_scale, "softmax_scale"),
                return_lse=bool(return_attn_probs), **_fa2_mask(causal, window_size, fn))


def _fa2_result(out, return_attn_probs):
    """FA2's return: out, or (out, softmax_lse, S_dmask) with S_dmask None (FA2 gives None too
    without dropout; fattn never materializes the probabilities in this call)."""
    if return_attn_probs:
        o, lse = out
        return o, lse, None
    return out


def _fa2_unsupported(fn: str, softcap, alibi_slopes):
    if softcap != 0.0:
        raise NotImplementedError(f"fattn.{fn}: softcap={softcap!r}: logit soft-capping is not "
                                  "implemented; pass softcap=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError(f"fattn.{fn}: alibi_slopes: ALiBi is not implemented (an ALiBi "
                                  "bias can be given to fattn.attention(bias=...))")


def _fa2_mask(causal, window_size, fn: str) -> dict:
    """FA2's causal / window_size -> fattn.attention's keywords. Both bottom-right; any
    negative size is unbounded; with causal, FA2 ignores the right size (it is 0)."""
    try:
        wl, wr = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"fattn.{fn}: window_size must be (left, right), got {window_size!r}") from None
    wl = -1 if wl < 0 else wl
    wr = 0 if causal else (-1 if wr < 0 else wr)
    window = None if (wl < 0 and wr < 0) or (causal and wl < 0) else (wl, wr)
    return dict(causal="bottom_right" if causal else False, window=window,
                window_align="bottom_right")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """FlashAttention-2's flash_attn_func: q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv]
    (Hq % Hk == 0), returns out [B, Sq, Hq, Dv]. causal / window_size are aligned to the bottom
    right: query i sees keys i + Sk - Sq - window_size[0] .. i + Sk - Sq + window_size[1]
    (-1 = unbounded; causal makes the right size 0). softmax_scale None = 1/sqrt(D).
    dropout_p must be 0; softcap and alibi_slopes raise; deterministic is always true here. Also
    takes float32. A tensor whose innermost stride is not 1 is made contiguous, as FA2 does.

    return_attn_probs=True returns (out, softmax_lse, None), as FA2 does with dropout_p = 0:
    softmax_lse [B, Hq, Sq] float32, each row's logsumexp over its allowed keys of
    softmax_scale·q·k (the log of its softmax denominator). The probabilities are not returned:
    the third element is always None.
    softmax_lse carries no gradient: FA2's backward drops a gradient reaching its lse, fattn
    marks it non-differentiable (requires_grad False); out keeps its autograd either way. A row
    with no allowed key has lse = -inf here (log 0; FA2 writes +inf there), so the usual ring /
    block merge weight exp(lse_block - lse) is 0 for it."""
    out = attention(_unit_inner(q), _unit_inner(k), _unit_inner(v),
                    **_fa2_common("flash_attn_func", dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, return_attn_probs))
    return _fa2_result(out, return_attn_probs)


def _unpack(t, n, fn: str, layout: str):
    """The n tensors packed along dim 2 of a 5-dim t, as views (read in place); fn and layout
    name the function and the shape it wants when t is not one."""
    if t.dim() != 5 or t.shape[2] != n:
        raise ValueError(f"fattn.{fn}: {layout}, got shape {tuple(t.shape)}")
    return [t[:, :, i] for i in range(n)]


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """FA2's flash_attn_qkvpacked_func: qkv [B, S, 3, H, D]; q, k, v are read in place.
    Returns as flash_attn_func (return_attn_probs=True: (out, softmax_lse [B, H, S], None))."""
    q, k, v = _unpack(qkv, 3, "flash_attn_qkvpacked_func", "qkv must be [B, S, 3, H, D]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """FA2's flash_attn_kvpacked_func: q [B, Sq, Hq, D], kv [B, Sk, 2, Hk, D] read in place.
    Returns as flash_attn_func (return_attn_probs=True: (out, softmax_lse [B, Hq, Sq], None))."""
    k, v = _unpack(kv, 2, "flash_attn_kvpacked_func", "kv must be [B, Sk, 2, Hk, D]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """FA2's flash_attn_varlen_func: q [total_q, Hq, D], k [total_k, Hk, D], v [total_k, Hk, Dv],
    cu_seqlens_q/k int32 (or int64) [num_seqs + 1] on the tensors' device, max_seqlen_q/k the
    longest sequence. Masks per sequence, bottom-right, as flash_attn_func. Returns
    out [total_q, Hq, Dv]; with return_attn_probs=True (out, softmax_lse, None), softmax_lse
    [Hq, total_q] float32 in the packed order of q (FA2 2.x's varlen layout), otherwise as
    flash_attn_func's (no gradient, -inf on a row with no key, no probabilities)."""
    fn = "flash_attn_varlen_func"
    kw = _fa2_common(fn, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                     return_attn_probs)
    if block_table is not None:
        raise NotImplementedError(f"fattn.{fn}: block_table: a paged KV cache is not implemented")
    if q.dim() != 3:
        raise ValueError(f"fattn.{fn}: q must be [total_q, Hq, D], got shape {tuple(q.shape)}")
    out = attention(_unit_inner(q), _unit_inner(k), _unit_inner(v), cu_seqlens_q=cu_seqlens_q,
                    cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                    max_seqlen_k=max_seqlen_k, **kw)
    return _fa2_result(out, return_attn_probs)
