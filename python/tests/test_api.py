"""test_api.py — everything about fattn.attention that is not a parity number: finite
differences (gradcheck), bitwise determinism, thread-count independence, errors carrying the
library's message, torch.library.opcheck, torch.compile, and the query helpers
(resolve_prec, supports, memory).

Run: cd python && pytest -q tests/test_api.py
"""
import pytest
import torch

import fattn
from conftest import DEVICES, HAS_CUDA
from reference import ref_attention, rel_rms


def rnd(*shape, dtype=torch.float32, device="cpu", grad=False):
    return torch.randn(*shape, device=device).to(dtype).requires_grad_(grad)


# ------------------------------------------------------------------------------ finite differences
GRADCHECK = dict(eps=1e-2, atol=3e-3, rtol=3e-3)
F32_GRADCHECK_WARNING = "ignore:Input #.* is not a double precision"


@pytest.mark.filterwarnings(F32_GRADCHECK_WARNING)
@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window=(2, 1)),
                                dict(causal="top_left", algo="exact")],
                         ids=["plain", "causal", "window", "exact_tl"])
def test_gradcheck_f32(kw):
    """torch.autograd.gradcheck on float32 inputs (the library takes no float64): the
    analytical backward of the library against central finite differences of the library's
    own forward. eps = 1e-2 keeps the f32 rounding noise of the forward (~1e-7 relative) small
    against the step; the step's truncation error needs atol = rtol = 3e-3 instead of
    gradcheck's 1e-5 — loose, but test_gradcheck_would_catch_a_wrong_gradient shows a backward
    that is 1% off fails at exactly these settings."""
    q = rnd(1, 5, 2, 4, grad=True)
    k = rnd(1, 7, 1, 4, grad=True)   # GQA 2:1 and Skv != Sq
    v = rnd(1, 7, 1, 3, grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: fattn.attention(a, b, c, **kw), (q, k, v),
                                    **GRADCHECK)


@pytest.mark.filterwarnings(F32_GRADCHECK_WARNING)
def test_gradcheck_would_catch_a_wrong_gradient():
    """The gradcheck above can fail: the plain formula in float32, same shapes and settings,
    passes with its true backward and is rejected with a backward scaled by 1.01."""
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return ref_attention(q, k, v)[0]

        @staticmethod
        def backward(ctx, do):
            q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
            with torch.enable_grad():
                g = torch.autograd.grad(ref_attention(q, k, v)[0], (q, k, v), do)
            return tuple(1.01 * t for t in g)

    x = (rnd(1, 5, 2, 4, grad=True), rnd(1, 7, 1, 4, grad=True), rnd(1, 7, 1, 3, grad=True))
    assert torch.autograd.gradcheck(lambda a, b, c: ref_attention(a, b, c)[0], x, **GRADCHECK)
    assert not torch.autograd.gradcheck(Wrong.apply, x, raise_exception=False, **GRADCHECK)


# ------------------------------------------------------------------------------ determinism
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ["fused", "exact"])
def test_backward_bitwise_deterministic(device, algo):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    D = 64 if device == "cuda" else 16
    q = rnd(2, 67, 4, D, dtype=dtype, device=device, grad=True)
    k = rnd(2, 67, 2, D, dtype=dtype, device=device, grad=True)
    v = rnd(2, 67, 2, D, dtype=dtype, device=device, grad=True)
    do = rnd(2, 67, 4, D, dtype=dtype, device=device)
    runs = []
    for _ in range(3):
        o = fattn.attention(q, k, v, causal=True, algo=algo)
        runs.append([o.detach()] + list(torch.autograd.grad(o, (q, k, v), do)))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                               b.view(torch.int16 if b.element_size() == 2 else torch.int32))


def test_cpu_results_independent_of_thread_count():
    q, k, v = (rnd(2, 45, 2, 16, grad=True) for _ in range(3))
    do = rnd(2, 45, 2, 16)
    prev = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            o = fattn.attention(q, k, v, causal=True)
            results.append([o.detach()] + list(torch.autograd.grad(o, (q, k, v), do)))
    finally:
        torch.set_num_threads(prev)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))


# ------------------------------------------------------------------------------ errors
def _expect_library_error(q, k, v, **kw):
    """The call must fail with FattnError whose text contains the reason the library itself
    gives for these arguments (fattn_attn_supports -> why)."""
    ok, why = fattn.supports(q, k, v, **kw)
    assert not ok and why, "library accepted arguments the test means to be invalid"
    with pytest.raises(fattn.FattnError) as e:
        fattn.attention(q, k, v, **kw)
    assert why in str(e.value)
    return e.value


def test_error_dtype_mix():
    e = _expect_library_error(rnd(1, 4, 2, 8), rnd(1, 4, 2, 8, dtype=torch.float16), rnd(1, 4, 2, 8))
    assert e.status == 2  # FATTN_ERR_DTYPE_MISMATCH


