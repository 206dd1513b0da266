#!/usr/bin/env bash
# shim_skipped_builds.sh SRC BUILDDIR — configure fattn with the torch shim requested but a Python
# that cannot import torch (as pip's isolated build does), then build the fattn_torch target, as
# pip's build.targets does: it must succeed (doing nothing). The old target echoed
# "fattn_torch: skipped (no torch)", a shell syntax error in the generated build.
set -eu
SRC=$1
B=$2
rm -rf "$B"
cmake -S "$SRC" -B "$B" -DFATTN_CUDA=OFF -DFATTN_BUILD_TESTS=OFF -DFATTN_BUILD_TOOLS=OFF \
    -DFATTN_TORCH_SHIM=ON -DPython_EXECUTABLE=/bin/false >"$B.configure.log" 2>&1 \
    || { cat "$B.configure.log"; exit 1; }
grep -q "torch is not importable" "$B.configure.log" || { echo "the skip was not reported"; exit 1; }
cmake --build "$B" --target fattn_torch
echo "fattn_torch (skipped) builds"
