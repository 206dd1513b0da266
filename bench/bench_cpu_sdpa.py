#!/usr/bin/env python3
"""bench_cpu_sdpa.py — the CPU comparison of issue 12 in one run: PyTorch's CPU SDPA with
autograd, fattn's fused f32 fwd+bwd (fattn-bench) and OpenBLAS SGEMM (printed by fattn-bench),
interleaved per shape so every ratio pairs numbers measured seconds apart on the same machine.

Shapes: f32, B1 H4, S 1024/2048/4096, D 64/128, no mask (fattn-bench's cpu-scaling preset).
torch arm: q, k, v [B, H, S, D] (torch's contiguous layout, its fastest) with requires_grad,
F.scaled_dot_product_attention(q, k, v) then .backward(dO) — the dispatcher picks its CPU
kernel (the flash CPU kernel for f32); median wall time of --reps after one warm-up.
fattn arm: `fattn-bench --backend cpu --shape 1,S,S,4,4,D --arms fused --threads T` in a
subprocess; its fused fwd+bwd median and the SGEMM 2048³ it measures just before the case.
Rates by FlashAttention's convention: fwd+bwd = 3.5 × 4·B·H·S²·D.

  python3 bench/bench_cpu_sdpa.py --fattn-bench build-cpu/fattn-bench           # all shapes
  python3 bench/bench_cpu_sdpa.py --fattn-bench build-cpu/fattn-bench --shapes 1024x64
  python3 bench/bench_cpu_sdpa.py                       # torch only
  python3 bench/bench_cpu_sdpa.py --fattn-bench new/fattn-bench --baseline old/fattn-bench
                                  # also an older build's fused time, same shapes, same run
  python3 bench/bench_cpu_sdpa.py --fattn-bench build/fattn-bench --paired 9
                                  # also 9 alternated torch / fattn.attention pairs in-process
"""
import argparse
import re
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F


def fwdbwd_step(attn, q, k, v, do):
    """A closure running attn(q, k, v).backward(do) afresh (q, k, v made leaves with grads)."""
    for t in (q, k, v):
        t.requires_grad_(True)

    def once():
        for t in (q, k, v):
            t.grad = None
        attn(q, k, v).backward(do)

    return once


def sdpa_step(S, D, H, seed=0):
    """torch's fwd+bwd on [B, H, S, D] inputs (its contiguous layout, its fastest): a closure,
    and the inputs (q, k, v, dO) for another arm to copy."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.rand(1, H, S, D, generator=g) * 2 - 1 for _ in range(4))
    return fwdbwd_step(F.scaled_dot_product_attention, q, k, v, do), (q, k, v, do)


def timed_ms(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def torch_fwdbwd_ms(S, D, H, reps, seed=0):
    once, _ = sdpa_step(S, D, H, seed)
    once()  # warm-up
    return statistics.median(timed_ms(once) for _ in range(reps))


def paired_ms(S, D, H, rounds, seed=0):
    """torch SDPA and fattn.attention fwd+bwd alternated in this process, `rounds` pairs after a
    warm-up each; returns (torch medians, fattn medians, median of the per-pair time ratios). A
    noisy shared host (VM steal, neighbours) moves both arms of a pair alike, so the median of
    the pair ratios is stable where single timings are not."""
    import fattn
    t_once, inputs = sdpa_step(S, D, H, seed)
    # fattn takes FlashAttention's [B, S, H, D]; a contiguous copy of the same values
    f_once = fwdbwd_step(fattn.attention, *(t.detach().transpose(1, 2).contiguous() for t in inputs))

    t_once(), f_once()  # warm-up
    ts, fs, ratios = [], [], []
    for i in range(rounds):
        if i % 2 == 0:  # alternate which arm goes first
            a, b = timed_ms(t_once), timed_ms(f_once)
        else:
            b, a = timed_ms(f_once), timed_ms(t_once)
        ts.append(a), fs.append(b), ratios.append(b / a)
    return statistics.median(ts), statistics.median(fs), statistics.median(ratios)


def fattn_bench(path, S, D, H, threads, reps):
    cmd = [path, "--backend", "cpu", "--shape", f"1,{S},{S},{H},{H},{D}", "--arms", "fused",
           "--threads", str(threads), "--reps", str(reps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    fused = re.search(r"^\s+fused\s+\S+\s+([\d.]+)\s+([\d.]+)", out, re.M)
    sgemm = re.search(r"SGEMM \d+\^3 \(same run[^)]*\): ([\d.]+) GFLOP/s", out)
    isa = re.search(r"cpu isa: (\S+)", out)
    return (float(fused.group(2)) if fused else None, float(sgemm.group(1)) if sgemm else None,
            isa.group(1) if isa else "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fattn-bench", help="path of fattn-bench (omit: torch only)")
    ap.add_argument("--baseline", help="another build's fattn-bench, timed too (before/after)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", default="1024x64,2048x64,4096x64,1024x128,2048x128,4096x128",
                    help="comma-separated SxD")
    ap.add_argument("--paired", type=int, default=0, metavar="N",
                    help="also N alternated torch/fattn.attention pairs in this process (the "
                         "installed fattn package); their median pair ratio is the robust one")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads; fattn-bench {a.fattn_bench or '(not run)'}")
    base_hdr = " baseline fused ms (GFLOP/s) |" if a.baseline else ""
    pair_hdr = f" paired x{a.paired}: torch ms / fattn.attention ms / median fattn/torch |" if a.paired else ""
    print("| S | D | torch SDPA fwd+bwd ms (GFLOP/s) | fattn fused ms (GFLOP/s) | fattn/torch time "
          "| SGEMM GFLOP/s | fattn/SGEMM | isa |" + base_hdr + pair_hdr)
    print("|---|---|---|---|---|---|---|---|" + ("---|" if a.baseline else "") + ("---|" if a.paired else ""))
    for sd in a.shapes.split(","):
        S, D = (int(x) for x in sd.split("x"))
        flop = 3.5 * 4 * a.heads * S * S * D
        t_ms = torch_fwdbwd_ms(S, D, a.heads, a.reps)
        f_ms = sg = None
        isa = "-"
        if a.fattn_bench:
            f_ms, sg, isa = fattn_bench(a.fattn_bench, S, D, a.heads, a.threads, a.reps)
        rate = lambda ms: flop / (ms * 1e-3) / 1e9  # noqa: E731
        base_cell = ""
        if a.baseline:
            b_ms = fattn_bench(a.baseline, S, D, a.heads, a.threads, a.reps)[0]
            base_cell = f" {b_ms:.1f} ({rate(b_ms):.1f}) |" if b_ms else " - |"
        f_cell = f"{f_ms:.1f} ({rate(f_ms):.1f})" if f_ms else "-"
        ratio = f"{f_ms / t_ms:.2f}" if f_ms else "-"
        sg_cell = f"{sg:.1f}" if sg else "-"
        of_sg = f"{rate(f_ms) / sg:.2f}" if f_ms and sg else "-"
        pair_cell = ""
        if a.paired:
            pt, pf, pr = paired_ms(S, D, a.heads, a.paired)
            pair_cell = f" {pt:.1f} / {pf:.1f} / **{pr:.2f}** |"
        print(f"| {S} | {D} | {t_ms:.1f} ({rate(t_ms):.1f}) | {f_cell} | {ratio} | {sg_cell} | {of_sg} | {isa} |"
              + base_cell + pair_cell, flush=True)


if __name__ == "__main__":
    main()
