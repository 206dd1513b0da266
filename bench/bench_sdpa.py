#!/usr/bin/env python3
"""bench_sdpa.py — fattn against torch's scaled_dot_product_attention backends, one process.

Arms, at equal shape, interleaved per case (LESSONS: unpaired arms mislead):
  fattn            fattn.attention, algo fused, prec auto (bf16 -> native, f32 -> tf32 on sm_80+)
  fattn-f32        fattn, prec f32 (f32 cases only: strict fp32 arithmetic)
  fattn-exact      fattn, algo exact (materialized probabilities; short S only)
  fattn-window     fattn with the masked cases' window as window=(256, 256) instead of a bias
  flash, cudnn, efficient, math   SDPA with that backend forced (torch.nn.attention.sdpa_kernel)
  flash-det, efficient-det        the same under torch.use_deterministic_algorithms(True)
Shapes: the project's target table (docs/PERF.md, "TARGETS.md shapes"; B·S = 16k and Hq·D = 2048 for bf16; B·S = 8k, H16 for f32;
a ±256 window given as a dense -inf bias; GQA 32q/8kv; long S); and learned biases that require
grad (full, shared, per-key), where fwd+bwd also returns the bias's gradient (arms: fattn, its
exact arm, mem-efficient, math).
Per arm and case: fwd and fwd+bwd time (median of CUDA-event-timed reps, L2 flushed before each),
TFLOP/s (FlashAttention's convention: fwd 4·B·Hq·Sq·Skv·D, halved when causal; fwd+bwd 3.5x
fwd), peak memory above the inputs (torch's allocator high-water; fattn allocates through
torch too), and "det": whether two backward runs on the same inputs give identical bits.
An arm that cannot run a case (unsupported, refused, out of memory) gets its reason, not a number.

Writes OUT/bench_sdpa.md (table), OUT/bench_sdpa.json (raw), OUT/bench_sdpa.png (TFLOP/s vs S).

  python3 bench/bench_sdpa.py --out out/bench            # full (~10 min on an H200)
  python3 bench/bench_sdpa.py --out out/bench --quick    # < 2 min
"""
import argparse
import json
import math
import os
import platform
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

DEV = "cuda"  # --smoke switches to the CPU (tiny shapes) to test this script without a GPU
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


# ------------------------------------------------------------------------------ cases
def case(name, dtype, B, S, Hq, D, causal=False, Hkv=None, window_bias=None, series=None,
         learned_bias=None):
    """learned_bias: "full" [B, Hq, S, S], "shared" [1, 1, S, S] or "key" [B, 1, 1, S], random
    values that require grad: fwd+bwd also returns the bias's gradient (summed over its
    broadcast dims)."""
    return dict(name=name, dtype=dtype, B=B, S=S, Hq=Hq, Hkv=Hkv or Hq, D=D, causal=causal,
                window_bias=window_bias, series=series, learned_bias=learned_bias)


