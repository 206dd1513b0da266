"""test_compat.py — fattn.sdpa against SDPA's math path, and the FlashAttention-2 signatures.

fattn.sdpa: every case of SDPA_CASES (one documented SDPA feature each: 3-d/4-d/5-d inputs,
is_causal top-left with Sq = Skv, Sq < Skv, Sq > Skv, bool and float masks in every broadcast
shape, fully masked rows, scale incl. 0, enable_gqa, Ev != E) is compared, output and the three
gradients, with torch's own scaled_dot_product_attention restricted to its math backend in
float64 on the same rounded inputs. The signature is read from torch's docstring.
FlashAttention-2 (not installable without a GPU): its docstring's causal masks for Sq = 2,
Sk = 5 and Sq = 5, Sk = 2 are checked literally, its window definition row by row, the rest
against reference.ref_attention (bottom-right) in float64.

Run: cd python && pytest -q tests/test_compat.py
"""
import inspect
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fattn
from conftest import DEVICES
from reference import ref_attention, rel_rms

BAR = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def rnd(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


# ------------------------------------------------------------------------------ SDPA
# q/k/v shapes are SDPA's: [N, (...), H, L, E]; mask is built by make_mask.
SDPA_CASES = {
    "plain":            dict(q=(2, 3, 17, 16), kv=(2, 3, 17, 16)),
    "three_dim":        dict(q=(3, 13, 16), kv=(3, 21, 16)),
    "five_dim":         dict(q=(2, 2, 2, 9, 16), kv=(2, 2, 2, 11, 16)),
    "cross":            dict(q=(2, 2, 9, 16), kv=(2, 2, 33, 16)),
    "ev_ne_e":          dict(q=(1, 2, 13, 16), kv=(1, 2, 21, 16), ev=8),
    "causal_square":    dict(q=(2, 2, 29, 16), kv=(2, 2, 29, 16), is_causal=True),
    "causal_sq_lt_skv": dict(q=(2, 2, 13, 16), kv=(2, 2, 29, 16), is_causal=True),
    "causal_sq_gt_skv": dict(q=(2, 2, 29, 16), kv=(2, 2, 13, 16), is_causal=True),
    "scale":            dict(q=(1, 2, 13, 16), kv=(1, 2, 13, 16), scale=0.37),
    "scale_zero":       dict(q=(1, 2, 13, 16), kv=(1, 2, 13, 16), scale=0.0),
    "gqa":              dict(q=(2, 4, 19, 16), kv=(2, 2, 19, 16), enable_gqa=True),
    "mqa_causal":       dict(q=(1, 6, 19, 16), kv=(1, 1, 25, 16), enable_gqa=True, is_causal=True),
    "bool_2d":          dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("bool", "LS")),
    "bool_full":        dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("bool", "NHLS")),
    "bool_key_padding": dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("bool", "N11S")),
    "bool_heads_3d":    dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("bool", "HLS")),
    "bool_masked_rows": dict(q=(2, 2, 15, 16), kv=(2, 2, 15, 16), mask=("bool_rows", "N1LS")),
    "bool_three_dim":   dict(q=(3, 13, 16), kv=(3, 21, 16), mask=("bool", "NLS")),
    "bool_five_dim":    dict(q=(2, 2, 2, 9, 16), kv=(2, 2, 2, 11, 16), mask=("bool", "LS")),
    "float_2d":         dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("float", "LS")),
    "float_full":       dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("float", "NHLS")),
    "float_neginf":     dict(q=(2, 2, 15, 16), kv=(2, 2, 15, 16), mask=("float_neginf", "N1LS")),
    "float_expanded":   dict(q=(2, 2, 15, 16), kv=(2, 2, 21, 16), mask=("float", "expanded")),
}


def make_mask(kind, layout, q, k, dtype):
    N, L, S = q.shape[0], q.shape[-2], k.shape[-2]
    H = q.shape[-3] if q.dim() > 3 else 1
    shape = {"LS": (L, S), "NHLS": (N, H, L, S), "N11S": (N, 1, 1, S), "HLS": (H, L, S),
             "N1LS": (N, 1, L, S), "NLS": (N, L, S), "expanded": (L, S)}[layout]
    if kind == "bool":
        m = torch.rand(shape) > 0.3
    elif kind == "bool_rows":
        m = torch.rand(shape) > 0.3
        m[..., 3, :] = False                       # a row with no key at all
        m[..., :, 5] = False                       # a key nobody sees
    else:
        m = torch.randn(shape).to(dtype)
        if kind == "float_neginf":
            m[..., 4, :] = float("-inf")
            m[..., :, 2] = float("-inf")
    if layout == "expanded":
        m = m.expand(N, H, L, S)                   # stride-0 batch and head dims
    return m


def sdpa_inputs(case, dtype, device):
    c = SDPA_CASES[case]
    ev = c.get("ev", c["kv"][-1])
    q = rnd(*c["q"], dtype=dtype, device=device)
    k = rnd(*c["kv"], dtype=dtype, device=device)
    v = rnd(*c["kv"][:-1], ev, dtype=dtype, device=device)
    kw = {n: c[n] for n in ("is_causal", "scale", "enable_gqa") if n in c}
    if "mask" in c:
        kw["attn_mask"] = make_mask(*c["mask"], q, k, dtype).to(device)
    return q, k, v, kw


