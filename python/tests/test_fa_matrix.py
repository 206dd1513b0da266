"""test_fa_matrix.py — FlashAttention-2's output test matrix on fattn.flash_attn_func.

FlashAttention judges its kernels (tests/test_flash_attn.py, test_flash_attn_output) by their error
against a float32 computation of the same inputs, relative to the error of a plain PyTorch
implementation run in the inputs' dtype: max|out - ref| <= 2 * max|out_pt - ref| for the output and
3 * for dq, dk, dv (a 1e-5 floor here, for rows where the plain implementation is exact: a row
that sees no key). Its matrix, which this file reproduces:
  dtype fp16 / bf16; MHA, MQA, GQA (9 query heads; 9, 1, 3 kv heads); batch 4;
  no mask, causal, a random local window, both (bottom-right aligned, FA2's semantics);
  head dims 32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256;
  (seqlen_q, seqlen_k) in (113, 203), (128, 217), (113, 211), (108, 256), (256, 512),
  (512, 256), (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048).
The references are reference.ref_attention (float32, and the inputs' dtype).

Which cases run:
  cuda: every 23rd case of the matrix in its fixed order (115 of 2640, every head dim, dtype,
        mask and head layout among them); FATTN_FA_MATRIX=1 runs all 2640 (a few minutes on an
        H200: `FATTN_FA_MATRIX=1 python3 -m pytest -q python/tests/test_fa_matrix.py -k cuda`).
  cpu:  a fixed subset at the short lengths (CI): head dims 59, 160, 256, GQA, both dtypes.

Run: cd python && pytest -q tests/test_fa_matrix.py
"""
import itertools
import os

import pytest
import torch

import fattn
from conftest import HAS_CUDA
from reference import ref_attention

SEQLENS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
           (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)]
HEAD_DIMS = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
KV_HEADS = {"mha": 9, "mqa": 1, "gqa": 3}
MASKS = ["none", "causal", "local", "causal_local"]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BATCH, HEADS = 4, 9

MATRIX = list(itertools.product(DTYPES, KV_HEADS, MASKS, HEAD_DIMS, SEQLENS))
FULL = os.environ.get("FATTN_FA_MATRIX") == "1"


def case_id(c):
    dt, layout, mask, d, (sq, sk) = c
    return f"{dt}-{layout}-{mask}-d{d}-{sq}x{sk}"


CUDA_CASES = MATRIX if FULL else MATRIX[::23]
CPU_CASES = [c for c in MATRIX
             if c[1] == "gqa" and c[3] in (59, 160, 256) and c[4] in ((113, 203), (108, 256))
             and c[2] in ("causal", "local") and (c[0] == "bf16" or c[3] == 160)]


def run_case(device, case):
    dt, layout, mask, d, (sq, sk) = case
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(MATRIX.index(case))
    hk = KV_HEADS[layout]

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype).requires_grad_()

    q, k, v = rnd(BATCH, sq, HEADS, d), rnd(BATCH, sk, hk, d), rnd(BATCH, sk, hk, d)
    causal = mask in ("causal", "causal_local")
    window = tuple(torch.randint(0, sk, (2,), generator=g).tolist()) if "local" in mask else (-1, -1)
    dout = torch.randn(BATCH, sq, HEADS, d, generator=g).to(device=device, dtype=dtype)

    out = fattn.flash_attn_func(q, k, v, causal=causal, window_size=window)
    grads = torch.autograd.grad(out, (q, k, v), dout)

    def reference(upcast):
        x = [t.detach().float() if upcast else t.detach() for t in (q, k, v)]
        for t in x:
            t.requires_grad_()
        o, _ = ref_attention(*x, causal=causal, window=window if "local" in mask else None)
        gr = torch.autograd.grad(o, x, dout.float() if upcast else dout)
        return o, gr

    o_ref, g_ref = reference(True)
    o_pt, g_pt = reference(False)

    def err(a, b):
        return (a.float() - b.float()).abs().max().item()

    fails = []
    for name, got, pt, ref, factor in [("out", out, o_pt, o_ref, 2)] + [
            (n, a, b, c, 3) for n, a, b, c in zip(("dq", "dk", "dv"), grads, g_pt, g_ref)]:
        e, e_pt = err(got, ref), err(pt, ref)
        if not e <= factor * e_pt + 1e-5:
            fails.append(f"{name}: max error {e:.3e} > {factor} x {e_pt:.3e} (PyTorch in {dt})")
    assert not fails, f"{case_id(case)}: " + "; ".join(fails)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
@pytest.mark.parametrize("case", CUDA_CASES, ids=[case_id(c) for c in CUDA_CASES])
def test_fa2_matrix_cuda(case):
    run_case("cuda", case)


@pytest.mark.parametrize("case", CPU_CASES, ids=[case_id(c) for c in CPU_CASES])
def test_fa2_matrix_cpu(case):
    run_case("cpu", case)


def test_matrix_is_fa2s():
    """The matrix's size and the sample's coverage: every head dim, dtype, mask and head layout."""
    assert len(MATRIX) == 2 * 3 * 4 * 11 * 10
    sample = MATRIX[::23]
    for axis, values in enumerate([DTYPES, KV_HEADS, MASKS, HEAD_DIMS]):
        assert {c[axis] for c in sample} == set(values)
    assert len(CPU_CASES) >= 8
