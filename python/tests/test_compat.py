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
from reference import allowed_mask, ref_attention, rel_rms

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
    for kw, what in [(dict(dropout_p=0.1), "dropout_p"), (dict(softcap=30.0), "softcap"),
                     (dict(alibi_slopes=torch.ones(2)), "alibi_slopes")]:
        with pytest.raises(NotImplementedError, match=what):
            fattn.flash_attn_func(q, q, q, **kw)
    with pytest.raises(NotImplementedError, match="block_table"):
        fattn.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, block_table=cu)
    with pytest.raises(NotImplementedError, match="dropout_p"):   # with return_attn_probs too
        fattn.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, 0.1, return_attn_probs=True)
    with pytest.raises(ValueError, match="window_size"):
        fattn.flash_attn_func(q, q, q, window_size=3)
    # accepted and without effect: fattn's backward is always deterministic
    assert torch.equal(fattn.flash_attn_func(q, q, q, deterministic=True),
                       fattn.flash_attn_func(q, q, q))


# ------------------------------------------------------------------------------ return_attn_probs
def lse64(q, k, scale, causal, window):
    """float64 logsumexp over the allowed keys of scale·q·k, [B, Hq, Sq] (q [B, Sq, Hq, D],
    k [B, Sk, Hk, D]); FA2's masks (bottom-right); -inf on a row with no key."""
    g = q.shape[2] // k.shape[2]
    kh = k.double().repeat_interleave(g, dim=2)
    s = scale * torch.einsum("bihd,bjhd->bhij", q.double(), kh)
    wl, wr = window
    ok = allowed_mask(q.shape[1], k.shape[1], causal, (wl, 0 if causal else wr), True, q.device)
    return torch.logsumexp(s.masked_fill(~ok, float("-inf")), dim=-1)


def check_lse(lse, want):
    assert lse.dtype == torch.float32 and lse.shape == want.shape
    dead = torch.isneginf(want)
    assert torch.equal(torch.isneginf(lse), dead), "lse = -inf exactly on rows with no key"
    # f32 inputs run at prec "auto": strict f32 on the CPU, TF32 products on CUDA (10-bit mantissa)
    tol = 1e-5 if lse.device.type == "cpu" else 3e-3
    assert torch.allclose(lse[~dead].double(), want[~dead], rtol=tol, atol=tol)


FA2_LSE_CASES = {                 # Sq, Sk, causal, window_size, softmax_scale
    "plain_cross":      (7, 9, False, (-1, -1), None),
    "causal_sq_gt_sk":  (9, 5, True, (-1, -1), None),      # rows 0-3 see no key
    "causal_window":    (11, 11, True, (3, -1), 0.3),
    "window_sq_lt_sk":  (5, 12, False, (2, 1), None),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(FA2_LSE_CASES))
def test_fa2_return_attn_probs_gives_out_lse_none(case, device):
    """FA2's (out, softmax_lse, S_dmask): out bitwise the plain call's (and its gradients),
    softmax_lse [B, Hq, Sq] float32 against a float64 logsumexp of the scaled scores under the
    same bottom-right masks, S_dmask None; lse carries no gradient. The packed forms agree."""
    sq, sk, causal, window, scale = FA2_LSE_CASES[case]
    q = rnd(2, sq, 4, 16, device=device).requires_grad_()
    k = rnd(2, sk, 2, 16, device=device).requires_grad_()
    v = rnd(2, sk, 2, 16, device=device).requires_grad_()
    res = fattn.flash_attn_func(q, k, v, 0.0, scale, causal, window, return_attn_probs=True)
    assert isinstance(res, tuple) and len(res) == 3 and res[2] is None
    out, lse, _ = res
    plain = fattn.flash_attn_func(q, k, v, 0.0, scale, causal, window)
    assert torch.equal(out, plain) and out.requires_grad and not lse.requires_grad
    want = lse64(q, k, scale or 16 ** -0.5, causal, window)
    check_lse(lse, want)
    if case == "causal_sq_gt_sk":
        assert torch.isneginf(want).any()
    do = torch.randn_like(out)
    g = torch.autograd.grad(out, (q, k, v), do)
    g_plain = torch.autograd.grad(plain, (q, k, v), do)
    assert all(torch.equal(a, b) for a, b in zip(g, g_plain))
    if sq == sk:
        qkv = torch.stack([q.detach(), k.detach().repeat_interleave(2, 2),
                           v.detach().repeat_interleave(2, 2)], dim=2)
        o3, l3, s3 = fattn.flash_attn_qkvpacked_func(qkv, 0.0, scale, causal, window,
                                                     return_attn_probs=True)
        assert s3 is None and torch.equal(o3, fattn.flash_attn_qkvpacked_func(
            qkv, 0.0, scale, causal, window))
        check_lse(l3, lse64(qkv[:, :, 0], qkv[:, :, 1], scale or 16 ** -0.5, causal, window))
    kv = torch.stack([k.detach(), v.detach()], dim=2)
    o2, l2, s2 = fattn.flash_attn_kvpacked_func(q.detach(), kv, 0.0, scale, causal, window,
                                                return_attn_probs=True)
    assert s2 is None and torch.equal(o2, plain.detach()) and torch.equal(l2, lse)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (3, 0))])