def test_error_head_dim_mismatch():
    e = _expect_library_error(rnd(1, 4, 2, 8), rnd(1, 4, 2, 6), rnd(1, 4, 2, 8))
    assert e.status == 3  # FATTN_ERR_SHAPE_MISMATCH


def test_error_batch_mismatch():
    _expect_library_error(rnd(2, 4, 2, 8), rnd(1, 4, 2, 8), rnd(1, 4, 2, 8))


def test_error_gqa_heads():
    e = _expect_library_error(rnd(1, 4, 3, 8), rnd(1, 4, 2, 8), rnd(1, 4, 2, 8))
    assert e.status == 4  # FATTN_ERR_GQA_HEADS


def test_error_innermost_stride_is_reported_not_copied():
    q = rnd(1, 4, 2, 16)[..., ::2]  # innermost stride 2
    assert q.stride(-1) == 2
    e = _expect_library_error(q, rnd(1, 4, 2, 8), rnd(1, 4, 2, 8))
    assert e.status == 5  # FATTN_ERR_BAD_STRIDE


def test_error_bad_window_with_causal():
    q = rnd(1, 4, 2, 8)
    _expect_library_error(q, q, q, causal=True, window=(2, 3))


def test_error_bad_cu_seqlens():
    q = rnd(1, 10, 2, 8)
    cu_q = torch.tensor([0, 6, 4], dtype=torch.int32)  # not monotonic
    cu_k = torch.tensor([0, 5, 10], dtype=torch.int32)
    e = _expect_library_error(q, q, q, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert e.status == 9  # FATTN_ERR_BAD_SEQLENS


def test_error_binding_rules():
    q = rnd(1, 4, 2, 8)
    with pytest.raises(TypeError, match="float64"):
        fattn.attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="4 dims"):
        fattn.attention(q[0], q, q)
    with pytest.raises(ValueError, match="causal"):
        fattn.attention(q, q, q, causal="diagonal")
    with pytest.raises(ValueError, match="prec"):
        fattn.attention(q, q, q, prec="fp8")
    with pytest.raises(ValueError, match="is on meta"):
        fattn.attention(q, q.to("meta"), q)
    # a bias that requires grad gets it on the CPU (tests/test_dbias.py; on CUDA with algo="exact")
    bias = rnd(4, 4, grad=True)
    fattn.attention(q, q, q, bias=bias).sum().backward()
    assert bias.grad is not None and bias.grad.shape == (4, 4)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_error_device_mix_cuda():
    q = rnd(1, 4, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="is on cpu but q is on cuda"):
        fattn.attention(q, q.cpu(), q)


def test_error_cpu_rejects_tensor_core_precision():
    q = rnd(1, 4, 2, 8)
    e = _expect_library_error(q, q, q, prec="tf32")
    assert e.status == 12  # FATTN_ERR_UNSUPPORTED: never a silent fallback to F32


# ------------------------------------------------------------------------------ torch.library / compile
def _op_args(device, algo):
    q = rnd(1, 9, 4, 16, device=device, grad=True)
    k = rnd(1, 11, 2, 16, device=device, grad=True)
    v = rnd(1, 11, 2, 16, device=device, grad=True)
    from fattn._attn import normalize
    return (q, k, v, None, None, None) + normalize(q, causal=True, algo=algo)


@pytest.mark.parametrize("algo", ["fused", "exact"])
def test_opcheck_fwd(algo):
    torch.library.opcheck(torch.ops.fattn.attn_fwd.default, _op_args("cpu", algo))


def test_opcheck_bwd():
    args = _op_args("cpu", "fused")
    q, k, v = (t.detach() for t in args[:3])
    o, lse, saved = torch.ops.fattn.attn_fwd(q, k, v, *args[3:])
    do = torch.randn_like(o)
    torch.library.opcheck(torch.ops.fattn.attn_bwd.default,
                          (do, q, k, v, o, lse, saved) + tuple(args[3:]))


@pytest.mark.parametrize("algo", ["fused", "exact"])
def test_torch_compile_matches_eager(algo):
    """fullgraph=True: the op and its backward trace through their fake kernels (exact's saved
    buffer has a data-dependent size there) with no graph break."""
    q, k, v = (rnd(2, 13, 2, 16, grad=True) for _ in range(3))

    def f(q, k, v):
        return (fattn.attention(q, k, v, causal=True, algo=algo) * 2).sum()

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    g_eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    g_comp = torch.autograd.grad(cf(q, k, v), (q, k, v))
    for a, b in zip(g_eager, g_comp):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------ query helpers
def test_resolve_prec_cpu():
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        assert fattn.resolve_prec(rnd(1, 4, 2, 8, dtype=dt)) == "f32"


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_resolve_prec_cuda():
    q32 = rnd(1, 4, 2, 64, device="cuda")
    major = torch.cuda.get_device_capability()[0]
    assert fattn.resolve_prec(q32) == ("tf32" if major >= 8 else "f32")
    assert fattn.resolve_prec(q32.bfloat16()) == "native"
    assert fattn.resolve_prec(q32, prec="f32") == "f32"


