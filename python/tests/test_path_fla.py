"""test_path_fla.py — fattn's PaTH attention (CPU, and CUDA when present) against FLA's own
naive_path_attn, and on CUDA also beside FLA's Triton kernels (parallel_path_attn).

FLA (pip package fla-core) is used only as an independent oracle; nothing is copied from it.
Comparison as FLA's assert_close: err_ratio = rms(ref - out) / rms(ref), per output, with FLA's
per-gradient bars for bf16/f16 (PATH.md §7.2); float32 is tight on the CPU (f32 arithmetic) and
the TF32 bar (5e-3) on CUDA. Cases mirror FLA's test matrix, shortened for a CPU reference: dense
(GQA, gate on/off, K 64/128), varlen with pieces shorter than a chunk and than a segment, plus MHA
and V != K (which FLA's own tests never run).
"""
import pytest
import torch

# FLA's naive PaTH is the independent oracle of this file: a hard import, so a broken install
# fails CI instead of skipping it silently (.ci/run installs fla-core).
import fla.ops.path_attn.naive as fla_naive  # noqa: E402
from fattn.path import path_attention  # noqa: E402


def err_ratio(ref, out):
    ref, out = ref.double(), out.double()
    return ((ref - out).pow(2).mean().sqrt() / (ref.pow(2).mean().sqrt() + 1e-8)).item()


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def inputs(B, T, H, HQ, K, V, dtype, gate, beta_range=(1.5, 2.0), device="cpu"):
    torch.manual_seed(42)
    q = torch.randn(B, T, HQ, K).to(dtype)
    k = torch.randn(B, T, H, K).to(dtype)
    v = torch.randn(B, T, H, V).to(dtype)
    w = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    beta = torch.empty(B, T, H).uniform_(*beta_range)
    g = torch.empty(B, T, HQ).uniform_(0.95, 1.0).log() if gate else None
    do = torch.rand(B, T, HQ, V).to(dtype)
    return tuple(None if t is None else t.to(device) for t in (q, k, v, w, beta, g, do))


def leaves(ts):
    return [None if t is None else t.clone().requires_grad_(True) for t in ts]


def reference(q, k, v, w, beta, g, do, cu):
    """FLA's naive, per sequence when cu_seqlens is given; returns o and the gradients."""
    scale = q.shape[-1] ** -0.5
    gz = g if g is not None else torch.zeros(q.shape[:3], dtype=torch.float32, device=q.device)
    if cu is None:
        pieces = [(slice(None),)]
    else:
        pieces = [(slice(None), slice(int(cu[i]), int(cu[i + 1]))) for i in range(len(cu) - 1)]
    ins = leaves([q, k, v, w, beta, gz])
    outs = []
    for sl in pieces:
        a = [t[sl] for t in ins]
        outs.append(fla_naive.naive_path_attn(*a, scale=scale))
    o = torch.cat(outs, dim=1)
    (o.float() * do.float()).sum().backward()
    grads = [t.grad for t in ins]
    return o.detach(), grads[:5] + ([grads[5]] if g is not None else [])


def ours(q, k, v, w, beta, g, do, cu):
    ins = leaves([q, k, v, w, beta, g])
    # FLA users hand cu_seqlens as an int32/int64 tensor on the inputs' device
    o = path_attention(*ins, cu_seqlens=None if cu is None else torch.tensor(cu, dtype=torch.int64, device=q.device))
    (o.float() * do.float()).sum().backward()
    return o.detach(), [t.grad for t in ins if t is not None]


NAMES = ["dq", "dk", "dv", "dw", "dbeta", "dg"]
TOL = {  # o, dq, dk, dv, dw, dbeta, dg
    torch.bfloat16: [0.005, 0.008, 0.008, 0.008, 0.015, 0.02, 0.02],   # FLA test_parallel
    torch.float16: [0.005] * 7,                                         # FLA test_parallel_varlen
    torch.float32: [1e-4] * 7,
}


def compare(ref, out, dtype):
    (ro, rg), (oo, og) = ref, out
    tol = TOL[dtype] if dtype != torch.float32 or ro.device.type == "cpu" else [5e-3] * 7  # TF32 on CUDA
    assert err_ratio(ro, oo) < tol[0], f"o err_ratio {err_ratio(ro, oo):.2e}"
    for i, (r, x) in enumerate(zip(rg, og)):
        assert r.abs().max() > 0, f"{NAMES[i]}: reference gradient is zero"
        e = err_ratio(r.float(), x.float())
        assert e < tol[i + 1], f"{NAMES[i]} err_ratio {e:.2e} (bar {tol[i + 1]})"


@pytest.mark.parametrize("B,T,H,HQ,K,V,gate,dtype", [
    (2, 300, 2, 4, 64, 64, True, torch.bfloat16),
    (1, 700, 1, 2, 128, 128, False, torch.bfloat16),
    (1, 600, 2, 2, 32, 64, True, torch.float32),     # MHA, V != K
    (1, 530, 1, 2, 64, 64, True, torch.float16),
    (1, 600, 1, 2, 48, 80, True, torch.bfloat16),    # head dims between the kernels' sizes
])
@pytest.mark.parametrize("device", DEVICES)
def test_dense(B, T, H, HQ, K, V, gate, dtype, device):
    args = inputs(B, T, H, HQ, K, V, dtype, gate, device=device)
    compare(reference(*args, None), ours(*args, None), dtype)


@pytest.mark.parametrize("H,HQ,K,gate,cu", [
    (2, 4, 64, False, [0, 15, 333, 900]),
    (2, 4, 64, True, [0, 500, 541, 1100]),
    (1, 2, 128, True, [0, 48, 600]),
])
@pytest.mark.parametrize("device", DEVICES)
def test_varlen(H, HQ, K, gate, cu, device):
    args = inputs(1, cu[-1], H, HQ, K, K, torch.float16, gate, beta_range=(0.5, 0.73), device=device)
    compare(reference(*args, cu), ours(*args, cu), torch.float16)


def _fla_parallel():
    try:
        from fla.ops.path_attn.parallel import parallel_path_attn
        return parallel_path_attn
    except Exception:  # FLA's Triton kernels need triton and a GPU
        return None


# Two of FLA's own test_parallel shapes (dense bf16, GQA, gate on/off; each costs FLA's Triton autotuning): fattn and FLA's Triton kernels are both
# held to FLA's bars against the naive reference, on the same inputs.
@pytest.mark.skipif(not torch.cuda.is_available() or _fla_parallel() is None, reason="needs CUDA and FLA's Triton kernels")
@pytest.mark.parametrize("B,T,H,HQ,D,gate", [(3, 1024, 2, 8, 64, True), (1, 4000, 1, 2, 128, False)])
def test_beside_fla_triton(B, T, H, HQ, D, gate):
    args = inputs(B, T, H, HQ, D, D, torch.bfloat16, gate, device="cuda")
    ref = reference(*args, None)
    compare(ref, ours(*args, None), torch.bfloat16)
    q, k, v, w, beta, g, do = args
    ins = leaves([q, k, v, w, beta, g])
    o, _ = _fla_parallel()(*ins, scale=D ** -0.5)
    (o.float() * do.float()).sum().backward()
    compare(ref, (o.detach(), [t.grad for t in ins if t is not None]), torch.bfloat16)
