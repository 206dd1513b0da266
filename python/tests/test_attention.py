"""test_attention.py — fattn.attention's outputs and gradients against the plain formula.

Every case of CASES (one feature each: bias broadcasts, causal in both alignments, windows,
GQA/MQA, Skv != Sq, Dv != D, varlen, strided views, fully masked rows and key columns) runs for
every dtype, both algos and each device. The oracle is reference.ref_attention in float64 on the
same rounded inputs, differentiated by torch autograd with a random (non-zero) output gradient.
Tolerance (DESIGN §5): rms(out - ref)/rms(ref) must be within 2x of what the straightforward
formula achieves at the same precision (the inputs' dtype with the resolved arithmetic: F32 on
the CPU, TF32 or the 16-bit dtype on CUDA), or under the DESIGN bar of that precision.
Fully masked rows are checked directly: o = 0, lse = -inf, their dq rows = 0 (bitwise); a key
column that no query sees gets dk = dv = 0.

Run: cd python && pytest -q tests/test_attention.py
"""
import pytest
import torch

import fattn
from conftest import DEVICES, DTYPES
from reference import ref_attention, rel_rms

# One row = one feature. S/H sizes do not divide any tile; the CPU runs D = 16, CUDA D = 64.
CASES = {
    "plain":            dict(B=2, Sq=17, Skv=17, Hq=2, Hkv=2),
    "cross_skv_gt_sq":  dict(B=2, Sq=9, Skv=33, Hq=2, Hkv=2),
    "cross_skv_lt_sq":  dict(B=1, Sq=33, Skv=9, Hq=2, Hkv=2),
    "dv_ne_d":          dict(B=1, Sq=13, Skv=21, Hq=2, Hkv=2, dv_mult=2),
    "scale":            dict(B=1, Sq=13, Skv=13, Hq=2, Hkv=2, scale=0.37),
    "causal_br":        dict(B=2, Sq=13, Skv=29, Hq=2, Hkv=2, causal="bottom_right"),
    "causal_true":      dict(B=1, Sq=29, Skv=29, Hq=2, Hkv=2, causal=True),
    "causal_tl":        dict(B=2, Sq=29, Skv=13, Hq=2, Hkv=2, causal="top_left"),
    # bottom-right with Sq > Skv: the first Sq - Skv rows see no key at all
    "causal_br_masked": dict(B=2, Sq=29, Skv=13, Hq=2, Hkv=2, causal="bottom_right"),
    "window_br":        dict(B=2, Sq=23, Skv=31, Hq=2, Hkv=2, window=(4, 2)),
    "window_tl":        dict(B=2, Sq=23, Skv=31, Hq=2, Hkv=2, window=(3, 5), window_align="top_left"),
    "window_left_only": dict(B=1, Sq=23, Skv=23, Hq=2, Hkv=2, window=(6, None)),
    "causal_window":    dict(B=1, Sq=31, Skv=31, Hq=2, Hkv=2, causal=True, window=(5, 0)),
    "gqa":              dict(B=2, Sq=19, Skv=19, Hq=4, Hkv=2),
    "mqa_causal":       dict(B=1, Sq=19, Skv=25, Hq=6, Hkv=1, causal=True),
    "bias_2d":          dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="2d"),
    "bias_heads":       dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="heads"),
    "bias_batch":       dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="batch"),
    "bias_full":        dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="full"),
    "bias_stride0":     dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="expanded"),
    # a per-query bias [B, H, Sq, 1] broadcast over the keys, with a -inf row (nothing seen)
    "bias_per_query":   dict(B=2, Sq=15, Skv=21, Hq=2, Hkv=2, bias="per_query"),
    # -inf bias: one fully masked row and one key column nobody sees, plus causal on top
    "bias_neginf":      dict(B=2, Sq=15, Skv=15, Hq=2, Hkv=2, bias="neginf", causal=True),
    "varlen":           dict(B=1, Hq=2, Hkv=2, cu_q=[0, 5, 17, 30], cu_k=[0, 9, 12, 40]),
    "varlen_causal_gqa": dict(B=1, Hq=4, Hkv=2, cu_q=[0, 7, 8, 27], cu_k=[0, 7, 20, 39],
                              causal=True),
    "varlen_3d_bias":   dict(B=1, Hq=2, Hkv=2, cu_q=[0, 11, 24], cu_k=[0, 6, 24], bias="full",
                             varlen_3d=True),
    "strided_qkv":      dict(B=2, Sq=17, Skv=17, Hq=3, Hkv=3, layout="fused_qkv", causal=True),
    "strided_bhsd":     dict(B=2, Sq=17, Skv=23, Hq=2, Hkv=2, layout="bhsd"),
}

FLOOR = {"f32": 1e-5, "tf32": 2e-3, "native": 1e-2}  # DESIGN §5 bars per resolved precision


