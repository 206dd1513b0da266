#!/usr/bin/env python3
"""bench_host.py — host time per call of the PyTorch path: fattn vs SDPA at tiny shapes.

At shapes whose kernels take a few microseconds, the time per call is what Python, the torch
dispatcher, autograd and (for fattn) ctypes cost on the host. This measures it per arm, fwd
(inputs requiring grad, so the autograd graph is built as in training) and fwd+bwd
(torch.autograd.grad), on any device, arms interleaved rep by rep (one process, same inputs):

  fattn          fattn.attention (causal bottom-right; = top-left at Sq = Skv)
  fattn-fa2      fattn.flash_attn_func (the FA2-signature wrapper)
  fattn-sdpa     fattn.sdpa on [B, H, S, D] views
  sdpa           F.scaled_dot_product_attention, torch's own choice of backend
  sdpa-flash, sdpa-cudnn, sdpa-efficient   (CUDA) that backend forced, where it runs

Per arm: "host" = wall time from the first call to the return of the last, divided by the
number of calls (on CUDA the launches are asynchronous: this is the host's cost as long as the
GPU keeps up, which tiny shapes guarantee); "cpu" = the process's CPU time over the same calls
(steadier than wall time on a shared machine; on the CPU it includes the kernels' threads);
"sync" = wall time with a synchronize at the end.
Median over --reps. --profile prints cProfile's top functions for one fattn fwd+bwd loop.

  python3 bench/bench_host.py                          # CUDA if present: the issue-12 shapes, bf16
  python3 bench/bench_host.py --device cpu             # CPU: B1 S8 H1 D16 f32 (and the others)
  python3 bench/bench_host.py --device cpu --calls 200 --reps 3 --json out/host.json
"""
import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    import fattn
except ImportError:  # running from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import fattn

SHAPES = {  # name -> (B, S, H, D); the first two are issue 12's table
    "B1 S128 H4 D64": (1, 128, 4, 64),
    "B2 S512 H8 D128": (2, 512, 8, 128),
    "B1 S8 H1 D16": (1, 8, 1, 16),
}
FORCED = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
          "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}


def arms(device):
    """name -> fn(q, k, v) with q/k/v in [B, S, H, D] and their [B, H, S, D] views."""
    def sdpa_forced(backend):
        def f(x):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*x["bhsd"], is_causal=True)
        return f

    out = {
        "fattn": lambda x: fattn.attention(*x["bshd"], causal=True),
        "fattn-fa2": lambda x: fattn.flash_attn_func(*x["bshd"], causal=True),
        "fattn-sdpa": lambda x: fattn.sdpa(*x["bhsd"], is_causal=True),
        "sdpa": lambda x: F.scaled_dot_product_attention(*x["bhsd"], is_causal=True),
    }
    if device == "cuda":
        out.update({n: sdpa_forced(b) for n, b in FORCED.items()})
    return out


def inputs(shape, dtype, device):
    B, S, H, D = shape
    q, k, v = (torch.randn(B, S, H, D, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, S, H, D, device=device, dtype=dtype)
    return dict(bshd=(q, k, v), bhsd=tuple(t.transpose(1, 2) for t in (q, k, v)), do=do,
                leaves=(q, k, v))


def step(fn, x, bwd):
    o = fn(x)
    if bwd:
        do = x["do"] if o.shape == x["do"].shape else x["do"].transpose(1, 2)
        torch.autograd.grad(o, x["leaves"], do)
    return o


def time_calls(fn, x, bwd, calls, device):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        step(fn, x, bwd)
    t1, c1 = time.perf_counter(), time.process_time()
    sync()
    t2 = time.perf_counter()
    return tuple(d / calls * 1e6 for d in (t1 - t0, c1 - c0, t2 - t0))


def usable(fn, x):
    try:
        step(fn, x, True)
        return None
    except Exception as e:  # an SDPA backend that refuses the case, an unsupported fattn case
        return f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="bf16 | f16 | f32 (default: bf16 on CUDA, f32 on CPU)")
    ap.add_argument("--shape", action="append", choices=list(SHAPES),
                    help="repeatable (default: the issue-12 shapes on CUDA, all on the CPU)")
    ap.add_argument("--calls", type=int, default=300, help="calls per timed loop")
    ap.add_argument("--reps", type=int, default=5, help="timed loops per arm (median)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--profile", action="store_true", help="cProfile one fattn fwd+bwd loop")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = a.device
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[
        a.dtype or ("bf16" if dev == "cuda" else "f32")]
    shapes = a.shape or (list(SHAPES)[:2] if dev == "cuda" else list(SHAPES)[::-1])
    print(f"# host time per call, {dev}, {dtype}, causal, {a.calls} calls x {a.reps} reps, "
          f"torch {torch.__version__}, fattn {fattn.version()}")
    print("| shape | arm | fwd host µs | fwd cpu µs | fwd sync µs | fwd+bwd host µs | "
          "fwd+bwd cpu µs | fwd+bwd sync µs |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for sname in shapes:
        x = inputs(SHAPES[sname], dtype, dev)
        fns = arms(dev)
        ok = {}
        for n, fn in fns.items():
            why = usable(fn, x)
            if why:
                print(f"| {sname} | {n} | {why} | | | | | |")
            else:
                ok[n] = fn
        times = {n: {"fwd": [], "fwdbwd": []} for n in ok}
        for bwd, mode in ((False, "fwd"), (True, "fwdbwd")):
            for n, fn in ok.items():  # warm-up
                time_calls(fn, x, bwd, max(a.calls // 10, 5), dev)
            for _ in range(a.reps):  # interleaved: every arm once per rep
                for n, fn in ok.items():
                    times[n][mode].append(time_calls(fn, x, bwd, a.calls, dev))
        for n in ok:
            med = {m: tuple(statistics.median(t[i] for t in times[n][m]) for i in (0, 1, 2))
                   for m in ("fwd", "fwdbwd")}
            print(f"| {sname} | {n} | " + " | ".join(f"{med[m][i]:.1f}" for m in ("fwd", "fwdbwd")
                                                    for i in (0, 1, 2)) + " |")
            row = dict(shape=sname, arm=n)
            for m in ("fwd", "fwdbwd"):
                row.update({f"{m}_host_us": med[m][0], f"{m}_cpu_us": med[m][1],
                            f"{m}_sync_us": med[m][2]})
            results.append(row)
        if a.profile:
            pr = cProfile.Profile()
            pr.enable()
            time_calls(fns["fattn"], x, True, a.calls, dev)
            pr.disable()
            print(f"\ncProfile, fattn fwd+bwd x {a.calls}, {sname}:")
            pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(dict(device=dev, dtype=str(dtype), torch=torch.__version__,
                           calls=a.calls, reps=a.reps, results=results), f, indent=1)
    print(f"bench_host: {len(results)} arm x shape results")


if __name__ == "__main__":
    main()
