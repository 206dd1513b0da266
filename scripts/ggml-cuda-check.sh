#!/usr/bin/env bash
# ggml-cuda-check.sh OUTDIR — the ggml integration on a CUDA machine: builds integrations/ggml
# with FATTN_GGML_CUDA (ggml's CUDA backend, patch 0003, the op's CUDA path) and runs the
# reference trainer on the CUDA backend. The GPU machine has no network: the patched ggml tree
# travels as .carry/ggml-tree.tgz, made on the dev machine with
#   integrations/ggml/fetch-ggml.sh /tmp/ggml-src && tar -czf .carry/ggml-tree.tgz -C /tmp/ggml-src ggml
# (about 3.5 MB; .carry is git-ignored: name it among the paths carried to the GPU machine).
# Steps, each logged to OUTDIR (a deadline GGML_CHECK_BUDGET, default 540 s, shared):
#   1. configure + build fattn-ggml-train and fattn-ggml-test (-j16)      -> build.log
#   2. fattn-ggml-test all (CPU: the op against ggml's chain and float64)  -> test.log
#   3. trainer, CUDA: start-up checks (every fattn node on CUDA0, the resolved precision, the
#      CPU self-test), then exact vs flash paired, same batches, at d 512, 8 heads (D 64),
#      4 layers, B 4, S 1024 and 2048                                      -> compare_S*.log
#   4. trainer, CUDA: the longest S of each arm in an 8 GiB step budget (the memory model), then
#      a few steps of each arm at its own longest S, with the device memory it held
#                                                                          -> budget.log, at_*.log
# Last line: a one-line summary. Exit 0 when every step ran and passed its own check.
set -u
DEADLINE="${GGML_CHECK_BUDGET:-540}"
. "$(dirname "$0")/gpu-check-common.sh"
J="${JOBS:-16}"
status="build not run"
fail() {
    echo "ggml-cuda-check: $status | FAIL: $1"
    exit 1
}
[ -f .carry/ggml-tree.tgz ] || fail "no .carry/ggml-tree.tgz (see the header)"
SRC=/tmp/fattn-ggml-src
rm -rf "$SRC" && mkdir -p "$SRC" && tar -xzf .carry/ggml-tree.tgz -C "$SRC" || fail "cannot unpack the ggml tree"
B=build-ggml-cuda
echo "== build (limit $(left)s)"
( cmake -S integrations/ggml -B "$B" -DCMAKE_BUILD_TYPE=Release -DFATTN_GGML_DIR="$SRC/ggml" \
      -DFATTN_GGML_CUDA=ON -DFATTN_GGML_CUDA_ARCHS=90a &&
  timeout -k 5 $(( $(left) - 200 )) cmake --build "$B" -j"$J" --target fattn-ggml-train fattn-ggml-test ) \
    >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; fail "build (build.log)"; }
status="build OK in $(elapsed)s"
TRAIN="$B/trainer/fattn-ggml-train"
echo "== fattn-ggml-test all (CPU)"
timeout -k 5 120 "$B/fattn-ggml-test" all >"$OUT/test.log" 2>&1
trc=$?
status="$status | tests $(grep -c '\] ok$' "$OUT/test.log") ok, $(grep -c 'FAILED$' "$OUT/test.log") failed"
[ $trc -eq 0 ] || fail "fattn-ggml-test (test.log)"
MODEL=(--dim 512 --heads 8 --layers 4 --batch 4 --threads 16)
echo "== paired exact vs flash on CUDA (limit $(left)s)"
for S in 1024 2048; do
    timeout -k 5 $(( ($(left) - 60) / 3 )) "$TRAIN" --backend cuda --attn flash --compare on --steps 30 \
        --log-every 10 --seq "$S" "${MODEL[@]}" >"$OUT/compare_S$S.log" 2>&1
    rc=$?
    grep -E "fattn on|attention:|self-test|paired|device memory" "$OUT/compare_S$S.log"
    [ $rc -eq 0 ] || fail "compare S $S rc $rc (compare_S$S.log)"
    status="$status | S$S $(grep -o 'exact [0-9.]*, flash [0-9.]* ([0-9.]*x)' "$OUT/compare_S$S.log")"
done
echo "== longest S in an 8 GiB step budget (limit $(left)s)"
timeout -k 5 60 "$TRAIN" --backend cuda --attn flash --self-test off --steps 0 --mem-budget 8192 \
    "${MODEL[@]}" >"$OUT/budget.log" 2>&1 || fail "budget (budget.log)"
line=$(grep "memory budget" "$OUT/budget.log")
echo "$line"
se=$(echo "$line" | sed -n 's/.*exact \([0-9]*\) .*/\1/p')
sf=$(echo "$line" | sed -n 's/.*flash \([0-9]*\) (predicted.*/\1/p')
status="$status | budget 8 GiB: exact S $se, flash S $sf"
for arm in exact flash; do
    S=$([ $arm = exact ] && echo "$se" || echo "$sf")
    [ -n "$S" ] && [ "$S" -gt 0 ] || fail "no S for $arm (budget.log)"
    timeout -k 5 $(( $(left) - 5 )) "$TRAIN" --backend cuda --attn $arm --self-test off --steps 3 --log-every 1 \
        --seq "$S" "${MODEL[@]}" >"$OUT/at_$arm.log" 2>&1
    rc=$?
    grep -E "step +3|compute buffer|device memory" "$OUT/at_$arm.log"
    [ $rc -eq 0 ] || fail "$arm at S $S rc $rc (at_$arm.log)"
    status="$status | $arm at S $S: $(grep -o 'held by the run after its steps: [0-9.]* MiB' "$OUT/at_$arm.log" | grep -o '[0-9.]* MiB')"
done
echo "ggml-cuda-check: $status | $(elapsed)s"
