"""test_host_path.py — the two host paths of the torch ops (issue 12): the compiled kernels of
python/csrc/torch_ops.cpp and the ctypes kernels of fattn/_ops.py must be the same function.

- fattn.host_path() names the one in use; with FATTN_EXPECT_SHIM=1 in the environment (CI
  installs with --no-build-isolation) it must be the compiled one, so a build that silently
  lost the shim fails here.
- Outputs and gradients of a set of calls are bitwise equal between this process and a child
  process forced onto the other path (FATTN_TORCH_SHIM=0 or the default), errors carry the same
  status and text, and the backward node is the compiled one's when compiled.

Run: cd python && pytest -q tests/test_host_path.py
"""
import os
import pickle
import subprocess
import sys

import pytest
import torch

import fattn

COMPILED = fattn.host_path().startswith("compiled")

# The calls both paths make: (name, kwargs for fattn.attention, shapes q/k/v, dtype).
CASES = [
    ("plain", dict(), (2, 9, 4, 16), (2, 9, 2, 16), torch.float32),
    ("causal_br_cross", dict(causal=True), (1, 5, 2, 8), (1, 11, 2, 8), torch.float32),
    ("window_bf16", dict(window=(3, 1)), (1, 33, 2, 32), (1, 33, 1, 32), torch.bfloat16),
    ("bias_exact", dict(algo="exact", bias="dense"), (1, 7, 2, 16), (1, 6, 2, 16), torch.float32),
    ("big_ws", dict(causal="top_left"), (1, 1400, 4, 64), (1, 1400, 4, 64), torch.float32),  # > 2^20 elements: a workspace
]


def run_cases():
    """Outputs, gradients and one error of every case, as bytes (bitwise comparison)."""
    out = {}
    for seed, (name, kw, sq, skv, dt) in enumerate(CASES):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(*sq, generator=g).to(dt).requires_grad_()
        k = torch.randn(*skv, generator=g).to(dt).requires_grad_()
        v = torch.randn(*skv, generator=g).to(dt).requires_grad_()
        kw = dict(kw)
        if kw.get("bias") == "dense":
            kw["bias"] = torch.randn(sq[0], sq[2], sq[1], skv[1], generator=g)
        o, lse = fattn.attention(q, k, v, return_lse=True, **kw)
        do = torch.randn(o.shape, generator=g).to(dt)
        grads = torch.autograd.grad(o, (q, k, v), do)
        out[name] = [t.detach().contiguous().view(torch.uint8).numpy().tobytes()
                     for t in (o, lse) + grads]
        out[name + "/node"] = o.grad_fn.name()
    try:
        fattn.attention(torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8).half(), torch.randn(1, 4, 2, 8))
    except fattn.FattnError as e:
        out["error"] = (e.status, str(e))
    return out


def test_host_path_is_named_and_expected():
    path = fattn.host_path()
    assert path.startswith("compiled (") or path.startswith("ctypes ("), path
    if os.environ.get("FATTN_EXPECT_SHIM") == "1":
        assert COMPILED, f"FATTN_EXPECT_SHIM=1 but the ops run through {path}"


def test_both_paths_bitwise_equal():
    here = run_cases()
    env = dict(os.environ)
    if COMPILED:
        env["FATTN_TORCH_SHIM"] = "0"
    else:
        env.pop("FATTN_TORCH_SHIM", None)
    child = subprocess.run(
        [sys.executable, "-c",
         "import pickle, sys; sys.path.insert(0, %r); import test_host_path as t; "
         "sys.stdout.buffer.write(pickle.dumps((t.fattn.host_path(), t.run_cases())))"
         % os.path.dirname(os.path.abspath(__file__))],
        env=env, capture_output=True, check=True)
    other_path, there = pickle.loads(child.stdout)
    if not COMPILED and not other_path.startswith("compiled"):
        pytest.skip(f"no compiled ops in this install ({fattn.host_path()})")
    assert other_path.startswith("ctypes") == COMPILED, (fattn.host_path(), other_path)
    for name, _, _, _, _ in CASES:
        for i, (a, b) in enumerate(zip(here[name], there[name])):
            assert a == b, f"{name}: output {i} differs between the host paths"
    compiled_nodes = here if COMPILED else there
    assert compiled_nodes["plain/node"] == "fattn::AttnBackward"
    assert here["error"] == there["error"]
    assert here["error"][0] == 2 and "dtype" in here["error"][1]


@pytest.mark.skipif(not COMPILED, reason="the compiled kernels' own argument check")
def test_compiled_op_refuses_int64_cu_seqlens():
    """fattn.attention converts int64 cu_seqlens; a direct op call must not have its int64
    offsets read as int32 pairs (they would be misread silently): a named TypeError."""
    q = torch.randn(1, 6, 1, 8)
    cu = torch.tensor([0, 6], dtype=torch.int64)
    with pytest.raises(TypeError, match="cu_seqlens_q must be a contiguous int32"):
        torch.ops.fattn.attn_fwd(q, q, q, None, cu, cu, 0, -1, -1, 0, 0.0, 6, 6, 0, 0)


@pytest.mark.skipif(not COMPILED, reason="how the compiled ops are loaded")
def test_compiled_ops_share_the_process_cpp_runtime():
    """The shim's copies of libstdc++ template members must bind to the process's one C++
    runtime: under GCC 13 they bound to themselves (torch keeps libstdc++ in a local scope) and
    the first error message, formatted through std::ostream, segfaulted (GPU machine). _ops.py
    puts libstdc++ in the global scope before it loads the shim; this checks that it is there
    (it is not after `import torch` alone), and that an error message comes back through the
    compiled kernels. The first assertion fails on the code before the fix with any compiler;
    the crash itself needs GCC 13 (test_error_dtype_mix there)."""
    import ctypes
    try:
        ctypes.CDLL("libstdc++.so.6")
    except OSError:
        pytest.skip("no GNU C++ runtime in this process")
    glob = ctypes.CDLL(None)
    assert hasattr(glob, "_ZNSt6locale7classicEv"), "libstdc++ is not in the global symbol scope"
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(fattn.FattnError, match="dtype"):
        fattn.attention(q, q.half(), q)


def test_cpu_results_do_not_depend_on_torch_threads():
    """The compiled CPU kernels run fattn's loops on torch's intra-op threads (torch_runner in
    torch_ops.cpp), the ctypes ones on fattn's pool sized by torch.get_num_threads(): either
    way the bits must not change with the thread count (1, 2, 3), nor after other torch ops
    have used the same threads."""
    saved = torch.get_num_threads()
    try:
        results = []
        for nt in (1, 2, 3):
            torch.set_num_threads(nt)
            torch.mm(torch.ones(256, 256), torch.ones(256, 256))  # torch's team just ran
            results.append(run_cases())
    finally:
        torch.set_num_threads(saved)
    for name, _, _, _, _ in CASES:
        for r in results[1:]:
            assert r[name] == results[0][name], f"{name}: differs between torch thread counts"
