"""test_habits.py — fattn.attention where users' habits from SDPA / FlashAttention meet it:
empty sequences (S = 0) forward and backward, int64 cu_seqlens, autocast (SDPA's rule),
size-1 bias dims (a key-padding mask [B, 1, 1, Skv]), scale 0, the [B, H, S, D] hint on a
rejected call, torch.compile under autocast, and CUDA-graph capture of fwd + bwd (GPU only).

Run: cd python && pytest -q tests/test_habits.py
"""
import pytest
import torch
import torch.nn.functional as F

import fattn
from conftest import DEVICES, HAS_CUDA
from reference import ref_attention, rel_rms


def rnd(*shape, dtype=torch.float32, device="cpu", grad=False):
    return torch.randn(*shape, device=device).to(dtype).requires_grad_(grad)


# ------------------------------------------------------------------------------ S = 0
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ["fused", "exact"])
@pytest.mark.parametrize("sq,skv", [(0, 0), (0, 7), (7, 0)])
def test_empty_sequences_forward_and_backward(sq, skv, algo, device):
    """.sum() hands back an expanded gradient (stride 0 everywhere); for an empty tensor
    .contiguous() keeps it, which the library refused ("dout: nb[3] is 0")."""
    D = 64 if device == "cuda" else 16
    q = rnd(2, sq, 2, D, device=device, grad=True)
    k = rnd(2, skv, 2, D, device=device, grad=True)
    v = rnd(2, skv, 2, D, device=device, grad=True)
    o, lse = fattn.attention(q, k, v, causal=True, algo=algo, return_lse=True)
    assert o.shape == (2, sq, 2, D) and lse.shape == (2, 2, sq)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    if sq and not skv:  # rows with no key: o = 0, lse = -inf, dq = 0
        assert torch.equal(o, torch.zeros_like(o)) and bool((lse == float("-inf")).all())
        assert torch.equal(q.grad, torch.zeros_like(q.grad))


def test_empty_sequence_through_sdpa():
    q = rnd(1, 2, 0, 8, grad=True)
    o = fattn.sdpa(q, q, q, is_causal=True)
    o.sum().backward()
    assert o.shape == (1, 2, 0, 8) and q.grad.shape == q.shape


# ------------------------------------------------------------------------------ cu_seqlens
def test_int64_cu_seqlens_equal_int32():
    q, k, v = (rnd(1, 16, 2, 8, grad=True) for _ in range(3))
    cu32 = torch.tensor([0, 5, 16], dtype=torch.int32)
    a = fattn.attention(q, k, v, cu_seqlens_q=cu32, cu_seqlens_k=cu32, causal=True)
    cu64 = torch.tensor([0, 5, 16])                   # what torch.cumsum gives
    b = fattn.attention(q, k, v, cu_seqlens_q=cu64, cu_seqlens_k=cu64, causal=True)
    assert torch.equal(a, b)
    ga = torch.autograd.grad(a.sum(), (q, k, v))
    gb = torch.autograd.grad(b.sum(), (q, k, v))
    assert all(torch.equal(x, y) for x, y in zip(ga, gb))
    ok, why = fattn.supports(q, k, v, cu_seqlens_q=cu64, cu_seqlens_k=cu64)
    assert ok, why


def test_cu_seqlens_outside_int32_are_rejected_not_wrapped():
    """2^32 + 5 would wrap to 5 (a valid-looking bound) in a plain int32 cast."""
    q = rnd(1, 16, 2, 8)
    cu = torch.tensor([0, 2**32 + 5, 16])
    with pytest.raises(fattn.FattnError, match="cu_seqlens_q"):
        fattn.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=torch.tensor([0, 5, 16]))
    with pytest.raises(TypeError, match="int32"):
        fattn.attention(q, q, q, cu_seqlens_q=cu.float(), cu_seqlens_k=cu.float())
    with pytest.raises(ValueError, match="1-d"):
        fattn.attention(q, q, q, cu_seqlens_q=cu.view(1, 3), cu_seqlens_k=cu.view(1, 3))


