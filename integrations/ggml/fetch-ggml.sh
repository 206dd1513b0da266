#!/usr/bin/env bash
# fetch-ggml.sh DIR — put the pinned ggml, patched for fattn_ggml, in DIR/ggml.
#
# ggml comes from a registry package: the source distribution of llama-cpp-python 0.3.36 on PyPI
# (it vendors llama.cpp, ggml under vendor/llama.cpp/ggml; ggml 0.25.3). The sdist's sha256 is
# pinned below and checked before anything is unpacked. Then patches/*.patch are applied (the
# custom-op backward hook). Prints the ggml directory to pass as -DFATTN_GGML_DIR.
#
#   integrations/ggml/fetch-ggml.sh /tmp/ggml-src
#   cmake -S integrations/ggml -B build-ggml -DFATTN_GGML_DIR=/tmp/ggml-src/ggml
#
# Idempotent: a DIR/ggml made by this script with the same sdist and patches is left as is.
# FATTN_GGML_SDIST=path/to/llama_cpp_python-0.3.36.tar.gz uses a copy already downloaded (a CI
# cache); it is checked against the same sha256.
set -euo pipefail

PKG=llama-cpp-python
VERSION=0.3.36
SDIST=llama_cpp_python-${VERSION}.tar.gz
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
INNER=llama_cpp_python-${VERSION}/vendor/llama.cpp/ggml

if [ $# -ne 1 ]; then
  echo "usage: $0 DIR   (ggml is unpacked into DIR/ggml)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dest=$(cd "$1" && pwd)
dl="$dest/dl"
out="$dest/ggml"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# The stamp records what made DIR/ggml: the sdist hash and the hash of every patch.
stamp_text() {
  echo "sdist $SHA256"
  for p in "$here"/patches/*.patch; do echo "patch $(basename "$p") $(sha_of "$p")"; done
}
if [ -f "$out/.fattn-ggml-stamp" ] && [ "$(cat "$out/.fattn-ggml-stamp")" = "$(stamp_text)" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$dl"
tarball="$dl/$SDIST"
if [ -n "${FATTN_GGML_SDIST:-}" ]; then
  cp "$FATTN_GGML_SDIST" "$tarball"
elif [ ! -f "$tarball" ] || [ "$(sha_of "$tarball")" != "$SHA256" ]; then
  rm -f "$tarball"
  python3 -m pip download --disable-pip-version-check --no-deps --no-binary :all: \
    "$PKG==$VERSION" -d "$dl" >&2
fi
got=$(sha_of "$tarball")
if [ "$got" != "$SHA256" ]; then
  echo "$0: $tarball has sha256 $got, expected $SHA256" >&2
  exit 1
fi

rm -rf "$out" "$out.tmp"
mkdir -p "$out.tmp"
tar -xzf "$tarball" -C "$out.tmp" --strip-components=3 "$INNER"
for p in "$here"/patches/*.patch; do
  patch -d "$out.tmp/ggml" -p1 --forward --batch --quiet -i "$p" >&2
done
mv "$out.tmp/ggml" "$out"
rmdir "$out.tmp"
stamp_text > "$out/.fattn-ggml-stamp"
echo "$out"