def test_fa2_varlen_return_attn_probs_lse_is_heads_by_total_q(causal, window, device):
    """flash_attn_varlen_func's softmax_lse is [Hq, total_q] (FA2 2.x), each sequence's columns
    its own float64 logsumexp (bottom-right masks per sequence: sequence 0 has Sq 6 > Sk 2, so
    causal leaves rows without a key); out is bitwise the plain varlen call's."""
    lq, lk = [6, 1, 9], [2, 4, 9]
    q = rnd(sum(lq), 4, 16, device=device).requires_grad_()
    k = rnd(sum(lk), 2, 16, device=device).requires_grad_()
    v = rnd(sum(lk), 2, 16, device=device).requires_grad_()
    cq = torch.tensor([0, 6, 7, 16], dtype=torch.int32, device=device)
    ck = torch.tensor([0, 2, 6, 15], dtype=torch.int32, device=device)
    out, lse, s = fattn.flash_attn_varlen_func(q, k, v, cq, ck, 9, 9, causal=causal,
                                               window_size=window, return_attn_probs=True)
    plain = fattn.flash_attn_varlen_func(q, k, v, cq, ck, 9, 9, causal=causal, window_size=window)
    assert s is None and torch.equal(out, plain) and out.requires_grad and not lse.requires_grad
    assert lse.shape == (4, sum(lq)) and lse.dtype == torch.float32
    want = torch.cat([lse64(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]], 16 ** -0.5,
                            causal, window)[0] for i in range(3)], dim=1)
    check_lse(lse, want)
    if causal:
        assert torch.isneginf(want).any()
    do = torch.randn_like(out)
    g = torch.autograd.grad(out, (q, k, v), do)
    assert all(torch.equal(a, b) for a, b in zip(g, torch.autograd.grad(plain, (q, k, v), do)))


# ------------------------------------------------------------------------------ strides
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_sdpa_takes_a_non_unit_innermost_stride(which, device):
    """SDPA takes any strides: a [N, H, E, L] buffer transposed to [N, H, L, E] (innermost
    stride L) gives the values and gradients of the contiguous call, the gradient landing in
    the buffer's own layout. fattn.attention (and the C API) keep refusing such a view."""
    shapes = {"query": (2, 3, 13, 16), "key": (2, 3, 17, 16), "value": (2, 3, 17, 8)}
    x = {n: rnd(*s, device=device) for n, s in shapes.items()}
    buf = x[which].transpose(-1, -2).contiguous().requires_grad_()   # [N, H, E, L]
    strided = buf.transpose(-1, -2)
    assert strided.stride(-1) != 1 and torch.equal(strided, x[which])
    mixed = {n: strided if n == which else t.clone().requires_grad_() for n, t in x.items()}
    dense = {n: t.clone().requires_grad_() for n, t in x.items()}
    o = fattn.sdpa(**mixed, is_causal=True)
    ref = fattn.sdpa(**dense, is_causal=True)
    assert torch.equal(o, ref)
    do = torch.randn_like(o)
    o.backward(do)
    ref.backward(do)
    assert buf.grad.shape == buf.shape and buf.grad.stride() == buf.stride()
    assert torch.equal(buf.grad.transpose(-1, -2), dense[which].grad)
    for n in shapes:
        if n != which:
            assert torch.equal(mixed[n].grad, dense[n].grad)
    t = {n: mixed[n].detach().transpose(1, 2) for n in shapes}     # [N, L, H, E] views
    with pytest.raises(fattn.FattnError, match="innermost stride"):
        fattn.attention(t["query"], t["key"], t["value"])


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_masks_with_any_strides(device):
    """A transposed float or bool mask, and a mask broadcast over the keys ([L, 1], stride 0 or
    size 1 on the key dim), match SDPA's math path as a contiguous mask does."""
    q, k, v = rnd(2, 2, 9, 16, device=device), rnd(2, 2, 11, 16, device=device), \
        rnd(2, 2, 11, 16, device=device)
    masks = {"float_t": torch.randn(11, 9).t(), "bool_t": (torch.rand(11, 9) > 0.3).t(),
             "per_query": torch.randn(9, 1), "per_query_expanded": torch.randn(2, 1, 9, 1)
             .expand(2, 2, 9, 11)}
    for name, m in masks.items():
        m = m.to(device)
        o = fattn.sdpa(q, k, v, attn_mask=m)
        m64 = m if m.dtype == torch.bool else m.double()
        ref = sdpa_math(q.double(), k.double(), v.double(), attn_mask=m64)
        assert rel_rms(o, ref) < (2e-3 if device == "cuda" else 1e-5), name
        assert torch.equal(o, fattn.sdpa(q, k, v, attn_mask=m.contiguous())), name