# ------------------------------------------------------------------------------ autocast
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_autocast_follows_sdpa(device, dt):
    """Under autocast(dt) SDPA runs f32 inputs in dt and returns dt; so does fattn, with the
    bits of the same call on inputs cast by hand, and gradients back in the leaves' f32."""
    D = 64 if device == "cuda" else 16
    q, k, v = (rnd(1, 19, 2, D, device=device, grad=True) for _ in range(3))
    with torch.autocast(device, dtype=dt):
        o = fattn.attention(q, k, v, causal=True)
        want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2)).dtype
        mixed = fattn.attention(q.to(dt), k, v, causal=True)     # mixed inputs are cast too
        s = fattn.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    assert o.dtype == want == dt and s.dtype == dt and mixed.dtype == dt
    by_hand = fattn.attention(q.to(dt), k.to(dt), v.to(dt), causal=True)
    assert torch.equal(o, by_hand) and torch.equal(mixed, by_hand)
    assert torch.equal(s.transpose(1, 2), by_hand)
    o.float().sum().backward()
    assert q.grad.dtype == torch.float32 and q.grad.abs().max() > 0
    outside = fattn.attention(q, k, v)                           # no region: f32 stays f32
    assert outside.dtype == torch.float32


def test_autocast_under_torch_compile():
    q, k, v = (rnd(2, 13, 2, 16, grad=True) for _ in range(3))

    def f(q, k, v):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fattn.attention(q, k, v, causal=True)

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    a, b = f(q, k, v), cf(q, k, v)
    assert a.dtype == b.dtype == torch.bfloat16 and torch.equal(a, b)
    ga = torch.autograd.grad(a.float().sum(), (q, k, v))
    gb = torch.autograd.grad(b.float().sum(), (q, k, v))
    assert all(torch.equal(x, y) for x, y in zip(ga, gb))


# ------------------------------------------------------------------------------ bias, scale, layout
def test_size_one_bias_dims_broadcast():
    """A key-padding mask [B, 1, 1, Skv] (what Hugging Face builds) broadcasts over heads and
    query rows like a stride-0 one; the library alone takes stride 0 only."""
    q, k, v = rnd(2, 9, 2, 16), rnd(2, 11, 2, 16), rnd(2, 11, 2, 16)
    pad = torch.zeros(2, 1, 1, 11)
    pad[1, ..., 7:] = float("-inf")
    o = fattn.attention(q, k, v, bias=pad)
    ref, _ = ref_attention(q.double(), k.double(), v.double(), bias=pad.double())
    assert rel_rms(o, ref) < 1e-5
    assert torch.equal(o, fattn.attention(q, k, v, bias=pad.expand(2, 2, 9, 11)))


def test_scale_zero_is_uniform_not_default():
    q, k, v = rnd(1, 6, 1, 8), rnd(1, 6, 1, 8), rnd(1, 6, 1, 8)
    o = fattn.attention(q, k, v, scale=0.0)
    assert torch.allclose(o, v.mean(dim=1, keepdim=True).expand_as(o), atol=1e-6)
    assert not torch.allclose(o, fattn.attention(q, k, v))


def test_bhsd_tensors_get_a_layout_hint_when_rejected():
    """SDPA-layout q [B, H=4, Sq=10, D], k [B, 4, Skv=7, D] read as [B, S, H, D] have 10 query
    heads over 7 kv heads: the library rejects them (GQA heads) and the message now says the
    shapes fit [B, H, S, D] and names fattn.sdpa; the status stays the library's."""
    q, k = rnd(1, 4, 10, 8), rnd(1, 4, 7, 8)
    with pytest.raises(fattn.FattnError) as e:
        fattn.attention(q, k, k)
    assert e.value.status == 4 and "[B, H, S, D]" in str(e.value) and "fattn.sdpa" in str(e.value)
    # an SDPA mask [Sq, Skv] with SDPA-layout tensors
    q = rnd(1, 4, 10, 8)
    with pytest.raises(fattn.FattnError, match="fattn.sdpa"):
        fattn.attention(q, q, q, bias=torch.zeros(10, 10))
    # a genuine [B, S, H, D] mistake whose transpose does not fit either: no hint
    with pytest.raises(fattn.FattnError) as e:
        fattn.attention(rnd(1, 4, 3, 8), rnd(1, 5, 2, 8), rnd(1, 5, 2, 8))
    assert "[B, H, S, D]" not in str(e.value)


# ------------------------------------------------------------------------------ CUDA graphs
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_cuda_graph_capture_fwd_bwd(dtype):
    """fwd + bwd captured in one CUDA graph and replayed on new data gives the eager bits.
    Warm-up runs on the capture stream first, so the per-(thread, stream) contexts of the
    forward and of autograd's device thread exist before capture (nothing is created in it)."""
    q, k, v = (rnd(2, 97, 4, 64, dtype=dtype, device="cuda", grad=True) for _ in range(3))
    do = rnd(2, 97, 4, 64, dtype=dtype, device="cuda")
    ok, why = fattn.supports(q, k, v, causal=True)
    if not ok:
        pytest.skip(f"CUDA backend: {why}")

    def step():
        o = fattn.attention(q, k, v, causal=True)
        return (o,) + torch.autograd.grad(o, (q, k, v), do)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        static = step()
    for _ in range(2):
        with torch.no_grad():
            for t in (q, k, v, do):
                t.copy_(torch.randn_like(t))
        g.replay()
        torch.cuda.synchronize()
        eager = step()
        for a, b in zip(static, eager):
            assert torch.equal(a, b)