def make_inputs(case, dtype, device, D):
    c = dict(case)
    B, Hq, Hkv = c["B"], c["Hq"], c["Hkv"]
    Dv = D * c.get("dv_mult", 1)
    cu_q = cu_k = None
    if "cu_q" in c:
        cu_q = torch.tensor(c["cu_q"], dtype=torch.int32, device=device)
        cu_k = torch.tensor(c["cu_k"], dtype=torch.int32, device=device)
        Sq, Skv = c["cu_q"][-1], c["cu_k"][-1]
    else:
        Sq, Skv = c["Sq"], c["Skv"]

    def rnd(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    layout = c.get("layout", "contig")
    if layout == "fused_qkv":  # q, k, v are strided views into one [B, S, 3, H, D] buffer
        buf = rnd(B, Sq, 3, Hq, D)
        q, k, v = buf[:, :, 0], buf[:, :, 1], buf[:, :, 2]
    elif layout == "bhsd":     # [B, H, S, D] storage seen as [B, S, H, D]
        q = rnd(B, Hq, Sq, D).transpose(1, 2)
        k = rnd(B, Hkv, Skv, D).transpose(1, 2)
        v = rnd(B, Hkv, Skv, Dv).transpose(1, 2)
    else:
        q, k, v = rnd(B, Sq, Hq, D), rnd(B, Skv, Hkv, D), rnd(B, Skv, Hkv, Dv)
    if layout != "contig":
        assert not q.is_contiguous()
    bias = None
    kind = c.get("bias")
    if kind == "2d":
        bias = rnd(Sq, Skv)
    elif kind == "heads":
        bias = rnd(1, Hq, Sq, Skv)
    elif kind == "batch":
        bias = rnd(B, 1, Sq, Skv)
    elif kind == "full":
        bias = rnd(B, Hq, Sq, Skv)
    elif kind == "expanded":
        bias = rnd(1, 1, Sq, Skv).expand(B, Hq, Sq, Skv)  # stride 0 in B and H
    elif kind == "per_query":
        bias = torch.randn(B, Hq, Sq, 1, device=device)
        bias[:, :, 2, :] = float("-inf")
        bias = bias.to(dtype)
    elif kind == "neginf":
        bias = torch.randn(B, Hq, Sq, Skv, device=device)
        bias[:, :, 3, :] = float("-inf")   # row 3 sees nothing
        bias[:, :, :, 1] = float("-inf")   # key 1 is seen by nobody
        bias = bias.to(dtype)
    if c.get("varlen_3d"):
        q, k, v = q[0], k[0], v[0]
    kw = dict(bias=bias, causal=c.get("causal", False), window=c.get("window"),
              window_align=c.get("window_align"), scale=c.get("scale"),
              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    return q, k, v, kw


def _run(fn, q, k, v, do, kw):
    qs, ks, vs = (t.detach().requires_grad_(True) for t in (q, k, v))
    o, lse = fn(qs, ks, vs, **kw)
    dq, dk, dv = torch.autograd.grad(o, (qs, ks, vs), do)
    return o.detach(), lse.detach(), dq, dk, dv


def _baseline_dtype(prec, dtype):
    # The straightforward formula at the precision the library resolved to.
    return torch.float32 if prec in ("f32", "tf32") else dtype


@pytest.mark.parametrize("algo", ["fused", "exact"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_against_float64_formula(name, device, dtype, algo):
    case = CASES[name]
    D = 16 if device == "cpu" else 64
    q, k, v, kw = make_inputs(case, dtype, device, D)
    if device == "cuda":
        ok, why = fattn.supports(q, k, v, algo=algo, **kw)
        if not ok:
            pytest.skip(f"CUDA backend: {why}")
    prec = fattn.resolve_prec(q, algo=algo, **{n: kw[n] for n in ("cu_seqlens_q", "cu_seqlens_k")})
    if device == "cpu":
        assert prec == "f32", "the CPU backend computes in F32 (DESIGN §4)"

    do = torch.randn(q.shape[:-1] + (v.shape[-1],), device=device).to(dtype)
    out = _run(lambda *a, **k_: fattn.attention(*a, algo=algo, return_lse=True, **k_),
               q, k, v, do, kw)
    ref = _run(ref_attention, *(t.double() for t in (q, k, v)), do.double(),
               {**kw, "bias": None if kw["bias"] is None else kw["bias"].double()})
    bdt = _baseline_dtype(prec, dtype)
    with _tf32(prec == "tf32"):
        base = _run(ref_attention, *(t.to(bdt) for t in (q, k, v)), do.to(bdt),
                    {**kw, "bias": None if kw["bias"] is None else kw["bias"].to(bdt)})
    base = [t.to(dtype) if i != 1 else t for i, t in enumerate(base)]  # outputs in q's dtype

    o, lse = out[0], out[1]
    for t in out:
        assert not torch.isnan(t).any(), "NaN in fattn output"
    # Rows with no allowed key: defined exactly, compared directly.
    masked = torch.isneginf(ref[1])                       # [B, Hq, Sq] (or [Hq, T])
    assert torch.equal(torch.isneginf(lse), masked), "lse = -inf exactly on fully masked rows"
    if name in ("causal_br_masked", "bias_neginf"):
        assert masked.any(), "case meant to contain fully masked rows has none"
    rows = masked.transpose(-1, -2)                       # [B, Sq, Hq] (or [T, Hq])
    assert (o[rows] == 0).all() and (out[2][rows] == 0).all()
    if name == "bias_neginf":
        assert (out[3][:, 1] == 0).all() and (out[4][:, 1] == 0).all(), "unseen key: dk = dv = 0"

    floor = FLOOR[prec]
    keep_lse = ~masked
    for i, what in enumerate(("o", "lse", "dq", "dk", "dv")):
        keep = keep_lse if what == "lse" else None
        assert ref[i].abs().sum() > 0, f"reference {what} is all zero: the check would be vacuous"
        err = rel_rms(out[i], ref[i], keep)
        err_base = rel_rms(base[i], ref[i], keep)
        tol = max(2 * err_base, floor)
        assert err <= tol, (f"{what}: rel rms {err:.3g} > tol {tol:.3g} "
                            f"(straightforward {prec} formula: {err_base:.3g})")


class _tf32:
    """Context manager: TF32 matmuls for the baseline when the library resolved to TF32."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.on

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.prev
