#!/usr/bin/env bash
# gpu-check-unit.sh OUTDIR — the GoogleTest suite (fattn-unit) on the GPU machine, where its CUDA
# tests run instead of skipping (a CUDA context's rules, the fused bias gradient on CUDA, the PaTH
# API on a CUDA context, the memory model against a device, ...). The GPU machine has no GoogleTest
# and no network: its source travels as .carry/googletest.tgz, made on the dev machine with
#   tar -czf .carry/googletest.tgz -C /usr/src googletest      (Debian's googletest, ~1 MB)
# Steps (a deadline unit_BUDGET, default 400 s, shared), logged to OUTDIR:
#   1. GoogleTest built and installed into build-gtest/inst (-jN)            -> gtest.log
#   2. the build folder (BUILD_DIR, default build-gpu: its library objects are reused) configured
#      with the tests and GoogleTest, fattn-unit built                      -> build.log
#   3. fattn-unit, every test; the CUDA ones must run, not skip              -> unit.log
# Last line: a one-line summary. Exit 0 when every test passed and none of the CUDA tests skipped.
set -u
DEADLINE="${UNIT_BUDGET:-400}"
. "$(dirname "$0")/gpu-check-common.sh"
J="${JOBS:-$(nproc 2>/dev/null || echo 16)}"
BUILD="${BUILD_DIR:-build-gpu}"
export PATH="/usr/local/cuda/bin:$PATH"
fail() {
    echo "gpu-check-unit: FAIL: $1 ($(elapsed) s)"
    exit 1
}
[ -f .carry/googletest.tgz ] || fail "no .carry/googletest.tgz (see the header)"
GT="$ROOT/build-gtest"
echo "== googletest (limit $(left)s)"
( rm -rf "$GT" && mkdir -p "$GT" && tar -xzf .carry/googletest.tgz -C "$GT" &&
  cmake -S "$GT/googletest" -B "$GT/b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$GT/inst" &&
  timeout -k 5 "$(left)" cmake --build "$GT/b" -j"$J" && cmake --install "$GT/b" ) >"$OUT/gtest.log" 2>&1 ||
    { tail -n 20 "$OUT/gtest.log"; fail "googletest (gtest.log)"; }
echo "== fattn-unit (limit $(left)s)"
GEN=()
command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/Makefile" ] && [ ! -f "$BUILD/build.ninja" ] && GEN=(-G Ninja)
( cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA=ON -DFATTN_CUDA_ARCHS=90a \
      -DFATTN_BUILD_TESTS=ON -DCMAKE_PREFIX_PATH="$GT/inst" &&
  timeout -k 5 "$(left)" cmake --build "$BUILD" -j"$J" --target fattn-unit ) >"$OUT/build.log" 2>&1 ||
    { grep -E 'error|Error' "$OUT/build.log" | head -n 20; fail "fattn-unit build (build.log)"; }
UNIT="$BUILD/tests/fattn-unit"
[ -x "$UNIT" ] || fail "no $UNIT after the build"
echo "== fattn-unit (limit $(left)s)"
timeout -k 5 "$(left)" "$UNIT" >"$OUT/unit.log" 2>&1
rc=$?
passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$OUT/unit.log" | grep -oE '[0-9]+$')
failed=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$OUT/unit.log" | grep -oE '[0-9]+' | head -n1)
# A CUDA test that skipped here ("no CUDA device", "no CUDA backend/device") did not see the
# device: as bad as a failure. (Api.CudaContextWithoutCudaOrDevice skips where a device is: fine.)
skips=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUT/unit.log" | grep -oE '[0-9]+' | head -n1)
cuda_skips=$(grep -cE 'no CUDA (device|backend)' "$OUT/unit.log")
line="fattn-unit ${passed:-0} passed, ${failed:-0} failed, ${skips:-0} skipped ($cuda_skips for want of the device), rc $rc"
if [ "$rc" -ne 0 ] || [ "$cuda_skips" -ne 0 ]; then
    grep -E '^\[  (FAILED|SKIPPED) \]' "$OUT/unit.log" | head -n 20
    fail "$line"
fi
echo "gpu-check-unit: PASS: $line ($(elapsed) s)"
