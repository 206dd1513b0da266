"""test_path_ops.py — the PaTH torch ops as an op: torch.library.opcheck (schemas, fake kernels,
autograd registration), torch.compile with fullgraph, FLA's drop-in name, cu_seqlens as int64 on
the inputs' device, and on CUDA bitwise repeatability and the STRICT check's message."""
import pytest
import torch

import fattn.path as fp

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make(device, T=70, HQ=2, H=1, K=16, V=16, dtype=torch.float32, gate=True):
    torch.manual_seed(0)
    q = torch.randn(1, T, HQ, K, dtype=dtype, device=device)
    k = torch.randn(1, T, H, K, dtype=dtype, device=device)
    v = torch.randn(1, T, H, V, dtype=dtype, device=device)
    w = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=device), dim=-1)
    beta = torch.rand(1, T, H, device=device) * 2
    g = -torch.rand(1, T, HQ, device=device) * 0.05 if gate else None
    return q, k, v, w, beta, g


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q, k, v, w, beta, g = make(device)
    args = [t.requires_grad_(True) for t in (q, k, v, w, beta, g)]
    torch.library.opcheck(torch.ops.fattn.path_fwd.default, (*args, None, 0.0, 0, 0),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_varlen(device):
    # the forward's third output: cu_seqlens as the library reads it (int32, host), a tensor of
    # its own, which the backward reuses instead of copying a CUDA cu_seqlens again
    q, k, v, w, beta, g = make(device)
    args = [t.requires_grad_(True) for t in (q, k, v, w, beta, g)]
    cu = torch.tensor([0, 30, 70], dtype=torch.int32, device=device)
    torch.library.opcheck(torch.ops.fattn.path_fwd.default, (*args, cu, 0.0, 0, 0),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    o, lse, cu_host = torch.ops.fattn.path_fwd(*args, cu, 0.0, 0, 0)
    assert cu_host.device.type == "cpu" and cu_host.dtype == torch.int32 and cu_host.tolist() == [0, 30, 70]
    assert cu_host.data_ptr() != cu.data_ptr()
    # the backward with the host copy gives the gradients the CUDA / CPU tensor gives a fresh call
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, args, do)
    ref = [t.detach().clone().requires_grad_(True) for t in args]
    o2 = fp.path_attention(*ref, cu_seqlens=cu.to(torch.int64))
    for a, b in zip(grads, torch.autograd.grad(o2, ref, do)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gate", [False, True])
def test_eager_fast_path_matches_the_op(device, gate):
    # without the compiled module, plain eager tensors skip the dispatcher (_PathFn over the
    # backend kernels); the op with its registered autograd formula must give the same bits,
    # output and every gradient
    q, k, v, w, beta, g = make(device, gate=gate)
    ins = [t for t in (q, k, v, w, beta, g) if t is not None]
    fast = [t.clone().requires_grad_(True) for t in ins]
    op = [t.clone().requires_grad_(True) for t in ins]
    pad = lambda a: a + [None] * (6 - len(a))  # noqa: E731
    o1 = fp.path_attention(*pad(fast), scale=0.3)
    o2 = torch.ops.fattn.path_fwd(*pad(op), None, 0.3, 0, 0)[0]
    if fp._SHIM:  # the compiled module: the op itself, with its C++ autograd node
        assert o1.grad_fn.name() == o2.grad_fn.name() == "fattn::PathBackward"
    else:
        assert type(o1.grad_fn).__name__ == "_PathFnBackward"
        assert type(o2.grad_fn).__name__ != "_PathFnBackward"
    assert torch.equal(o1, o2)
    do = torch.randn_like(o1)
    for a, b in zip(torch.autograd.grad(o1, fast, do), torch.autograd.grad(o2, op, do)):
        assert torch.equal(a, b)
    # without grad: the kernel directly, the same output
    with torch.no_grad():
        assert torch.equal(fp.path_attention(*pad(fast), scale=0.3), o1)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    q, k, v, w, beta, g = make(device)

    def step(q, k, v, w, beta, g):
        return (fp.path_attention(q, k, v, w, beta, g) ** 2).sum()

    eager = [t.clone().requires_grad_(True) for t in (q, k, v, w, beta, g)]
    step(*eager).backward()
    comp = [t.clone().requires_grad_(True) for t in (q, k, v, w, beta, g)]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*comp).backward()
    for a, b in zip(eager, comp):
        assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_fla_name_and_int64_cu_seqlens(device):
    q, k, v, w, beta, g = make(device)
    cu = torch.tensor([0, 30, 70], dtype=torch.int64, device=device)
    o, cache = fp.parallel_path_attn(q, k, v, w, beta, g, None, cu)
    assert cache is None
    # sequences are independent: the second one alone gives the same rows
    o2 = fp.path_attention(*(t[:, 30:].contiguous() for t in (q, k, v, w, beta, g)))
    torch.testing.assert_close(o[:, 30:], o2, rtol=0, atol=0)
    with pytest.raises(NotImplementedError):
        fp.parallel_path_attn(q, k, v, w, beta, g, use_cache=True)


def test_path_memory_of_a_pack():
    q, k, v, w, beta, g = make("cpu", T=1300, K=16, V=16)
    cu = torch.tensor([0, 600, 1300])
    # sequences of 600 and 700 tokens: (600 - 512) + (700 - 512) token-snapshots x Hq x K x 4 bytes
    assert fp.path_memory(q, k, v, w, beta, g, cu_seqlens=cu)["history_packed_bytes"] == (88 + 188) * 2 * 16 * 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bitwise_and_strict_message():
    q, k, v, w, beta, g = make("cuda", T=1100, HQ=4, H=2, K=64, V=64, dtype=torch.bfloat16)
    outs = []
    for _ in range(2):
        ins = [t.clone().requires_grad_(True) for t in (q, k, v, w, beta, g)]
        o = fp.path_attention(*ins)
        o.float().pow(2).sum().backward()
        outs.append([o.detach()] + [t.grad for t in ins])
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    beta_bad = beta.clone()
    beta_bad[0, 17, 1] = 2.5
    with pytest.raises(Exception, match=r"beta: 2\.500000 at \(b 0, t 17, h 1\)"):
        fp.path_attention(q, k, v, w, beta_bad, g)


@pytest.mark.parametrize("device", DEVICES)
def test_host_paths_agree(device):
    # the compiled kernels (python/csrc/path_ops.cpp) and path.py's ctypes kernels in one process:
    # the same bits forward and backward, dense and varlen, and the same error text
    if not fp._SHIM:
        pytest.skip("the compiled module is not loaded (FATTN_TORCH_SHIM=0 or not built)")
    q, k, v, w, beta, g = make(device)
    for cu in (None, torch.tensor([0, 30, 70], dtype=torch.int64, device=device)):
        a = torch.ops.fattn.path_fwd(q, k, v, w, beta, g, cu, 0.0, 0, 0)
        b = fp._path_fwd(q, k, v, w, beta, g, cu, 0.0, 0, 0)
        for x, y in zip(a, b):
            assert x.device == y.device and torch.equal(x, y)
        do = torch.randn_like(a[0])
        cu_host = a[2] if a[2].numel() else None
        ga = torch.ops.fattn.path_bwd(do, q, k, v, w, beta, g, a[0], a[1], cu_host, 0.0, 0, 0)
        gb = fp._path_bwd(do, q, k, v, w, beta, g, b[0], b[1], cu_host, 0.0, 0, 0)
        for x, y in zip(ga, gb):
            assert torch.equal(x, y)
    bad = beta.clone()
    bad[0, 17, 0] = 2.5
    errs = []
    for call in (lambda: fp.path_attention(q, k, v, w, bad, g),
                 lambda: fp._path_fwd(q, k, v, w, bad, g, None, 0.0, 0, 0)):
        with pytest.raises(Exception) as e:
            call()
        errs.append((type(e.value).__name__, str(e.value)))
    assert errs[0] == errs[1] and "beta" in errs[0][1]
