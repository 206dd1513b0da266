"""reference.py — the plain attention formula in torch, for the binding's tests.

ref_attention() materializes scale·QKᵀ + bias, applies the causal/window masks of fattn.h
(one diagonal, top-left or bottom-right, per sequence), and softmaxes; run in float64 it is the
oracle, run in the inputs' dtype it is the "straightforward same-precision implementation"
whose error sets the tolerance (DESIGN §5). Fully masked rows give o = 0, lse = -inf and zero
gradients (no NaN): the shift uses a finite row max and the denominator is guarded.
Written for clarity, not speed.
"""
import math

import torch


def allowed_mask(sq, skv, causal, window, align_bottom_right, device):
    """[sq, skv] bool: may query i see key j (fattn.h's mask semantics)."""
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(skv, device=device).unsqueeze(0)
    diag = i + (skv - sq if align_bottom_right else 0)
    wl, wr = window if window is not None else (-1, -1)
    wl = -1 if wl is None else wl
    wr = -1 if wr is None else wr
    if causal:
        wr = 0  # causal is a window whose right edge is the diagonal
    ok = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if wl >= 0:
        ok &= j >= diag - wl
    if wr >= 0:
        ok &= j <= diag + wr
    return ok


def _dense(q, k, v, bias, causal, window, align_br, scale):
    # q [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv], bias broadcastable [B, Hq, Sq, Skv]
    B, Sq, Hq, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    qh = q.permute(0, 2, 1, 3)                                   # [B, Hq, Sq, D]
    kh = k.permute(0, 2, 1, 3).repeat_interleave(g, dim=1)       # [B, Hq, Skv, D]
    vh = v.permute(0, 2, 1, 3).repeat_interleave(g, dim=1)       # [B, Hq, Skv, Dv]
    s = scale * (qh @ kh.transpose(-1, -2))
    if bias is not None:
        s = s + bias.to(s.dtype)
    ok = allowed_mask(Sq, Skv, causal, window, align_br, q.device)
    s = s.masked_fill(~ok, float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))   # fully masked row: shift 0
    e = torch.exp(s - m)
    den = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    o = (p @ vh).permute(0, 2, 1, 3)                             # [B, Sq, Hq, Dv]
    lse = (torch.log(den) + m).squeeze(-1)                       # log(0) = -inf where masked
    return o, lse


def ref_attention(q, k, v, *, bias=None, causal=False, window=None, window_align=None,
                  scale=None, cu_seqlens_q=None, cu_seqlens_k=None):
    """Same arguments as fattn.attention (causal True = bottom-right). Returns (o, lse)."""
    if causal is True:
        causal = "bottom_right"
    align = window_align or (causal if causal else "bottom_right")
    align_br = align == "bottom_right"
    is_causal = bool(causal)
    scale = scale if scale else 1.0 / math.sqrt(q.shape[-1])
    if bias is not None:
        while bias.dim() < 4:
            bias = bias.unsqueeze(0)
    if cu_seqlens_q is None:
        return _dense(q, k, v, bias, is_causal, window, align_br, scale)
    squeeze = q.dim() == 3
    if squeeze:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    os, lses = [], []
    for s in range(len(cq) - 1):
        a, b, c, d = cq[s], cq[s + 1], ck[s], ck[s + 1]
        bs = None if bias is None else bias[:, :, a:b, c:d]  # packed (global) positions
        o, lse = _dense(q[:, a:b], k[:, c:d], v[:, c:d], bs, is_causal, window, align_br, scale)
        os.append(o)
        lses.append(lse)
    o, lse = torch.cat(os, dim=1), torch.cat(lses, dim=2)
    if squeeze:
        o, lse = o.squeeze(0), lse.squeeze(0)
    return o, lse


def rel_rms(out, ref, keep=None):
    """rms(out - ref) / rms(ref) in float64, optionally over the rows where keep is True."""
    out, ref = out.double(), ref.double()
    if keep is not None:
        out, ref = out[keep], ref[keep]
    den = ref.pow(2).mean().sqrt()
    num = (out - ref).pow(2).mean().sqrt()
    return (num / den).item() if den > 0 else num.item()