# ------------------------------------------------------------------------------ host path (issue 12)
class _Counter:
    """Counts the C API calls the ops make, by wrapping the loaded library's functions."""

    NAMES = ("fattn_attn_fwd", "fattn_attn_bwd", "fattn_attn_saved_size",
             "fattn_attn_workspace_size")

    def __init__(self, monkeypatch):
        from fattn import _lib
        self.calls = []
        L = _lib.lib()
        for n in self.NAMES:
            fn = getattr(L, n)
            monkeypatch.setattr(L, n, self._wrap(n, fn), raising=False)

    def _wrap(self, name, fn):
        def call(*args):
            self.calls.append(name)
            return fn(*args)
        return call

    def take(self):
        out, self.calls = self.calls, []
        return out


@pytest.mark.skipif(fattn.host_path().startswith("compiled"),
                    reason="the ctypes kernels' plan cache (CI runs this file with FATTN_TORCH_SHIM=0)")
def test_repeated_call_makes_one_library_call_per_direction(monkeypatch):
    """The plan cache: the first call of a shape asks the size queries (which validate); a
    repeat makes only fattn_attn_fwd / _bwd; new data (q, bias values) is read, not the
    cached pointers; other strides or a varlen call get their own sizes."""
    count = _Counter(monkeypatch)
    q, k, v = (rnd(1, 13, 2, 16, grad=True) for _ in range(3))
    bias = torch.randn(13, 13)

    def run(q, bias):
        o = fattn.attention(q, k, v, bias=bias, causal=True)
        return (o,) + torch.autograd.grad(o, (q, k, v), torch.ones_like(o))

    run(q, bias)
    first = count.take()
    assert "fattn_attn_saved_size" in first and first.count("fattn_attn_workspace_size") == 2
    q2, bias2 = rnd(1, 13, 2, 16, grad=True), torch.randn(13, 13)
    got = run(q2, bias2)
    assert count.take() == ["fattn_attn_fwd", "fattn_attn_bwd"]
    o_ref, lse = ref_attention(q2.double(), k.double(), v.double(), bias=bias2.double(),
                               causal=True)
    assert rel_rms(got[0], o_ref) < 1e-5
    fresh = run(q2.detach().clone().requires_grad_(), bias2.clone())  # other pointers, same plan
    assert all(torch.equal(a, b) for a, b in zip(got, fresh))
    count.take()
    qt = rnd(1, 2, 13, 16).transpose(1, 2).requires_grad_()      # other strides: a new plan
    run(qt, bias)
    assert "fattn_attn_saved_size" in count.take()
    cu = torch.tensor([0, 6, 13], dtype=torch.int32)
    for _ in range(2):                                              # varlen: never cached
        fattn.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu)
        assert "fattn_attn_saved_size" in count.take()


def test_bench_host_runs(tmp_path):
    import json
    import os
    import subprocess
    import sys
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = tmp_path / "host.json"
    r = subprocess.run([sys.executable, "bench/bench_host.py", "--device", "cpu", "--shape",
                        "B1 S8 H1 D16", "--calls", "5", "--reps", "1", "--json", str(out)],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    arms = {x["arm"] for x in json.load(open(out))["results"]}
    assert {"fattn", "fattn-fa2", "fattn-sdpa", "sdpa"} <= arms


def test_eager_shortcut_equals_the_dispatcher_path():
    """attention() calls its kernels directly for plain eager tensors (_ops.eager_plain); under
    a dispatch mode the op goes through the dispatcher and is seen. Same bits either way."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = (rnd(2, 11, 2, 16, grad=True) for _ in range(3))
    do = rnd(2, 11, 2, 16)
    o = fattn.attention(q, k, v, causal=True)
    g = torch.autograd.grad(o, (q, k, v), do)
    mode = Seen()
    with mode:
        o2 = fattn.attention(q, k, v, causal=True)
        g2 = torch.autograd.grad(o2, (q, k, v), do)
    assert "fattn.attn_fwd.default" in mode.ops and "fattn.attn_bwd.default" in mode.ops
    assert torch.equal(o, o2) and all(torch.equal(a, b) for a, b in zip(g, g2))
