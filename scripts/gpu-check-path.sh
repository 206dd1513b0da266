#!/usr/bin/env bash
# gpu-check-path.sh OUTDIR — the PaTH part of the GPU-machine check (scripts/gpu-check.sh part
# "path"), with the package gpu-check's build exposes (FATTN_LIBRARY and python/ on PYTHONPATH) or
# the torch part installed. FLA (fla-core, pure Python on Triton)
# comes from a wheel the dev machine downloaded into .whl/ (the GPU machine has no network):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl fla-core==0.6.0
# Steps, each under a slice of one deadline (GPU_CHECK_PATH_BUDGET, default 390 s; measured
# 2026-12-02 on the H200: pytest 116 s, the bench ~230 s):
#   1. pytest python/tests/test_path_ops.py test_path_fla.py -k "cuda or triton": the ops on CUDA
#      (opcheck, torch.compile, bitwise repeatability, the STRICT message), fattn against FLA's
#      naive_path_attn on the GPU, and fattn and FLA's Triton kernels each against it
#                                                              -> OUTDIR/pytest.log
#   2. bench/bench_path.py: fattn beside FLA's Triton kernels, one process, the issue's cases
#                                                              -> OUTDIR/bench_path.log
# Last line: a one-line summary. Exit 0 when both passed, 1 otherwise.
set -u
DEADLINE="${GPU_CHECK_PATH_BUDGET:-390}"
. "$(dirname "$0")/gpu-check-common.sh"
tests="not run"; bench="not run"; rc=1
SITE=/tmp/fattn-fla-site
if ls .whl/fla_core-*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/fla_core-*.whl >/dev/null 2>&1
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! (cd /tmp && "$PY" -c "import fattn.path, fla.ops.path_attn.naive" >/dev/null 2>&1); then
    echo "gpu-check-path: pytest not run | bench not run | needs the installed fattn (part torch) and .whl/fla_core"
    exit 1
fi
# pytest leaves the bench 240 s where the budget has them, but takes 130 s at least where 250 are
# left (on a fresh machine FLA's Triton kernels autotune inside it: it ran out of 97 s on an H100
# on 2026-12-06, and passed in 63 s once they were cached); a short budget: 20 s at least
pt=$(( $(left) - 240 ))
[ "$pt" -lt 130 ] && [ "$(left)" -ge 250 ] && pt=130
[ "$pt" -lt 20 ] && pt=20
echo "== pytest (limit ${pt}s)"
(cd /tmp && PYTHONUNBUFFERED=1 timeout -k 5 "$pt" "$PY" -m pytest -q -rs -p no:cacheprovider \
    -k "cuda or triton" "$ROOT/python/tests/test_path_ops.py" "$ROOT/python/tests/test_path_fla.py") >"$OUT/pytest.log" 2>&1
prc=$?
tests="$(grep -E '[0-9]+ (passed|failed|error)' "$OUT/pytest.log" | tail -n 1 | sed 's/=//g;s/^ *//;s/ *$//')"
[ $prc -eq 124 ] && tests="TIMEOUT ${tests}"
grep -E '^(FAILED|ERROR)' "$OUT/pytest.log" | head -n 10
echo "== bench_path (limit $(( $(left) - 5 ))s)"
(cd /tmp && PYTHONUNBUFFERED=1 timeout -k 5 $(( $(left) - 5 )) "$PY" "$ROOT/bench/bench_path.py" --reps 10) >"$OUT/bench_path.log" 2>&1
brc=$?
cat "$OUT/bench_path.log"
[ $brc -eq 0 ] && bench="OK ($(grep -c ' ratio ' "$OUT/bench_path.log") cases beside FLA)" || bench="FAIL rc $brc"
[ $prc -eq 0 ] && [ $brc -eq 0 ] && rc=0
echo "gpu-check-path: pytest ${tests:-no result} | bench ${bench} | $(( $(date +%s) - T0 )) s"
exit $rc