def cases(quick, smoke=False):
    bf, f32 = torch.bfloat16, torch.float32
    out = []
    if smoke:
        out.append(case("bf16 D32 S64 causal", bf, 2, 64, 4, 32, True, series="bf16 D32 causal"))
        out.append(case("bf16 D32 S128 causal", bf, 1, 128, 4, 32, True, series="bf16 D32 causal"))
        out.append(case("f32 D32 S64 GQA", f32, 1, 64, 4, 32, Hkv=2))
        out.append(case("f32 D32 S64 window ±8 as bias", f32, 1, 64, 4, 32, window_bias=8))
        out.append(case("f32 D32 S64 learned bias [B,H,S,S]", f32, 2, 64, 4, 32, learned_bias="full"))
        return out
    if quick:
        for c in (False, True):
            out.append(case(f"bf16 D128 S4096{' causal' if c else ''}", bf, 4, 4096, 16, 128, c,
                            series=f"bf16 D128{' causal' if c else ''}"))
        out.append(case("bf16 D128 GQA 32q/8kv S8192 causal", bf, 1, 8192, 32, 128, True, Hkv=8))
        out.append(case("bf16 D256 S4096 B2 H16", bf, 2, 4096, 16, 256))
        out.append(case("f32 D64 S4096", f32, 2, 4096, 16, 64))
        out.append(case("bf16 D128 S4096 window ±256 as bias", bf, 1, 4096, 16, 128,
                        window_bias=256))
        return out
    for D, H in ((64, 32), (128, 16)):
        for S in (1024, 2048, 4096, 8192, 16384):
            for c in (False, True):
                out.append(case(f"bf16 D{D} S{S}{' causal' if c else ''}", bf, 16384 // S, S, H, D, c,
                                series=f"bf16 D{D}{' causal' if c else ''}"))
    out.append(case("bf16 D128 GQA 32q/8kv S8192 causal", bf, 1, 8192, 32, 128, True, Hkv=8))
    out.append(case("bf16 D128 H16 S65536 causal (long)", bf, 1, 65536, 16, 128, True))
    for c in (False, True):  # head dim 256 (the sm90 kernels of D 256 on Hopper)
        out.append(case(f"bf16 D256 S4096 B2 H16{' causal' if c else ''}", bf, 2, 4096, 16, 256, c))
    for D in (64, 128):
        out.append(case(f"f32 D{D} S4096", f32, 2, 4096, 16, D, series=f"f32 D{D}"))
    for dt, tag in ((bf, "bf16"), (f32, "f32")):
        out.append(case(f"{tag} D128 S4096 window ±256 as bias", dt, 1, 4096, 16, 128,
                        window_bias=256))
    # the bias gradient (mem-efficient is the only SDPA backend that computes one)
    for kind, shape in (("full", "[B,H,S,S]"), ("shared", "[1,1,S,S]"), ("key", "[B,1,1,S]")):
        out.append(case(f"bf16 D64 S4096 learned bias {shape}", bf, 2, 4096, 16, 64, learned_bias=kind))
    out.append(case("f32 D64 S4096 learned bias [B,H,S,S]", f32, 2, 4096, 16, 64, learned_bias="full"))
    return out


def arms_for(c, quick):
    if c["learned_bias"]:  # flash and cuDNN take no bias gradient; math only where it fits
        arms = ["fattn", "fattn-exact", "efficient", "efficient-det"]
        if c["B"] * c["Hq"] * c["S"] ** 2 * 12 < 40e9:
            arms.append("math")
        return arms
    arms = ["fattn"]
    if c["dtype"] == torch.float32:
        arms.append("fattn-f32")
    if c["window_bias"]:
        arms.append("fattn-window")  # the same mask as a native window: -inf tiles skipped
    if c["S"] <= 4096:
        arms.append("fattn-exact")
    arms += ["flash", "cudnn", "efficient"]
    if not quick or c["S"] <= 4096:
        arms += ["flash-det"] + ([] if quick else ["efficient-det"])
    # math materializes [B, H, S, S] in the input dtype plus float32 softmax: keep it < ~40 GB
    if c["B"] * c["Hq"] * c["S"] ** 2 * 6 < 40e9:
        arms.append("math")
    return arms


def flops(c, fwd_bwd):
    f = 4.0 * c["B"] * c["Hq"] * c["S"] * c["S"] * c["D"]
    if c["causal"]:
        f /= 2
    return f * (3.5 if fwd_bwd else 1.0)


# ------------------------------------------------------------------------------ arms
def make_fn(arm, c, bias):
    """Callable (q, k, v) -> o on [B, S, H, D] tensors."""
    if arm.startswith("fattn"):
        kw = dict(algo="exact" if arm == "fattn-exact" else "fused",
                  prec="f32" if arm == "fattn-f32" else "auto")
        if arm == "fattn-window":
            w = c["window_bias"]
            return lambda q, k, v: fattn.attention(q, k, v, causal=c["causal"], window=(w, w))
        return lambda q, k, v: fattn.attention(q, k, v, causal=c["causal"], bias=bias, **kw)
    backend = SDPA_BACKENDS[arm.replace("-det", "")]
    gqa = c["Hkv"] != c["Hq"]

    def run(q, k, v):
        # SDPA takes [B, H, S, D]: transposed views of the same storage, no copy.
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), attn_mask=bias,
                                               is_causal=c["causal"], enable_gqa=gqa)
        return o.transpose(1, 2)
    return run


class Deterministic:
    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.prev = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(self.on)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.prev)


