"""test_ring.py — ring attention (fattn.distributed) on the CPU: the merge seam in one process,
then ring_attention over torch.distributed's gloo backend with 2 and 4 processes on this
machine, against fattn.attention on the full sequence.

Compared with rel = max|a - b| / max|b| <= 1e-5 (f32; 2e-2 for bf16) for o, lse, dq, dk, dv:
non-causal, causal (zigzag), GQA / MQA, padding masks (finite right and left padding, -inf with
a fully masked batch element), bf16, and bitwise repeatability run to run. Negative controls
show that the checks catch a missing block, a block's own lse in the backward, a wrong
per-block mask, and a changed merge order (other bits).

Run: cd python && python3 -m pytest -q tests/test_ring.py
"""
import os
import time

import pytest
import torch

import fattn
from fattn.distributed import (block_attention, block_backward, merge_partials, ring_attention,
                               zigzag_shard, zigzag_unshard)

TOL = 1e-5
NEG_INF = float("-inf")
FMIN = torch.finfo(torch.float32).min


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b| over the finite entries of b; -inf entries must match exactly."""
    a, b = a.detach().float(), b.detach().float()
    assert torch.equal(a == NEG_INF, b == NEG_INF), "the -inf entries differ"
    fin = b != NEG_INF
    if not bool(fin.any()):
        return 0.0
    den = b[fin].abs().max().item()
    return (a[fin] - b[fin]).abs().max().item() / (den or 1.0)


# ------------------------------------------------------------------------------ inputs
# name -> (causal, Hq, Hk, padding, dtype); B = 2, S = 32, D = 16 (world 4: chunks of 4).
F32, BF16 = torch.float32, torch.bfloat16
CASES = {
    "plain": (False, 2, 2, None, F32),
    "causal": (True, 2, 2, None, F32),
    "gqa": (True, 4, 2, None, F32),
    "gqa_plain": (False, 4, 1, None, F32),
    "pad_right": (True, 2, 2, "right", F32),   # finite (finfo.min) padding: whole blocks padded
    "pad_left": (True, 2, 2, "left", F32),     # finite padding at the start: fully padded rows
    "pad_inf": (False, 2, 2, "inf", F32),      # -inf padding; batch element 1 fully masked
    "bf16": (True, 4, 2, "right", BF16),
}
B, S, D = 2, 32, 16
# bf16: every block's partial o and gradient terms come back from the library in bf16, one
# rounding more per block than on one device (measured: rel <= 8e-3 at world 4).
TOLS = {F32: TOL, BF16: 2e-2}


def padding_bias(kind):
    """[B, 1, 1, S] additive per-key bias (None for no padding)."""
    if kind is None:
        return None
    bias = torch.zeros(B, 1, 1, S)
    if kind == "right":
        bias[0, ..., 20:] = FMIN
    elif kind == "left":
        bias[0, ..., :10] = FMIN
    else:
        bias[0, ..., 21:] = NEG_INF
        bias[1] = NEG_INF
    return bias


def inputs(name):
    """The global q, k, v, dout and bias of a case (the same on every process)."""
    _, hq, hk, pad, dtype = CASES[name]
    g = torch.Generator().manual_seed(sorted(CASES).index(name))
    q, k, v, do = (torch.randn(B, S, h, D, generator=g).to(dtype) for h in (hq, hk, hk, hq))
    return q, k, v, do, padding_bias(pad)


def reference(name):
    """fattn.attention on the full sequence, one process: (o, lse, dq, dk, dv)."""
    causal = CASES[name][0]
    q, k, v, do, bias = inputs(name)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, lse = fattn.attention(q, k, v, bias=bias, causal=causal, return_lse=True)
    o.backward(do)
    return o.detach(), lse, q.grad, k.grad, v.grad


# ------------------------------------------------------------------------------ zigzag helpers
def test_zigzag_roundtrip_and_order():
    x = torch.arange(2 * 24).reshape(2, 24)
    shards = [zigzag_shard(x, r, 3) for r in range(3)]
    assert torch.equal(shards[0][0], torch.tensor([0, 1, 2, 3, 20, 21, 22, 23]))
    assert torch.equal(shards[2][0], torch.tensor([8, 9, 10, 11, 12, 13, 14, 15]))
    assert torch.equal(zigzag_unshard(shards), x)


def test_zigzag_errors_name_the_argument():
    x = torch.zeros(1, 10, 1, 4)
    with pytest.raises(ValueError, match="length 10.*2 \\* world = 4"):
        zigzag_shard(x, 0, 2)
    with pytest.raises(ValueError, match="rank must be in"):
        zigzag_shard(x, 2, 2)
    with pytest.raises(ValueError, match="shards\\[1\\] has length"):
        zigzag_unshard([torch.zeros(1, 4), torch.zeros(1, 6)])
    with pytest.raises(ValueError, match="must be even"):
        zigzag_unshard([torch.zeros(1, 3)])


# ------------------------------------------------------------------------------ the merge seam
def split_run(name, cuts, *, drop=None, local_lse=False):
    """The merge seam in one process: keys cut at `cuts`, one block_attention per block,
    merge_partials in key order, block_backward with the global o and lse. drop: a block left
    out; local_lse: each block's own lse in the backward (both wrong on purpose)."""
    assert not CASES[name][0]  # blocks of a causal mask need the zigzag plan: the ring's business
    q, k, v, do, bias = inputs(name)
    edges = list(zip([0] + cuts, cuts + [S]))
    blocks = [(a, b) for i, (a, b) in enumerate(edges) if i != drop]
    parts = [block_attention(q, k[:, a:b], v[:, a:b],
                             bias=None if bias is None else bias[..., a:b]) for a, b in blocks]
    o, lse = merge_partials(parts)
    dq, dk, dv = torch.zeros(q.shape), torch.zeros(k.shape), torch.zeros(v.shape)
    for (a, b), (_, l_blk) in zip(blocks, parts):
        block_backward(do, q, k[:, a:b], v[:, a:b], o, l_blk if local_lse else lse, dq,
                       dk[:, a:b], dv[:, a:b], bias=None if bias is None else bias[..., a:b])
    return o, lse, dq, dk, dv


