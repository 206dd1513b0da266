#!/usr/bin/env python3
"""bench_host_path.py — host time per call of fattn's PaTH op from PyTorch, at a shape whose
kernels take microseconds: fwd (inputs requiring grad, so the autograd graph is built) and fwd+bwd
(torch.autograd.grad). Reported: the calling thread's CPU time per call (time.thread_time: Python,
the dispatcher, autograd and the C call; on the CPU backend also the part of the kernels that runs
on this thread), median of --reps rounds of --calls calls, and which host path served the op
(fattn.host_path(): the compiled ops or ctypes; FATTN_TORCH_SHIM=0 selects ctypes).

    python3 bench/bench_host_path.py [--device cpu|cuda] [--T 1] [--calls 300] [--reps 5]
"""
import argparse
import statistics
import time

import torch

import fattn
from fattn.path import path_attention


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev, B, H, D = a.device, 1, 1, 64
    q, k, v = (torch.randn(B, a.T, H, D, device=dev, requires_grad=True) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(B, a.T, H, D, device=dev), dim=-1).requires_grad_(True)
    beta = torch.rand(B, a.T, H, device=dev).requires_grad_(True)
    do = torch.randn(B, a.T, H, D, device=dev)
    ins = [q, k, v, w, beta]

    def fwd():
        path_attention(q, k, v, w, beta, check="none")

    def fwd_bwd():
        torch.autograd.grad(path_attention(q, k, v, w, beta, check="none"), ins, do)

    print(f"host path: {fattn.host_path()}; device {dev}, B{B} T{a.T} H{H} D{D} f32")
    for f in (fwd, fwd_bwd):
        for _ in range(a.calls // 5):
            f()
        ts = []
        for _ in range(a.reps):
            t0 = time.thread_time()
            for _ in range(a.calls):
                f()
            ts.append((time.thread_time() - t0) / a.calls * 1e6)
        if dev == "cuda":
            torch.cuda.synchronize()
        print(f"{f.__name__:8s} {statistics.median(ts):8.1f} us per call (thread CPU time, median of {a.reps})")


if __name__ == "__main__":
    main()