def sdpa_math(q, k, v, **kw):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_matches_math_path_float64(case, dtype, device):
    q, k, v, kw = sdpa_inputs(case, dtype, device)
    x = [t.clone().requires_grad_() for t in (q, k, v)]
    x64 = [t.double().requires_grad_() for t in (q, k, v)]
    kw64 = dict(kw)
    if "attn_mask" in kw and kw["attn_mask"].is_floating_point():
        kw64["attn_mask"] = kw["attn_mask"].double()
    o = fattn.sdpa(*x, **kw)
    ref = sdpa_math(*x64, **kw64)
    assert o.shape == ref.shape and o.dtype == dtype
    do = torch.randn_like(ref)
    g = torch.autograd.grad(o, x, do.to(dtype))
    g_ref = torch.autograd.grad(ref, x64, do)
    bar = 2e-3 if device == "cuda" and dtype == torch.float32 else BAR[dtype]  # TF32 there
    assert torch.isfinite(o).all()
    assert rel_rms(o, ref.nan_to_num()) < bar, case
    for name, a, b in zip("qkv", g, g_ref):
        assert torch.isfinite(a).all(), name
        if kw.get("scale") != 0.0 or name == "v":   # scale 0: dq = dk = 0 exactly
            assert b.abs().max() > 0, f"reference d{name} is all zero: the check is vacuous"
        assert rel_rms(a, b.nan_to_num()) < 2 * bar, f"d{name}"


def test_sdpa_fully_masked_row_is_zero_as_math_path():
    """A bool row with no True: SDPA's math path gives 0 there, and so does fattn (no NaN),
    with zero gradient into that query row."""
    q, k, v = (rnd(1, 2, 6, 16).requires_grad_() for _ in range(3))
    m = torch.rand(6, 6) > 0.3
    m[2] = False
    o = fattn.sdpa(q, k, v, attn_mask=m)
    ref = sdpa_math(q.double(), k.double(), v.double(), attn_mask=m)
    assert torch.equal(o[:, :, 2], torch.zeros_like(o[:, :, 2]))
    assert torch.equal(ref[:, :, 2], torch.zeros_like(ref[:, :, 2]))
    (dq,) = torch.autograd.grad(o, q, torch.randn_like(o))
    assert torch.equal(dq[:, :, 2], torch.zeros_like(dq[:, :, 2]))


def test_sdpa_is_causal_is_top_left():
    """Sq = 3 < Skv = 5, is_causal: query i sees keys j <= i (SDPA), not j <= i + 2 (FA2)."""
    q = torch.zeros(1, 1, 3, 4)
    k = torch.zeros(1, 1, 5, 4)
    v = torch.eye(5).view(1, 1, 5, 5)               # o[i, j] = P(i attends j)
    p = fattn.sdpa(q, k, v, is_causal=True)[0, 0]
    assert torch.equal(p > 0, torch.ones(3, 5).tril().bool())


def test_sdpa_signature_is_torchs():
    """Parameter names, order and defaults as torch's own docstring states them."""
    doc = F.scaled_dot_product_attention.__doc__
    head = re.match(r"\s*scaled_dot_product_attention\((.*?)\)\s*->", doc, re.S).group(1)
    want = [p.strip() for p in head.replace("\n", " ").split(",")]
    got = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
           for p in inspect.signature(fattn.sdpa).parameters.values()]
    assert got == want


