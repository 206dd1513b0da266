"""test_dbias.py — fattn.attention's bias gradient (CPU): against torch's math SDPA in float64 with
a float attn_mask that requires grad, for every broadcast form of the mask (full, per head,
shared, [B, 1, 1, Skv], 2-d, an expanded leaf, a size-1 key dim), with -inf entries, GQA and the
causal mask; bitwise repeatable; on CUDA both arms (exact, and the fused kernels at prec native,
tf32 and f32) against the same reference.
The op fattn::attn_bwd_dbias: torch.library.opcheck (schema, fake kernel, autograd
registration), and torch.compile(fullgraph=True) of attention / sdpa with a mask that requires
grad giving eager's gradients bit for bit; under autocast, eager and compiled.
"""
import pytest
import torch
import torch.nn.functional as F

import fattn
from conftest import HAS_CUDA

B, SQ, SKV, HQ, HKV, D = 2, 70, 90, 4, 2, 32


def _qkv(dtype=torch.float32):
    q = torch.randn(B, SQ, HQ, D, dtype=dtype)
    k = torch.randn(B, SKV, HKV, D, dtype=dtype)
    v = torch.randn(B, SKV, HKV, D, dtype=dtype)
    return q, k, v


def _reference(q, k, v, mask, causal):
    """float64 math SDPA in torch's [B, H, S, D] layout, GQA by repeating k/v heads."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    m64 = mask.detach().double().requires_grad_()
    rep = HQ // HKV
    qt = q64.transpose(1, 2)
    kt = k64.transpose(1, 2).repeat_interleave(rep, dim=1)
    vt = v64.transpose(1, 2).repeat_interleave(rep, dim=1)
    full = m64
    if causal:  # top-left: key j <= query i
        keep = torch.ones(SQ, SKV, dtype=torch.bool).tril()
        full = m64.masked_fill(~keep, float("-inf"))
    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=full).transpose(1, 2)
    return o, q64, k64, v64, m64


def _rounding_bound(q, k, v, mask, causal, o_ref, do):
    """Per row, what 16-bit rounding can move Σ_j dS_ij (the gradient of a per-row-constant bias):
    O's error through δ = dO·O (P rounded before P·V, then O rounded) and P rounded before
    dS = P (dP − δ): 2^-8 (Σ_d |dO_id| (Σ_j P_ij |V_jd| + |O_id|) + Σ_j P_ij |dP_ij − δ_i|) + 1e-4,
    in float64, [B, HQ, SQ, 1]."""
    rep = HQ // HKV
    qt, kt, vt = (t.double().transpose(1, 2) for t in (q, k, v))
    kt, vt = kt.repeat_interleave(rep, dim=1), vt.repeat_interleave(rep, dim=1)
    s = qt @ kt.transpose(-1, -2) / D ** 0.5 + mask.detach().double()
    if causal:
        s = s.masked_fill(~torch.ones(SQ, SKV, dtype=torch.bool).tril(), float("-inf"))
    p64 = s.softmax(-1)
    o64, do64 = o_ref.detach().transpose(1, 2), do.double().transpose(1, 2)  # [B, HQ, SQ, D]
    o_err = p64 @ vt.abs() + o64.abs()
    ds_arg = (do64 @ vt.transpose(-1, -2) - (do64 * o64).sum(-1, keepdim=True)).abs()
    p_err = (p64 * ds_arg).sum(-1, keepdim=True)
    return 2.0 ** -8 * ((do64.abs() * o_err).sum(-1, keepdim=True) + p_err) + 1e-4


def _leaf(shape, neg_inf=True):
    m = torch.randn(*shape)
    if neg_inf:
        m[..., 3::7] = float("-inf")  # some keys masked in every row, never a whole row
    return m.requires_grad_()


MASKS = {
    "BHSS": lambda: _leaf((B, HQ, SQ, SKV)),
    "1HSS": lambda: _leaf((1, HQ, SQ, SKV)),
    "11SS": lambda: _leaf((1, 1, SQ, SKV)),
    "B11S": lambda: _leaf((B, 1, 1, SKV)),
    "SS_2d": lambda: _leaf((SQ, SKV)),
    "H1S_3d": lambda: _leaf((HQ, 1, SKV)),
    "BH1_keydim1": lambda: _leaf((B, HQ, SQ, 1), neg_inf=False),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(MASKS))
def test_dbias_matches_math_sdpa(name, causal):
    q, k, v = _qkv()
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    mask = MASKS[name]()
    do = torch.randn(B, SQ, HQ, D)
    o = fattn.attention(q, k, v, bias=mask, causal="top_left" if causal else False)
    o.backward(do)
    o_ref, q64, k64, v64, m64 = _reference(q, k, v, mask, causal)
    o_ref.backward(do.double())
    assert mask.grad is not None and mask.grad.shape == mask.shape and mask.grad.dtype == mask.dtype

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()

    assert rel(o.detach(), o_ref.detach()) < 1e-5
    for got, ref in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert rel(got, ref) < 1e-5
    if name == "BH1_keydim1":  # a per-row constant: its gradient is 0 up to rounding
        assert (mask.grad.double() - m64.grad).abs().max().item() < 1e-5
    else:
        assert rel(mask.grad, m64.grad) < 1e-5
    # -inf entries (and, with causal, keys above the diagonal) get exactly 0
    if name != "BH1_keydim1":
        dead = torch.isinf(mask.detach())
        assert (mask.grad[dead] == 0).all()
    if causal and name in ("BHSS", "1HSS", "11SS", "SS_2d"):
        keep = torch.ones(SQ, SKV, dtype=torch.bool).tril()
        assert (mask.grad[..., ~keep] == 0).all()


def test_dbias_expanded_leaf_and_repeatable():
    q, k, v = _qkv()
    leaf = _leaf((1, 1, SQ, SKV))
    do = torch.randn(B, SQ, HQ, D)
    grads = []
    for _ in range(2):
        leaf.grad = None
        o = fattn.attention(q, k, v, bias=leaf.expand(B, HQ, SQ, SKV))
        o.backward(do)
        grads.append(leaf.grad.clone())
    assert torch.equal(grads[0], grads[1])  # bitwise
    o_ref, _, _, _, m64 = _reference(q, k, v, leaf, False)
    o_ref.backward(do.double())
    assert ((grads[0].double() - m64.grad).norm() / m64.grad.norm()).item() < 1e-5


def test_dbias_leaves_qkv_gradients_unchanged():
    q, k, v = _qkv()
    mask = _leaf((1, HQ, SQ, SKV))
    do = torch.randn(B, SQ, HQ, D)
    out = []
    for want in (False, True):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        m = mask.detach().clone().requires_grad_(want)
        fattn.attention(qq, kk, vv, bias=m).backward(do)
        out.append((qq.grad, kk.grad, vv.grad))
    for a, b in zip(*out):
        assert torch.equal(a, b)


def test_dbias_bf16_bias_dtype():
    q, k, v = _qkv()
    mask = torch.randn(1, 1, SQ, SKV, dtype=torch.bfloat16).requires_grad_()
    fattn.attention(q, k, v, bias=mask).sum().backward()
    assert mask.grad.dtype == torch.bfloat16 and torch.isfinite(mask.grad.float()).all()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("algo,dtype,prec,tol", [("exact", torch.float32, "f32", 1e-5),
                                                 ("exact", torch.bfloat16, "native", 4e-3),
                                                 ("fused", torch.float32, "tf32", 4e-3),
                                                 ("fused", torch.float32, "f32", 1e-5),
                                                 ("fused", torch.bfloat16, "native", 4e-3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(MASKS))
def test_dbias_cuda_matches_math_sdpa(name, causal, algo, dtype, prec, tol):
    """The CUDA bias gradient against float64 math SDPA on the same (rounded) inputs: the exact
    arm (f32 without tensor cores; bf16 with the f32 dS kept beside the bf16 GEMM operand) and
    the fused kernels (mma_dbias_kernel after the backward: tf32, bf16); dq is bitwise the same
    with and without the bias gradient, and dbias bitwise repeatable."""
    q, k, v = _qkv(dtype)
    mask = MASKS[name]()
    do = torch.randn(B, SQ, HQ, D, dtype=dtype)
    causal_arg = "top_left" if causal else False

    def run(bias_grad):
        qc = q.cuda().requires_grad_()
        mc = mask.detach().cuda().requires_grad_(bias_grad)
        fattn.attention(qc, k.cuda(), v.cuda(), bias=mc, causal=causal_arg, algo=algo,
                        prec=prec).backward(do.cuda())
        return qc.grad, mc.grad

    dq, g = run(True)
    dq_plain, _ = run(False)
    _, g2 = run(True)
    assert torch.equal(dq, dq_plain) and torch.equal(g, g2)
    o_ref, _, _, _, m64 = _reference(q, k, v, mask, causal)
    o_ref.backward(do.double())
    got = g.cpu().double()
    assert g.shape == mask.shape and g.dtype == mask.dtype
    if name == "BH1_keydim1":  # a per-row constant: its gradient Σ_j dS_ij = Σ_j P_ij dP_ij − δ_i is
        # 0 up to rounding; every arm takes δ_i = dO_i·O_i from the stored O, so at 16 bits the row
        # is off by what _rounding_bound bounds (H100, exact arm: up to 0.026)
        if dtype != torch.float32:
            bound = _rounding_bound(q, k, v, mask, causal, o_ref, do)
            assert ((got - m64.grad).abs() <= bound).all()
        else:
            assert (got - m64.grad).abs().max().item() < (tol if algo == "exact" else 5 * tol)
    else:
        assert ((got - m64.grad).norm() / m64.grad.norm()).item() < tol
        assert (g[torch.isinf(mask.detach()).cuda()] == 0).all()
    if causal and name in ("BHSS", "1HSS", "11SS", "SS_2d"):
        keep = torch.ones(SQ, SKV, dtype=torch.bool, device="cuda").tril()
        assert (g[..., ~keep] == 0).all()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_dbias_cuda_exact_expanded_incoming_grad():
    """An incoming gradient expanded over the sequence (token stride 0, innermost 1): the bias
    backward copies it for cuBLAS as the plain backward does (refused before), giving the
    gradient of the same values passed dense."""
    q, k, v = (t.cuda() for t in _qkv())
    w = torch.randn(B, HQ, D, device="cuda")
    leaf = _leaf((1, HQ, SQ, SKV)).detach().cuda()
    grads = []
    for dense in (False, True):
        mask = leaf.clone().requires_grad_()
        o = fattn.attention(q, k, v, bias=mask, algo="exact", prec="f32")
        if dense:
            o.backward((w / SQ).unsqueeze(1).expand(B, SQ, HQ, D).contiguous())
        else:
            (o.mean(1) * w).sum().backward()
        grads.append(mask.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mask_shape", [(B, 1, SQ, SKV), (1, HQ, SQ, SKV), (SQ, SKV), (B, 1, 1, SKV)])
def test_sdpa_float_attn_mask_grad(mask_shape):
    """fattn.sdpa (torch's layout) with a float attn_mask that requires grad, beside torch's
    math SDPA in float64."""
    q = torch.randn(B, HQ, SQ, D, requires_grad=True)
    k, v = torch.randn(B, HQ, SKV, D), torch.randn(B, HQ, SKV, D)
    m = _leaf(mask_shape)
    do = torch.randn(B, HQ, SQ, D)
    fattn.sdpa(q, k, v, attn_mask=m).backward(do)
    m64 = m.detach().double().requires_grad_()
    F.scaled_dot_product_attention(q.detach().double(), k.double(), v.double(),
                                   attn_mask=m64).backward(do.double())
    assert m.grad.shape == m.shape
    assert ((m.grad.double() - m64.grad).norm() / m64.grad.norm()).item() < 1e-5
    assert (m.grad[torch.isinf(m.detach())] == 0).all()


# ------------------------------------------------------------------------------ op / compile
@pytest.mark.parametrize("bias_shape", [(1, 4, 9, 11), (2, 1, 1, 11), (2, 4, 9, 1), "expanded"])
def test_opcheck_bwd_dbias(bias_shape):
    from fattn._attn import normalize
    q = torch.randn(2, 9, 4, 16)
    k, v = torch.randn(2, 11, 2, 16), torch.randn(2, 11, 2, 16)
    if bias_shape == "expanded":  # a stride-0 dim of size > 1: its gradient is per element
        bias = torch.randn(1, 4, 1, 11).expand(2, 4, 9, 11)
    else:
        bias = torch.randn(*bias_shape)
    scalars = normalize(q, causal=True)
    bias_lib = bias.expand(bias.shape[0], bias.shape[1], 9, 11).contiguous()
    o, lse, saved = torch.ops.fattn.attn_fwd(q, k, v, bias_lib, None, None, *scalars)
    args = (torch.randn_like(o), q, k, v, o, lse, saved, bias, None, None) + scalars
    torch.library.opcheck(torch.ops.fattn.attn_bwd_dbias.default, args)
    db = torch.ops.fattn.attn_bwd_dbias(*args)[3]
    assert db.shape == bias.shape and db.dtype == torch.float32


COMPILE_MASKS = {
    "1HSS": lambda: _leaf((1, HQ, SQ, SKV)),
    "B11S": lambda: _leaf((B, 1, 1, SKV)),
    "expanded": lambda: _leaf((1, 1, SQ, SKV)),
    "bf16_keydim1": lambda: torch.randn(B, HQ, SQ, 1, dtype=torch.bfloat16).requires_grad_(),
}


@pytest.mark.parametrize("algo", ["fused", "exact"])
@pytest.mark.parametrize("name", list(COMPILE_MASKS))
def test_torch_compile_dbias_matches_eager(name, algo):
    """fullgraph=True: the bias-gradient path traces through fattn::attn_fwd and
    fattn::attn_bwd_dbias (fake kernels) with no graph break; dbias bitwise as eager."""
    q, k, v = _qkv()
    q.requires_grad_()
    leaf = COMPILE_MASKS[name]()
    do = torch.randn(B, SQ, HQ, D)

    def f(q, k, v, m):
        if name == "expanded":
            m = m.expand(B, HQ, SQ, SKV)
        return (fattn.attention(q, k, v, bias=m, causal="top_left", algo=algo) * do).sum()

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    g_eager = torch.autograd.grad(f(q, k, v, leaf), (q, leaf))
    g_comp = torch.autograd.grad(cf(q, k, v, leaf), (q, leaf))
    assert g_comp[1].shape == leaf.shape and g_comp[1].dtype == leaf.dtype
    for a, b in zip(g_eager, g_comp):
        assert torch.equal(a, b)


def test_torch_compile_sdpa_float_mask_grad():
    q = torch.randn(B, HQ, SQ, D, requires_grad=True)
    k, v = torch.randn(B, HQ, SKV, D), torch.randn(B, HQ, SKV, D)
    m = _leaf((SQ, SKV))

    def f(q, k, v, m):
        return fattn.sdpa(q, k, v, attn_mask=m).square().sum()

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    g_eager = torch.autograd.grad(f(q, k, v, m), (q, m))
    g_comp = torch.autograd.grad(cf(q, k, v, m), (q, m))
    for a, b in zip(g_eager, g_comp):
        assert torch.equal(a, b)
    assert (g_comp[1][torch.isinf(m.detach())] == 0).all()


@pytest.mark.parametrize("compiled", [False, True])
def test_dbias_under_autocast(compiled):
    """autocast(bfloat16): q, k, v and the mask run in bf16 (SDPA's rule, as without a mask
    gradient); the float32 leaves get the gradients of explicitly cast inputs, bit for bit."""
    q, k, v = _qkv()
    q.requires_grad_()
    m = _leaf((1, HQ, SQ, SKV))

    def f(q, k, v, m):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            o = fattn.attention(q, k, v, bias=m)
        return o.float().square().sum()

    g = torch.compile(f, backend="aot_eager", fullgraph=True) if compiled else f
    got = torch.autograd.grad(g(q, k, v, m), (q, m))
    ref = torch.autograd.grad(fattn.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(),
                                              bias=m.bfloat16()).float().square().sum(), (q, m))
    for a, b in zip(got, ref):
        assert a.dtype == torch.float32 and torch.equal(a, b)