@pytest.mark.parametrize("name", ["plain", "gqa_plain", "pad_inf"])
def test_seam_matches_full_attention(name):
    got, want = split_run(name, [5, 16, 17]), reference(name)
    for what, a, b in zip("o lse dq dk dv".split(), got, want):
        assert rel(a, b) <= TOL, what


def test_seam_checks_can_fail():
    """A missing block and a block-local lse in the backward are far outside the tolerance."""
    want = reference("plain")
    missing = split_run("plain", [8, 16], drop=1)
    assert rel(missing[0], want[0]) > 1e-3
    local = split_run("plain", [8, 16], local_lse=True)
    assert rel(local[2], want[2]) > 1e-3 and rel(local[3], want[3]) > 1e-3


def test_merge_order_fixes_the_bits():
    """merge_partials folds in list order: the same partials in another order give other bits
    (which is why the ring fixes its order), and the same order the same bits."""
    q, k, v, _, _ = inputs("plain")
    parts = [block_attention(q, k[:, a:a + 8], v[:, a:a + 8]) for a in range(0, S, 8)]
    fwd, again, rev = merge_partials(parts), merge_partials(parts), merge_partials(parts[::-1])
    assert torch.equal(fwd[0], again[0]) and torch.equal(fwd[1], again[1])
    assert not torch.equal(fwd[0], rev[0])
    assert rel(rev[0], fwd[0]) <= TOL


def test_merge_of_empty_rows_is_zero_and_neg_inf():
    o = torch.randn(1, 3, 1, 4)
    lse = torch.tensor([[[NEG_INF, 0.5, NEG_INF]]])
    mo, ml = merge_partials([(o, lse), (torch.zeros(1, 3, 1, 4), torch.full((1, 1, 3), NEG_INF))])
    assert torch.equal(ml, lse) and torch.equal(mo[:, 1], o[:, 1])
    assert torch.equal(mo[:, 0], torch.zeros(1, 1, 4)) and torch.equal(mo[:, 2], mo[:, 0])


def test_seam_errors_name_the_argument():
    q, k, v, do, _ = inputs("plain")
    o, lse = block_attention(q, k, v)
    with pytest.raises(ValueError, match="dk_acc must be a float32 buffer"):
        block_backward(do, q, k, v, o, lse, torch.zeros(q.shape), torch.zeros(1),
                       torch.zeros(v.shape))
    with pytest.raises(ValueError, match="partials\\[1\\]: lse has shape"):
        merge_partials([(o, lse), (o, lse[:, :, :3])])
    with pytest.raises(ValueError, match="partials is empty"):
        merge_partials([])


def test_ring_needs_an_initialized_process_group():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    q = torch.zeros(1, 4, 1, 8)
    with pytest.raises(RuntimeError, match="not initialized"):
        ring_attention(q, q, q)


# ------------------------------------------------------------------------------ the ring (gloo)
def shard(x, rank, world, causal, dim=1):
    """Zigzag for causal cases, contiguous chunks otherwise (any sharding works without a mask)."""
    if causal:
        return zigzag_shard(x, rank, world, dim)
    return x.chunk(world, dim)[rank].contiguous()


def unshard(shards, causal, dim=1):
    return zigzag_unshard(shards, dim) if causal else torch.cat(shards, dim)


def ring_run(name, rank, world):
    """This rank's ring_attention outputs and gradients for a case."""
    causal = CASES[name][0]
    q, k, v, do, bias = inputs(name)
    q, k, v = (shard(t, rank, world, causal).requires_grad_() for t in (q, k, v))
    bias = None if bias is None else shard(bias, rank, world, causal, dim=3)
    o, lse = ring_attention(q, k, v, bias=bias, causal=causal, return_lse=True)
    o.backward(shard(do, rank, world, causal))
    return o.detach(), lse, q.grad, k.grad, v.grad


