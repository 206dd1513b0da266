"""bench_path.py — fattn's PaTH attention beside FLA's Triton kernels (fla-core parallel_path_attn)
in one process, on the same inputs (bf16 q/k/v, f32 w and beta as FLA's layer makes them, no gate
unless --gate): median fwd and fwd+bwd time (CUDA events, 20 reps after warm-up), the peak
allocated above the inputs during fwd+bwd (torch.cuda.max_memory_allocated), and the history
bytes (fattn: its memory model; FLA: its torch.zeros(B, T, NB, HQ, K) of q's dtype). Prints
one row per case and fattn / FLA ratios.

    python3 bench/bench_path.py [--reps 10] [--cases all|quick|4,5] [--no-fla] [--gate] [--profile]

--profile: for each case and arm, five fwd+bwd under torch.profiler besides the timing: the sum of
the GPU kernels' durations per fwd+bwd against the event-timed median (the difference is the time
the GPU waited), the CPU-side calls that wait for the stream (synchronizes, device-to-host
copies) per fwd+bwd, and the GPU activities (kernels, memsets, copies) by total time per fwd+bwd.
"""
import argparse
import math
import statistics

import torch

import fattn.path as fp

CASES = [  # name, B, T, H, HQ, D, cu_seqlens, dtype
    ("dense T4096 H32", 1, 4096, 32, 32, 64, None, torch.bfloat16),
    ("dense T8192 H32", 1, 8192, 32, 32, 64, None, torch.bfloat16),
    ("dense T4096 H8 HQ32 (GQA)", 1, 4096, 8, 32, 64, None, torch.bfloat16),
    ("varlen 8192 [0,512,2048,4096,8192]", 1, 8192, 32, 32, 64, [0, 512, 2048, 4096, 8192], torch.bfloat16),
    ("dense T4096 H16 D128", 1, 4096, 16, 16, 128, None, torch.bfloat16),
    ("dense T4096 H32 f32 (TF32)", 1, 4096, 32, 32, 64, None, torch.float32),
]


def make(B, T, H, HQ, D, dtype, gate):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(B, T, HQ, D, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(B, T, H, D, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(B, T, H, D, device=dev, dtype=dtype, requires_grad=True)
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, device=dev), dim=-1).requires_grad_(True)
    beta = (2 * torch.sigmoid(torch.randn(B, T, H, device=dev))).requires_grad_(True)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, HQ, device=dev) + 4).requires_grad_(True) if gate else None
    do = torch.randn(B, T, HQ, D, device=dev, dtype=dtype)
    return q, k, v, w, beta, g, do


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def measure(call, args, reps):
    q, k, v, w, beta, g, do = args
    ins = [t for t in (q, k, v, w, beta, g) if t is not None]

    def fwd():
        with torch.no_grad():
            call(q, k, v, w, beta, g)

    def fwdbwd():
        o = call(q, k, v, w, beta, g)
        grads = torch.autograd.grad(o, ins, do)
        del o, grads

    tf, tfb = timed(fwd, reps), timed(fwdbwd, reps)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fwdbwd()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return tf, tfb, peak


def profile(call, args, ev_ms):
    """Kernel time per fwd+bwd vs the event-timed median, and the host's waiting calls."""
    from torch.profiler import ProfilerActivity
    q, k, v, w, beta, g, do = args
    ins = [t for t in (q, k, v, w, beta, g) if t is not None]
    n = 5
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            o = call(q, k, v, w, beta, g)
            torch.autograd.grad(o, ins, do)
        torch.cuda.synchronize()
    kern_us = waits = 0
    by_name = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n_us = by_name.setdefault(e.name[:60], [0, 0.0])
            n_us[0] += 1
            n_us[1] += e.time_range.elapsed_us()
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memcpy") \
                and not e.name.startswith("Memset"):
            kern_us += e.time_range.elapsed_us()
        elif e.device_type == torch.autograd.DeviceType.CPU and (
                "Synchronize" in e.name or e.name in ("cudaMemcpy", "aten::item", "aten::_local_scalar_dense")
                or ("cudaMemcpyAsync" in e.name and "DtoH" in e.name)):
            waits += 1
    k_ms = kern_us / n / 1e3
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:14]
    rows = "".join(f"\n{'':46s}{c / n:5.1f} x {us / n:9.1f} us  {name}" for name, (c, us) in top)
    return f"kernels {k_ms:.3f} ms of {ev_ms:.3f} (GPU waiting {ev_ms - k_ms:.3f}), waiting host calls {waits / n:.1f}" + rows


def fla_call():
    from fla.ops.path_attn.parallel import parallel_path_attn

    def call(q, k, v, w, beta, g, cu=None):
        return parallel_path_attn(q, k, v, w, beta, g, scale=q.shape[-1] ** -0.5, cu_seqlens=cu)[0]
    return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cases", default="all", help="all, quick (the first), or a comma list of indices")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--gate", action="store_true")
    ap.add_argument("--check", default="none", help="fattn's w/beta check (strict synchronizes)")
    ap.add_argument("--profile", action="store_true", help="kernel time vs event time per arm (torch.profiler)")
    a = ap.parse_args()
    fla = None if a.no_fla else fla_call()
    MiB = 2 ** 20
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  reps {a.reps}  check={a.check}")
    hdr = f"{'case':38s} {'arm':6s} {'fwd ms':>8s} {'fwd+bwd':>8s} {'peak MiB':>9s} {'hist MiB':>9s}"
    print(hdr)
    cases = CASES if a.cases == "all" else CASES[:1] if a.cases == "quick" else [CASES[int(i)] for i in a.cases.split(",")]
    results = {}
    for name, B, T, H, HQ, D, cu, dtype in cases:
        args = make(B, T, H, HQ, D, dtype, a.gate)
        cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device="cuda")
        ours = lambda q, k, v, w, beta, g: fp.path_attention(q, k, v, w, beta, g, cu_seqlens=cu_t, check=a.check)
        hist_ours = fp.path_memory(*args[:6], cu_seqlens=cu_t)["history_packed_bytes"]
        r = measure(ours, args, a.reps)
        results[(name, "fattn")] = r
        print(f"{name:38s} {'fattn':6s} {r[0]:8.3f} {r[1]:8.3f} {r[2] / MiB:9.1f} {hist_ours / MiB:9.1f}", flush=True)
        if a.profile:
            print(f"{'':38s} {'fattn':6s} {profile(ours, args, r[1])}", flush=True)
        if fla is not None and dtype != torch.float32:
            nb = max(math.ceil((cu[i + 1] - cu[i]) / 512) for i in range(len(cu) - 1)) if cu else math.ceil(T / 512)
            hist_fla = B * T * nb * HQ * D * args[0].element_size()
            fl = lambda q, k, v, w, beta, g: fla(q, k, v, w, beta, g, cu_t)
            f = measure(fl, args, a.reps)
            results[(name, "FLA")] = f
            print(f"{name:38s} {'FLA':6s} {f[0]:8.3f} {f[1]:8.3f} {f[2] / MiB:9.1f} {hist_fla / MiB:9.1f}")
            if a.profile:
                print(f"{'':38s} {'FLA':6s} {profile(fl, args, f[1])}", flush=True)
            print(f"{'':38s} {'ratio':6s} {r[0] / f[0]:8.2f} {r[1] / f[1]:8.2f} {r[2] / f[2]:9.2f} {hist_ours / hist_fla:9.3f}",
                  flush=True)
        del args
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