def test_memory_model_and_meta_tensors():
    def mem(algo, device="cpu", S=256):
        q = torch.empty(1, S, 4, 32, device=device)
        return fattn.memory(q, q, q, algo=algo, device="cpu")

    fused, exact = mem("fused"), mem("exact")
    assert mem("fused", "meta") == fused  # shape-only query
    for m in (fused, exact):
        assert m["bwd_peak_bytes"] >= m["inputs_bytes"] + m["grads_bytes"]
    # exact keeps [B, Hq, Sq, Skv] probabilities: at least 4 B * 4 heads * 256²
    assert exact["saved_bytes"] - fused["saved_bytes"] >= 4 * 4 * 256 * 256
    long = mem("fused", S=4096)
    assert long["saved_bytes"] < 20 * fused["saved_bytes"], "fused saved memory grows linearly"


def test_max_seqlen_fits_budget():
    budget = 64 << 20
    s = fattn.max_seqlen(budget, dtype=torch.float32, heads_q=4, head_dim=32, algo="fused")
    s_exact = fattn.max_seqlen(budget, dtype=torch.float32, heads_q=4, head_dim=32, algo="exact")
    assert s > s_exact > 0
    q = torch.empty(1, s, 4, 32, device="meta")
    assert fattn.memory(q, q, q, device="cpu")["bwd_peak_bytes"] <= budget


def test_lse_returned_without_gradient():
    q, k, v = (rnd(1, 6, 2, 8, grad=True) for _ in range(3))
    o, lse = fattn.attention(q, k, v, return_lse=True)
    ref_o, ref_lse = ref_attention(q.double(), k.double(), v.double())
    assert rel_rms(lse, ref_lse) < 1e-5 and not lse.requires_grad


# ------------------------------------------------------------------------------ CUDA specifics
def _cuda_case(dtype=torch.bfloat16):
    q = rnd(2, 97, 4, 64, dtype=dtype, device="cuda", grad=True)
    k = rnd(2, 97, 2, 64, dtype=dtype, device="cuda", grad=True)
    v = rnd(2, 97, 2, 64, dtype=dtype, device="cuda", grad=True)
    ok, why = fattn.supports(q, k, v, causal=True)
    if not ok:
        pytest.skip(f"CUDA backend: {why}")
    return q, k, v


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda_side_stream_matches_default_stream():
    """Calls go on torch.cuda.current_stream(): a side stream gets its own context and the
    same bits."""
    q, k, v = _cuda_case()
    do = torch.randn_like(q)
    o1 = fattn.attention(q, k, v, causal=True)
    g1 = torch.autograd.grad(o1, (q, k, v), do)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o2 = fattn.attention(q, k, v, causal=True)
        g2 = torch.autograd.grad(o2, (q, k, v), do)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for a, b in zip((o1,) + g1, (o2,) + g2):
        assert torch.equal(a, b)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda_varlen_max_seqlen_given_or_derived():
    q = rnd(1, 40, 2, 64, dtype=torch.bfloat16, device="cuda")
    cu = torch.tensor([0, 9, 31, 40], dtype=torch.int32, device="cuda")
    ok, why = fattn.supports(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=22,
                             max_seqlen_k=22)
    if not ok:
        pytest.skip(f"CUDA backend: {why}")
    a = fattn.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True)
    b = fattn.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True,
                        max_seqlen_q=22, max_seqlen_k=22)
    assert torch.equal(a, b)
    ref, _ = ref_attention(q.double(), q.double(), q.double(), causal=True,
                           cu_seqlens_q=cu.cpu(), cu_seqlens_k=cu.cpu())
    assert rel_rms(a, ref) < 1e-2


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda_peak_within_memory_model():
    """What torch's allocator sees one fwd+bwd allocate (o, lse, saved, dout, grads and the
    workspaces, all torch tensors) stays within fattn.memory()'s bwd peak minus the inputs
    (DESIGN §8: the model never under-predicts). 1 MiB slack for allocator rounding."""
    q, k, v = _cuda_case()
    info = fattn.memory(q, k, v, causal=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    o = fattn.attention(q, k, v, causal=True)
    torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
    torch.cuda.synchronize()
    used = torch.cuda.max_memory_allocated() - base
    assert 0 < used <= info["bwd_peak_bytes"] - info["inputs_bytes"] + (1 << 20), (used, info)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU case")
def test_cuda_request_without_gpu_is_an_error_not_a_cpu_fallback():
    q = torch.empty(1, 8, 2, 16, device="meta")
    with pytest.raises(RuntimeError):
        fattn.memory(q, q, q, device="cuda:0")
