#!/usr/bin/env bash
# fetch-peer-headers.sh — bring the header-only cudnn-frontend (PyPI package nvidia-cudnn-frontend)
# into the git-ignored .carry/cudnn-frontend/include, for the cuDNN SDPA arm of fattn-bench.
#
# Run on the dev machine (the GPU machine has no network). scripts/gpu-check.sh picks the headers up
# from .carry/ when present; copy .carry/ to the GPU machine with the tree.
#   scripts/fetch-peer-headers.sh [VERSION]     (default: the newest on PyPI)
set -euo pipefail
cd "$(dirname "$0")/.."
ver="${1:-}"
spec="nvidia-cudnn-frontend${ver:+==$ver}"
dest=.carry/cudnn-frontend
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel is per-platform only because of its Python module; the headers inside are the same.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$tmp" "$spec"
whl=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl | head -n1)
rm -rf "$dest"
mkdir -p "$dest"
unzip -q "$whl" 'include/*' -d "$dest"
basename "$whl" >"$dest/SOURCE"
test -f "$dest/include/cudnn_frontend.h"
echo "cudnn-frontend headers: $dest/include ($(cat "$dest/SOURCE"), $(du -sh "$dest/include" | cut -f1))"
