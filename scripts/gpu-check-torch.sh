#!/usr/bin/env bash
# gpu-check-torch.sh OUTDIR — the PyTorch binding's part of the GPU-machine check.
#
# Called by scripts/gpu-check.sh on the GPU machine (python3 with torch 2.11+cu130, nvcc 13,
# no network, no pip index). Steps, each under its own timeout so the whole stays < 4 minutes
# and never hangs:
#   1. build + install the binding: pip install --no-build-isolation --no-deps ./python
#      (libfattn.so with CUDA). If FATTN_LIBRARY already names a built libfattn.so, the build is
#      skipped and that library is used; if pip fails, a plain CMake build is tried.
#   2. pytest python/tests (CUDA tests included)             -> OUTDIR/pytest.log
#   3. bench/bench_sdpa.py --quick                           -> OUTDIR/bench/{md,json,png}
#   4. examples/train_tiny_gpt.py, a few steps, three arms   -> OUTDIR/example/{png,json}
# The last line printed is always a one-line summary, also written to OUTDIR/summary.txt.
# Exit status: 0 when the build worked and pytest passed, 1 otherwise.
set -u
OUT="${1:?usage: scripts/gpu-check-torch.sh OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 8)}"
export PATH="/usr/local/cuda/bin:$PATH"
# libfattn links cuBLAS dynamically: torch's own copy is normally already loaded when fattn is
# imported; the toolkit's is the fallback.
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T0=$(date +%s)
DEADLINE="${DEADLINE_S:-230}"   # whole script, seconds
elapsed() { echo $(( $(date +%s) - T0 )); }
# budget WANT: WANT seconds, or what is left before the deadline (at least 5)
budget() { local left=$(( DEADLINE - $(elapsed) )); [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"; }

build="FAIL"; tests="not run"; bench="not run"; example="not run"; rc=1

# ------------------------------------------------------------------ 1. build
if [ -n "${FATTN_LIBRARY:-}" ] && [ -f "$FATTN_LIBRARY" ]; then
  build="OK (given FATTN_LIBRARY=$FATTN_LIBRARY)"
else
  unset FATTN_LIBRARY
  echo "== [$(elapsed)s] pip install ./python (CUDA, -j$JOBS)"
  if SKBUILD_BUILD_TOOL_ARGS="-j$JOBS" SKBUILD_BUILD_DIR="$ROOT/build-torch-gpu/pip" \
     SKBUILD_CMAKE_DEFINE="FATTN_CUDA=ON" \
     timeout -k 5 "$(budget 140)" "$PY" -m pip install --no-build-isolation --no-deps -v ./python \
       > "$OUT/build.log" 2>&1; then
    build="OK (pip)"
  else
    echo "pip install failed (tail of $OUT/build.log):"; tail -n 20 "$OUT/build.log"
    echo "== [$(elapsed)s] fallback: cmake build of libfattn.so"
    if timeout -k 5 "$(budget 140)" bash -c "cmake -S . -B build-torch-gpu/cmake -DCMAKE_BUILD_TYPE=Release \
          -DBUILD_SHARED_LIBS=ON -DFATTN_CUDA=ON -DFATTN_BUILD_TESTS=OFF -DFATTN_BUILD_TOOLS=OFF \
          -DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON && cmake --build build-torch-gpu/cmake -j$JOBS" \
          >> "$OUT/build.log" 2>&1 && [ -f build-torch-gpu/cmake/libfattn.so ]; then
      export FATTN_LIBRARY="$ROOT/build-torch-gpu/cmake/libfattn.so"
      build="OK (cmake fallback; pip failed)"
    fi
  fi
fi
echo "build: $build"

if [ "$build" != "FAIL" ]; then
  # Run from outside python/ so the installed package (or FATTN_LIBRARY) is what is tested.
  (cd /tmp && timeout -k 5 "$(budget 30)" "$PY" -c "import torch, fattn; print('fattn', fattn.version(), \
'from', fattn.library_path(), '| torch', torch.__version__, '| cuda', torch.cuda.is_available(), \
torch.cuda.get_device_name() if torch.cuda.is_available() else '')") 2>&1 | tee "$OUT/import.log"

  # ---------------------------------------------------------------- 2. pytest
  echo "== [$(elapsed)s] pytest python/tests"
  tmax=$(budget 80)
  timeout -k 5 "$tmax" "$PY" -m pytest -q -rs -p no:cacheprovider --rootdir "$ROOT/python" \
    --junitxml "$OUT/pytest.xml" "$ROOT/python/tests" > "$OUT/pytest.log" 2>&1
  prc=$?
  tests="$(grep -E '(passed|failed|error|skipped)' "$OUT/pytest.log" | tail -n 1 | sed 's/=//g;s/^ *//;s/ *$//')"
  [ $prc -eq 124 ] && tests="TIMEOUT after $tmax s: ${tests}"
  [ -z "$tests" ] && tests="no result (rc $prc)"
  tail -n 30 "$OUT/pytest.log"
  [ $prc -eq 0 ] && rc=0

  # ---------------------------------------------------------------- 3. bench
  echo "== [$(elapsed)s] bench/bench_sdpa.py --quick"
  bmax=$(budget 75)
  timeout -k 5 "$bmax" "$PY" bench/bench_sdpa.py --quick --budget-s $(( bmax > 30 ? bmax - 25 : 5 )) --out "$OUT/bench" \
    > "$OUT/bench.log" 2>&1
  brc=$?
  bench="$(grep '^bench_sdpa:' "$OUT/bench.log" | tail -n 1 | cut -c13-90)"
  [ -z "$bench" ] && bench="FAIL rc $brc (see bench.log)"
  tail -n 8 "$OUT/bench.log"

  # ---------------------------------------------------------------- 4. example
  echo "== [$(elapsed)s] examples/train_tiny_gpt.py (few steps)"
  timeout -k 5 "$(budget 45)" "$PY" examples/train_tiny_gpt.py --steps 60 --out "$OUT/example" \
    > "$OUT/example.log" 2>&1
  erc=$?
  if [ $erc -eq 0 ]; then
    example="OK $(grep -o 'max |loss(fattn) .*' "$OUT/example.log" | head -n 1)"
  else
    example="FAIL rc $erc (see example.log)"
  fi
  grep -v '^\s*\[' "$OUT/example.log" | tail -n 12
fi

summary="gpu-check-torch: build ${build} | pytest ${tests} | bench ${bench} | example ${example} | $(elapsed) s | ${OUT}"
echo "$summary" > "$OUT/summary.txt"
echo "$summary"
exit $rc