def bad_calls():
    """Argument errors raised on every rank before any communication: their messages."""
    msgs = {}
    odd, square = torch.zeros(1, 3, 1, 8), torch.zeros(1, 1, 3, 3)
    for key, call in (("odd", lambda: ring_attention(odd, odd, odd, causal=True)),
                      ("bias", lambda: ring_attention(odd, odd, odd, bias=square))):
        try:
            call()
        except ValueError as e:
            msgs[key] = str(e)
    return msgs


def worker(rank, world, init_file, out_dir):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    try:
        results = {name: ring_run(name, rank, world) for name in CASES}
        results["again"] = {name: ring_run(name, rank, world) for name in ("gqa", "pad_left")}
        results["errors"] = bad_calls()
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def gloo_available():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


def spawn(world, tmp, timeout=120.0):
    """Runs worker() on `world` processes; returns every rank's results."""
    import torch.multiprocessing as mp
    ctx = mp.spawn(worker, args=(world, os.path.join(tmp, "init"), tmp), nprocs=world,
                   join=False)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.terminate()
            pytest.fail(f"ring attention with {world} processes did not finish in {timeout} s")
    return [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(world)]


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def ring(request, tmp_path_factory):
    if not gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")
    world = request.param
    return world, spawn(world, str(tmp_path_factory.mktemp(f"ring{world}")))


def ring_errors(name, results):
    """rel of the unsharded ring outputs against one device: {"o": ..., "lse": ..., ...};
    lse_real leaves out rows whose lse is a finite padding value (they dominate max|lse|)."""
    causal = CASES[name][0]
    got, want = [r[name] for r in results], reference(name)
    out = {}
    for i, what in enumerate(["o", "lse", "dq", "dk", "dv"]):
        full = unshard([g[i] for g in got], causal, 2 if what == "lse" else 1)
        out[what] = rel(full, want[i])
        if what == "lse":  # without the rows whose lse is a finite padding value (~finfo.min)
            real = want[i].abs() < 1e30
            out["lse_real"] = rel(full[real], want[i][real])
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_ring_matches_one_device(ring, name):
    world, results = ring
    errors = ring_errors(name, results)
    tol = TOLS[CASES[name][4]]
    assert all(e <= tol for e in errors.values()), f"world {world}: {errors}"


def test_ring_fully_masked_rows(ring):
    """pad_inf's batch element 1 has no key at all: o = 0, lse = -inf, zero gradients."""
    _, results = ring
    for r in results:
        o, lse, dq, _, _ = r["pad_inf"]
        assert torch.equal(o[1], torch.zeros_like(o[1])) and bool((lse[1] == NEG_INF).all())
        assert torch.equal(dq[1], torch.zeros_like(dq[1]))


def test_ring_is_bitwise_repeatable(ring):
    _, results = ring
    for r in results:
        for name, again in r["again"].items():
            assert all(torch.equal(a, b) for a, b in zip(r[name], again)), name


def test_ring_argument_errors(ring):
    _, results = ring
    for r in results:
        assert "local length must be even" in r["errors"]["odd"]
        assert "bias must be this rank's per-key bias" in r["errors"]["bias"]


def test_serial_zigzag_plan_checks_can_fail():
    """The ring's per-block masks replayed in one process (fattn.distributed._block, world 4):
    the merged result matches one device, and a wrong mask for the blocks of lower ranks (causal
    bottom-right instead of full) is caught."""
    from fattn.distributed import _block
    world, (q, k, v, _, _) = 4, inputs("causal")
    want = reference("causal")[0]

    def run(wrong):
        outs = []
        for rank in range(world):
            qs = zigzag_shard(q, rank, world)
            parts = []
            for owner in range(world):
                blk = _block(rank, owner, True, qs.shape[1])
                ks, vs = zigzag_shard(k, owner, world), zigzag_shard(v, owner, world)
                mask = True if wrong and owner < rank else blk.causal
                o, lse = block_attention(qs[:, blk.rows], ks[:, blk.cols], vs[:, blk.cols],
                                         causal=mask)
                full_o = torch.zeros(qs.shape)
                full_l = torch.full((B, qs.shape[2], qs.shape[1]), NEG_INF)
                full_o[:, blk.rows], full_l[:, :, blk.rows] = o, lse
                parts.append((full_o, full_l))
            outs.append(merge_partials(parts)[0])
        return zigzag_unshard(outs)

    assert rel(run(False), want) <= TOL
    assert rel(run(True), want) > 1e-3


if __name__ == "__main__":
    # The numbers of docs/RING.md: cd python && PYTHONPATH=. python3 tests/test_ring.py
    import tempfile
    for world in (2, 4):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            results = spawn(world, tmp)
        print(f"world {world}: {time.monotonic() - t0:.1f} s for {len(CASES) + 2} ring calls "
              "(fwd + bwd) per rank, process start included")
        for name in CASES:
            errors = ring_errors(name, results)
            print(f"  {name:10s} " + "  ".join(f"{k} {v:.1e}" for k, v in errors.items()))
