#!/usr/bin/env bash
# attn-ab.sh OUTDIR NAME=CMAKE_ARGS ... — A/B of softmax-attention CUDA kernel variants on the GPU
# machine (the switches of src/cuda/attn/tiles.h, e.g. FATTN_SM90_RING64; CMake's FATTN_SM90_D256): each
# variant's fattn-bench and fattn-test are built into build-ab-NAME (ab-common.sh), its parity and
# determinism run (`fattn-test test|determinism --backend cuda`, AB_FILTER: a -p regex), then the
# presets (AB_PRESETS, default "targets-bf16") are timed alternating over the variants, two rounds
# (`fattn-bench --backend cuda --preset P --arms fused --reps 10`). Writes OUTDIR/ab-attn.txt (the
# fused rows of every round), OUTDIR/ab-attn-parity.txt and OUTDIR/logs-attn.tgz. E.g.
#   scripts/attn-ab.sh $OUT base= r3=-DCMAKE_CUDA_FLAGS=-DFATTN_SM90_RING64=3 pp=-DCMAKE_CUDA_FLAGS=-DFATTN_SM90_PINGPONG=1
#   AB_PRESETS="" AB_SHAPES="2,4096,4096,16,16,256" scripts/attn-ab.sh $OUT base= \
#       portable=-DFATTN_SM90_D256=OFF
#   scripts/attn-ab.sh $OUT base= "dqf=-DCMAKE_CUDA_FLAGS=-DFATTN_SM90_DQ_FUSED=1 -DCMAKE_CXX_FLAGS=-DFATTN_SM90_DQ_FUSED=1" \
#       "dqu=-DCMAKE_CUDA_FLAGS=-DFATTN_SM90_DQ_FUSED=2 -DCMAKE_CXX_FLAGS=-DFATTN_SM90_DQ_FUSED=2"
# (a variant's flags are split at spaces; a ^ inside one stands for a space: ab-common.sh)
# AB_SHAPES: fattn-bench --shape values (B,Sq,Skv,Hq,Hkv,D) timed beside the presets, in AB_DTYPE
# (bf16; f32 runs prec TF32, e.g. AB_DTYPE=f32 AB_SHAPES="2,4096,4096,16,16,96" for FATTN_SM90_TF32_PAD).
# AB_PARITY=0: time only (no fattn-test build, ~40% of a variant's build time, no parity run, no
# ab-attn-parity.txt): for a first look at several variants in one GPU run; a variant to be kept
# gets its parity run after.
set -u
OUT=${1:?usage: scripts/attn-ab.sh OUTDIR NAME=CMAKE_ARGS ...}
shift
LOGS=$OUT/logs-attn
mkdir -p "$LOGS"
. "$(dirname "$0")/ab-common.sh"
names=()
want_parity() { [ "${AB_PARITY:-1}" != 0 ]; }
if want_parity; then ab_build_all "fattn-bench fattn-test" "$@"; else ab_build_all fattn-bench "$@"; fi
want_parity && for n in "${names[@]}"; do
    for mode in test determinism; do
        # shellcheck disable=SC2086
        build-ab-$n/fattn-test $mode --backend cuda ${AB_FILTER:+-p "$AB_FILTER"} >"$LOGS/parity-$n-$mode.log" 2>&1
        echo "$n $mode (rc $?): $(grep -E '[0-9]+ passed' "$LOGS/parity-$n-$mode.log" | tail -n 1)"
    done
done | tee "$OUT/ab-attn-parity.txt"
for round in 1 2; do
    for n in "${names[@]}"; do
        for pr in ${AB_PRESETS-targets-bf16}; do
            echo "## round $round $n preset $pr"
            build-ab-$n/fattn-bench --backend cuda --preset "$pr" --arms fused --reps 10 2>&1 | grep -E 'fused|^case|^[A-Za-z].*:'
        done
        for sh in ${AB_SHAPES:-}; do
            echo "## round $round $n shape $sh"
            build-ab-$n/fattn-bench --backend cuda --shape "$sh" --dtype "${AB_DTYPE:-bf16}" --arms fused --reps 10 2>&1 | grep -E 'fused'
        done
    done
done | tee "$OUT/ab-attn.txt"
tar czf "$OUT/logs-attn.tgz" -C "$OUT" logs-attn && rm -rf "$LOGS"