@pytest.mark.parametrize("device", DEVICES)
def test_fa2_takes_a_non_unit_innermost_stride(device):
    """FA2 makes such a tensor contiguous (maybe_contiguous); so does fattn's drop-in."""
    q = rnd(2, 5, 4, 16, device=device)
    kb = rnd(2, 7, 16, 2, device=device).requires_grad_()        # [B, Sk, D, Hk] buffer
    k = kb.transpose(-1, -2)
    v = rnd(2, 7, 2, 16, device=device)
    k_dense = k.detach().contiguous().requires_grad_()
    o = fattn.flash_attn_func(q, k, v, causal=True)
    ref = fattn.flash_attn_func(q, k_dense, v, causal=True)
    assert torch.equal(o, ref)
    do = torch.randn_like(o)
    assert torch.equal(torch.autograd.grad(o, kb, do)[0].transpose(-1, -2),
                       torch.autograd.grad(ref, k_dense, do)[0])
    cq = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    ck = torch.tensor([0, 3, 7], dtype=torch.int32, device=device)
    ov = fattn.flash_attn_varlen_func(q[0], k[0], v[0], cq, ck, 3, 4, causal=True)
    assert torch.equal(ov, fattn.flash_attn_varlen_func(q[0], k_dense[0], v[0], cq, ck, 3, 4,
                                                        causal=True))


# ------------------------------------------------------------------------------ finfo.min rows
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_sdpa_finfo_min_padding_row_keeps_its_scores(dtype, device):
    """A row whose every key has torch.finfo(dtype).min added (Hugging Face's padding rows) is
    softmax of its own scores (a constant added to a row changes no probability): o and all
    gradients are those of the same call with that row's mask 0, never 0. SDPA's math path
    rounds scale·q·k + finfo.min to finfo.min for every key and returns the mean of V there.
    A bool row with no True gives o = 0 (both)."""
    q, k, v = (rnd(1, 2, 8, 16, dtype=dtype, device=device).requires_grad_() for _ in range(3))
    m = torch.randn(8, 8, device=device).to(dtype)
    m[5] = torch.finfo(dtype).min
    o = fattn.sdpa(q, k, v, attn_mask=m)
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    m0 = m.double().clone()
    m0[5] = 0.0
    exact = sdpa_math(*x64, attn_mask=m0)              # the same softmax, without the rounding
    bar = 2e-3 if device == "cuda" and dtype == torch.float32 else BAR[dtype]
    assert rel_rms(o, exact) < bar
    assert rel_rms(o[:, :, 5], exact[:, :, 5]) < bar
    math_row = sdpa_math(*(t.detach().double() for t in (q, k, v)), attn_mask=m.double())[:, :, 5]
    v_mean = v.detach().double().mean(dim=2)
    assert torch.allclose(math_row, v_mean, atol=1e-12)            # SDPA's math: mean of V
    assert (o[:, :, 5].double() - v_mean).abs().max() > 0.1         # fattn: not the mean of V
    assert o[:, :, 5].abs().max() > 0.1                             # and not 0
    do = torch.randn_like(exact)
    g = torch.autograd.grad(o, (q, k, v), do.to(dtype))
    g_exact = torch.autograd.grad(exact, x64, do)
    for name, a, b in zip("qkv", g, g_exact):
        assert rel_rms(a, b) < 2 * bar, f"d{name}"
    zero = fattn.sdpa(q, k, v, attn_mask=m > torch.finfo(dtype).min)   # bool, True = attend
    assert torch.equal(zero[:, :, 5], torch.zeros_like(zero[:, :, 5]))
