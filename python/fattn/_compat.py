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
transposed to [B, S, H, D] without a copy), and everything else is fattn.attention. What fattn
does not implement (dropout, softcap, ALiBi, paged KV, returning the probabilities) is an error
that names the argument, never an argument silently ignored. `deterministic` is accepted and has
no effect: every fattn backward is deterministic.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._attn import attention, scale_arg

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
    (True = attend) or float (added), broadcastable to [N, ..., Hq, L, S]; no gradient flows to
    it. is_causal: query i sees keys j <= i (top-left, as SDPA; cannot be combined with
    attn_mask, as in SDPA). scale: None = 1/sqrt(E). enable_gqa: allow Hq != H
    (Hq % H == 0, query head h reads kv head h // (Hq / H)). dropout_p must be 0.
    Differentiable in query, key, value; deterministic; f32/f16/bf16 (no float64)."""
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
    q, lead = _sdpa_split(query, "query")
    k, _ = _sdpa_split(key, "key")
    v, _ = _sdpa_split(value, "value")
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
def _fa2_unsupported(fn: str, softcap, alibi_slopes, return_attn_probs, block_table=None):
    if softcap != 0.0:
        raise NotImplementedError(f"fattn.{fn}: softcap={softcap!r}: logit soft-capping is not "
                                  "implemented; pass softcap=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError(f"fattn.{fn}: alibi_slopes: ALiBi is not implemented (an ALiBi "
                                  "bias can be given to fattn.attention(bias=...))")
    if return_attn_probs:
        raise NotImplementedError(f"fattn.{fn}: return_attn_probs=True: fattn does not return the "
                                  "attention probabilities; for the log-sum-exp call "
                                  "fattn.attention(..., return_lse=True)")
    if block_table is not None:
        raise NotImplementedError(f"fattn.{fn}: block_table: a paged KV cache is not implemented")


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
    dropout_p must be 0; softcap, alibi_slopes, return_attn_probs raise; deterministic is always
    true here. Also takes float32."""
    _no_dropout(dropout_p, "flash_attn_func")
    _fa2_unsupported("flash_attn_func", softcap, alibi_slopes, return_attn_probs)
    return attention(q, k, v, scale=scale_arg(softmax_scale, "softmax_scale"),
                     **_fa2_mask(causal, window_size, "flash_attn_func"))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """FA2's flash_attn_qkvpacked_func: qkv [B, S, 3, H, D]; q, k, v are read in place."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"fattn.flash_attn_qkvpacked_func: qkv must be [B, S, 3, H, D], got "
                         f"shape {tuple(qkv.shape)}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                           causal, window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """FA2's flash_attn_kvpacked_func: q [B, Sq, Hq, D], kv [B, Sk, 2, Hk, D] read in place."""
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"fattn.flash_attn_kvpacked_func: kv must be [B, Sk, 2, Hk, D], got "
                         f"shape {tuple(kv.shape)}")
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """FA2's flash_attn_varlen_func: q [total_q, Hq, D], k [total_k, Hk, D], v [total_k, Hk, Dv],
    cu_seqlens_q/k int32 (or int64) [num_seqs + 1] on the tensors' device, max_seqlen_q/k the
    longest sequence. Masks per sequence, bottom-right, as flash_attn_func. Returns
    out [total_q, Hq, Dv]."""
    fn = "flash_attn_varlen_func"
    _no_dropout(dropout_p, fn)
    _fa2_unsupported(fn, softcap, alibi_slopes, return_attn_probs, block_table)
    if q.dim() != 3:
        raise ValueError(f"fattn.{fn}: q must be [total_q, Hq, D], got shape {tuple(q.shape)}")
    return attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                     scale=scale_arg(softmax_scale, "softmax_scale"),
                     **_fa2_mask(causal, window_size, fn))