def test_sdpa_errors_name_the_argument():
    q = rnd(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match="dropout_p=0.1"):
        fattn.sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="attn_mask and is_causal"):
        fattn.sdpa(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        fattn.sdpa(rnd(1, 4, 4, 8), q, q)
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        fattn.sdpa(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="at least 3 dims"):
        fattn.sdpa(q[0, 0], q[0, 0], q[0, 0])
    with pytest.raises(TypeError, match="float64"):
        fattn.sdpa(q.double(), q.double(), q.double())


def test_sdpa_output_is_a_view_of_the_bshd_result():
    """No copy on the way in or out: the [B, H, S, D] output is the transposed [B, S, H, D]
    buffer the library wrote (as FlashAttention's SDPA backend returns it)."""
    q = rnd(2, 3, 17, 16)
    o = fattn.sdpa(q, q, q)
    assert o.shape == (2, 3, 17, 16) and o.transpose(1, 2).is_contiguous()


# ------------------------------------------------------------------------------ FlashAttention-2
FA2_SIGNATURES = {
    "flash_attn_func": "q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, "
                       "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, "
                       "return_attn_probs=False",
    "flash_attn_varlen_func": "q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, "
                              "dropout_p=0.0, softmax_scale=None, causal=False, "
                              "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                              "deterministic=False, return_attn_probs=False, block_table=None",
    "flash_attn_qkvpacked_func": "qkv, dropout_p=0.0, softmax_scale=None, causal=False, "
                                 "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                                 "deterministic=False, return_attn_probs=False",
    "flash_attn_kvpacked_func": "q, kv, dropout_p=0.0, softmax_scale=None, causal=False, "
                                "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                                "deterministic=False, return_attn_probs=False",
}


@pytest.mark.parametrize("name", list(FA2_SIGNATURES))
def test_fa2_signature(name):
    sig = inspect.signature(getattr(fattn, name))
    assert ", ".join(str(p) for p in sig.parameters.values()) == FA2_SIGNATURES[name]


def attn_pattern(sq, sk, **kw):
    """P > 0 of flash_attn_func: q = k = 0 gives uniform weights over the allowed keys and
    v = I reads them out."""
    q = torch.zeros(1, sq, 1, 4)
    k = torch.zeros(1, sk, 1, 4)
    v = torch.eye(sk).view(1, sk, 1, sk)
    return (fattn.flash_attn_func(q, k, v, **kw)[0, :, 0] > 0).int()


def test_fa2_causal_masks_of_its_docstring():
    assert attn_pattern(2, 5, causal=True).tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert attn_pattern(5, 2, causal=True).tolist() == [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]


@pytest.mark.parametrize("sq,sk,window,causal", [(6, 6, (2, 1), False), (3, 7, (1, 0), False),
                                                 (7, 4, (2, 3), False), (6, 9, (2, 5), True),
                                                 (6, 6, (-1, 2), False), (5, 5, (-3, -7), False)])
def test_fa2_window_definition(sq, sk, window, causal):
    """FA2: query i attends keys in [i + Sk - Sq - left, i + Sk - Sq + right], a negative size
    is unbounded, and causal makes right = 0 whatever was passed."""
    left, right = window
    right = 0 if causal else right
    want = [[int((left < 0 or j >= i + sk - sq - left) and (right < 0 or j <= i + sk - sq + right))
             for j in range(sk)] for i in range(sq)]
    assert attn_pattern(sq, sk, window_size=window, causal=causal).tolist() == want


@pytest.mark.parametrize("device", DEVICES)
def test_fa2_positional_call_matches_reference(device):
    q = rnd(2, 13, 4, 16, device=device).requires_grad_()
    k = rnd(2, 21, 2, 16, device=device).requires_grad_()
    v = rnd(2, 21, 2, 16, device=device).requires_grad_()
    o = fattn.flash_attn_func(q, k, v, 0.0, 0.3, True, (5, -1))     # FA2's positional order
    ref, _ = ref_attention(q.double(), k.double(), v.double(), scale=0.3, causal=True,
                           window=(5, 0))
    assert rel_rms(o, ref) < 2e-3
    do = torch.randn_like(o)
    g = torch.autograd.grad(o, (q, k, v), do)
    g_ref = torch.autograd.grad(ref, (q, k, v), do.double())
    for a, b in zip(g, g_ref):
        assert rel_rms(a, b) < 4e-3


def test_fa2_packed_and_varlen_forms_agree_with_flash_attn_func():
    qkv = rnd(2, 11, 3, 2, 16)
    o = fattn.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert torch.equal(fattn.flash_attn_qkvpacked_func(qkv, causal=True), o)
    assert torch.equal(fattn.flash_attn_kvpacked_func(qkv[:, :, 0], qkv[:, :, 1:], causal=True), o)
    # varlen: each sequence alone through flash_attn_func, bottom-right causal per sequence
    lq, lk = [5, 1, 9], [7, 4, 9]
    q, k, v = rnd(sum(lq), 4, 16), rnd(sum(lk), 2, 16), rnd(sum(lk), 2, 16)
    for dt in (torch.int32, torch.int64):
        cq = torch.tensor([0, 5, 6, 15], dtype=dt)
        ck = torch.tensor([0, 7, 11, 20], dtype=dt)
        out = fattn.flash_attn_varlen_func(q, k, v, cq, ck, 9, 9, causal=True, window_size=(3, 0))
        for s in range(3):
            a, b, c, d = cq[s], cq[s + 1], ck[s], ck[s + 1]
            one = fattn.flash_attn_func(q[None, a:b], k[None, c:d], v[None, c:d], causal=True,
                                        window_size=(3, 0))
            assert torch.allclose(out[a:b], one[0], rtol=1e-6, atol=1e-6)


def test_fa2_unsupported_arguments_are_named_errors():
    q = rnd(1, 4, 2, 8)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    for kw, what in [(dict(dropout_p=0.1), "dropout_p"), (dict(return_attn_probs=True),
                     "return_attn_probs"), (dict(softcap=30.0), "softcap"),
                     (dict(alibi_slopes=torch.ones(2)), "alibi_slopes")]:
        with pytest.raises(NotImplementedError, match=what):
            fattn.flash_attn_func(q, q, q, **kw)
    with pytest.raises(NotImplementedError, match="block_table"):
        fattn.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, block_table=cu)
    with pytest.raises(ValueError, match="window_size"):
        fattn.flash_attn_func(q, q, q, window_size=3)
    # accepted and without effect: fattn's backward is always deterministic
    assert torch.equal(fattn.flash_attn_func(q, q, q, deterministic=True),
                       fattn.flash_attn_func(q, q, q))