def time_ms(fn, reps, flush):
    """Median of reps CUDA-event timings, L2 flushed (outside the timed region) before each."""
    times = []
    if DEV == "cpu":
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def bench_arm(arm, c, inputs, reps, flush):
    q, k, v, do, bias = inputs
    fn = make_fn(arm, c, bias)
    res = {"arm": arm}
    try:
        with Deterministic(arm.endswith("-det")), torch.no_grad():
            fn(q, k, v)  # warm-up, and the place an unsupported request fails
            sync()
            res["fwd_ms"] = time_ms(lambda: fn(q, k, v), reps, flush)

        wrt = (q, k, v) + ((bias,) if bias is not None and bias.requires_grad else ())

        def fwd_bwd():
            o = fn(q, k, v)
            return torch.autograd.grad(o, wrt, do)

        with Deterministic(arm.endswith("-det")):
            g1 = fwd_bwd()
            sync()
            if DEV == "cuda":
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            g2 = fwd_bwd()
            sync()
            res["peak_mib"] = ((torch.cuda.max_memory_allocated() - base) / 2**20
                               if DEV == "cuda" else float("nan"))
            res["det"] = all(torch.equal(a, b) for a, b in zip(g1, g2))
            del g1, g2
            res["fwd_bwd_ms"] = time_ms(fwd_bwd, reps, flush)
        res["fwd_tflops"] = flops(c, False) / res["fwd_ms"] / 1e9
        res["fwd_bwd_tflops"] = flops(c, True) / res["fwd_bwd_ms"] / 1e9
    except torch.cuda.OutOfMemoryError:
        res["error"] = "out of memory"
    except Exception as e:  # unsupported / refused: record why, keep going
        msg = str(e).strip().splitlines()
        res["error"] = (msg[0] if msg else type(e).__name__)[:160]
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return res


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def make_inputs(c):
    g = torch.Generator(device=DEV).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=DEV, generator=g).to(c["dtype"]).requires_grad_()

    B, S, Hq, Hkv, D = c["B"], c["S"], c["Hq"], c["Hkv"], c["D"]
    q, k, v = rnd(B, S, Hq, D), rnd(B, S, Hkv, D), rnd(B, S, Hkv, D)
    do = torch.randn(B, S, Hq, D, device=DEV, generator=g).to(c["dtype"])
    bias = None
    if c["learned_bias"]:
        shape = {"full": (B, Hq, S, S), "shared": (1, 1, S, S), "key": (B, 1, 1, S)}[c["learned_bias"]]
        bias = rnd(*shape)
    if c["window_bias"]:
        i = torch.arange(S, device=DEV)
        ok = (i[None, :] - i[:, None]).abs() <= c["window_bias"]
        bias = torch.zeros(S, S, device=DEV).masked_fill(~ok, float("-inf"))
        bias = bias.to(c["dtype"])[None, None]  # [1, 1, S, S], broadcast over B and H
    return q, k, v, do, bias


# ------------------------------------------------------------------------------ report
def fmt(r, key_ms, key_tf):
    if "error" in r:
        return "—"
    return f"{r[key_ms]:.3g} ({r[key_tf]:.0f})"


