"""test_scripts.py — the example and the benchmark still run (on the CPU, tiny), so they do not
rot between GPU runs.

examples/train_tiny_gpt.py: 4 steps of each arm; the arms' losses must agree (same seed, same
batches, F32 arithmetic on the CPU). bench/bench_sdpa.py --smoke: one tiny case; the fattn arms
must have produced numbers and the table must exist.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _run(args, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_example_arms_agree(tmp_path):
    out = _run(["examples/train_tiny_gpt.py", "--steps", "4", "--device", "cpu",
                "--out", str(tmp_path)], tmp_path)
    assert "fattn resolved precision: f32" in out
    res = json.load(open(tmp_path / "losses.json"))["results"]
    assert set(res) == {"sdpa", "fattn", "fattn-exact"}
    for arm in ("fattn", "fattn-exact"):
        assert len(res[arm]["losses"]) == 4
        assert res[arm]["max_abs_loss_diff_vs_sdpa"] < 1e-4, res[arm]


def test_bench_smoke(tmp_path):
    out = _run(["bench/bench_sdpa.py", "--smoke", "-p", "GQA", "--reps", "1",
                "--out", str(tmp_path)], tmp_path)
    summary = [l for l in out.splitlines() if l.startswith("bench_sdpa:")][-1]
    fattn_ran = int(summary.split("(fattn: ")[1].split(")")[0])
    assert fattn_ran >= 3, summary  # fattn, fattn-f32, fattn-exact
    table = open(tmp_path / "bench_sdpa.md").read()
    assert "| f32 D32 S64 GQA | fattn | f32 |" in table