def write_table(results, meta, path):
    lines = [f"# fattn vs torch SDPA ({meta['gpu']}, torch {meta['torch']}, fattn {meta['fattn']})",
             "", f"Command: `{meta['command']}` at commit {meta['commit']}, median of {meta['reps']} reps.", "",
             "Cells: time ms (TFLOP/s). fwd+bwd = 3.5 × fwd FLOPs, causal halved. "
             "peak = allocator high-water above the inputs during fwd+bwd. "
             "det = two backward runs bitwise equal. — = could not run (reason below).", ""]
    lines.append("| case | arm | prec | fwd | fwd+bwd | peak MiB | det |")
    lines.append("|---|---|---|---|---|---|---|")
    notes = []
    for entry in results:
        c = entry["case"]
        for r in entry["arms"]:
            if "error" in r:
                notes.append(f"- {c['name']} / {r['arm']}: {r['error']}")
                lines.append(f"| {c['name']} | {r['arm']} | | — | — | — | — |")
                continue
            lines.append(f"| {c['name']} | {r['arm']} | {r.get('prec', '')} | "
                         f"{fmt(r, 'fwd_ms', 'fwd_tflops')} | {fmt(r, 'fwd_bwd_ms', 'fwd_bwd_tflops')} | "
                         f"{r['peak_mib']:.0f} | {'yes' if r['det'] else 'NO'} |")
    if notes:
        lines += ["", "Arms that did not run:", ""] + notes
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib missing: no plot"
    series = sorted({e["case"]["series"] for e in results if e["case"]["series"]})
    if not series:
        return "no series"
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4), squeeze=False)
    for ax, s in zip(axes[0], series):
        pts = {}
        for e in results:
            if e["case"]["series"] != s:
                continue
            for r in e["arms"]:
                if "error" not in r:
                    pts.setdefault(r["arm"], []).append((e["case"]["S"], r["fwd_bwd_tflops"]))
        for arm, xy in sorted(pts.items()):
            xy.sort()
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S")
        ax.set_ylabel("fwd+bwd TFLOP/s")
        ax.set_title(s)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def git_commit():
    try:
        import subprocess
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), timeout=5).stdout.strip()
    except Exception:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/bench_sdpa")
    ap.add_argument("--quick", action="store_true", help="a few shapes, 5 reps (< 2 min)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("-p", "--pattern", default=None, help="only cases whose name contains this")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip the cases left once this many seconds have passed (default: 100 "
                         "with --quick, none otherwise)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU: tests this script, measures nothing useful")
    args = ap.parse_args()
    global DEV
    if args.smoke:
        DEV = "cpu"
    elif not torch.cuda.is_available():
        print("bench_sdpa: no CUDA device; nothing to measure")
        return 2
    os.makedirs(args.out, exist_ok=True)
    reps = args.reps or (5 if args.quick else 10)
    meta = dict(gpu=torch.cuda.get_device_name() if DEV == "cuda" else "CPU smoke run",
                torch=torch.__version__, fattn=fattn.version(),
                library=fattn.library_path(), python=platform.python_version(),
                command="python3 " + " ".join(sys.argv), reps=reps, commit=git_commit())
    flush = torch.empty(256 << 20 if DEV == "cuda" else 1, dtype=torch.uint8, device=DEV)  # > L2
    results = []
    t0 = time.time()
    budget = args.budget_s if args.budget_s is not None else (100.0 if args.quick else None)
    skipped = []
    for c in cases(args.quick, args.smoke):
        if args.pattern and args.pattern not in c["name"]:
            continue
        if budget is not None and time.time() - t0 > budget:
            skipped.append(c["name"])
            continue
        inputs = make_inputs(c)
        arms = []
        for arm in arms_for(c, args.quick):
            r = bench_arm(arm, c, inputs, reps, flush)
            if arm.startswith("fattn") and "error" not in r:
                r["prec"] = fattn.resolve_prec(inputs[0], prec="f32" if arm == "fattn-f32" else "auto",
                                               algo="exact" if arm == "fattn-exact" else "fused")
            arms.append(r)
            state = r.get("error") or (f"fwd {r['fwd_ms']:.3f} ms, fwd+bwd {r['fwd_bwd_ms']:.3f} ms "
                                       f"({r['fwd_bwd_tflops']:.0f} TFLOP/s), det {r['det']}")
            print(f"[{time.time() - t0:6.1f}s] {c['name']:<40} {arm:<14} {state}", flush=True)
        del inputs
        if DEV == "cuda":
            torch.cuda.empty_cache()
        results.append({"case": {**c, "dtype": str(c["dtype"]).split(".")[-1]}, "arms": arms})
    with open(os.path.join(args.out, "bench_sdpa.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    write_table(results, meta, os.path.join(args.out, "bench_sdpa.md"))
    plot = write_plot(results, os.path.join(args.out, "bench_sdpa.png"))
    if skipped:
        with open(os.path.join(args.out, "bench_sdpa.md"), "a") as f:
            f.write(f"\nNot measured (time budget {budget:.0f} s spent): {', '.join(skipped)}\n")
    ran = sum("error" not in r for e in results for r in e["arms"])
    total = sum(len(e["arms"]) for e in results)
    fattn_ok = sum("error" not in r for e in results for r in e["arms"] if r["arm"].startswith("fattn"))
    print(f"bench_sdpa: {ran}/{total} arm-cases ran (fattn: {fattn_ok}), {time.time() - t0:.0f} s, "
          f"{len(skipped)} cases over budget, table {os.path.join(args.out, 'bench_sdpa.md')}, "
          f"plot {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
