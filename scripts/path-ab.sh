#!/usr/bin/env bash
# path-ab.sh OUTDIR NAME=CMAKE_ARGS ... — A/B of PaTH CUDA kernel variants on the GPU machine: each
# variant's fattn-bench is built into build-ab-NAME (sm_90a, all cores), then the issue's cases run
# alternated over the variants (two rounds: `fattn-bench path --backend cuda --gate 0 --reps 10
# --check none` + the case's options), then the per-kernel times of each variant at T4096 H32 D64
# and T4096 H16 D128 (scripts/ncu-times.sh). A variant's CMAKE_ARGS are passed to cmake split at spaces (a ^ inside one
# stands for a space: ab-common.sh),
# e.g.
#   scripts/path-ab.sh $OUT base= s32=-DFATTN_PATH_SCORE16=OFF "permk=-DCMAKE_CUDA_FLAGS=-DFATTN_PATH_TF32_PERMK=1" \
#       "noflags=-DCMAKE_CUDA_FLAGS=-DFATTN_PATH_TF32_FLAGS=0"
# AB_CASES (indices into the six cases below, e.g. "0 4") and AB_NCU ("64", "128" or "64 128", the
# per-kernel times' head dims; " " for none) narrow the run. AB_PARITY=1 also builds each variant's
# fattn-test and runs the PaTH parity and determinism cases (`fattn-test test|determinism
# --backend cuda -p path`) before timing it (the emulation's verdict on the variant is the
# CPU's; this is the GPU's). Writes OUTDIR/ab.txt (the table), OUTDIR/ab-parity.txt (with AB_PARITY),
# OUTDIR/ab-times.txt and OUTDIR/logs.tgz; the variants build at once (ab-common.sh: ab_build_all), ~90-100 s for four with 16 cores.
set -u
OUT=${1:?usage: scripts/path-ab.sh OUTDIR NAME=CMAKE_ARGS ...}
shift
# the build and parity logs go to OUTDIR/logs.tgz at the end (few files to copy back)
LOGS=$OUT/logs
mkdir -p "$LOGS"
. "$(dirname "$0")/ab-common.sh"
names=()
ab_build_all "fattn-bench${AB_PARITY:+ fattn-test}" "$@"
cases=("--T 4096 --hq 32 --h 32" "--T 8192 --hq 32 --h 32" "--T 4096 --hq 32 --h 8"
       "--cu 0,512,2048,4096,8192 --hq 32 --h 32" "--T 4096 --hq 16 --h 16 --k 128 --v 128"
       "--T 4096 --hq 32 --h 32 --dtype f32")
if [ -n "${AB_CASES:-}" ]; then
    sel=()
    for i in $AB_CASES; do sel+=("${cases[$i]}"); done
    cases=("${sel[@]}")
fi
ncu_cases=()
for d in ${AB_NCU:-64 128}; do
    if [ "$d" = 64 ]; then ncu_cases+=("--T 4096 --hq 32 --h 32"); else ncu_cases+=("--T 4096 --hq 16 --h 16 --k 128 --v 128"); fi
done
if [ -n "${AB_PARITY:-}" ]; then
    for n in "${names[@]}"; do
        for mode in test determinism; do
            build-ab-$n/fattn-test $mode --backend cuda -p path >"$LOGS/parity-$n-$mode.log" 2>&1
            echo "$n $mode (rc $?): $(grep -E '[0-9]+ passed' "$LOGS/parity-$n-$mode.log" | tail -n 1)"
            grep -E '^ *(FAIL|ERROR)' "$LOGS/parity-$n-$mode.log" | head -n 5
        done
    done | tee "$OUT/ab-parity.txt"
fi
{
    printf '%-44s' "case (fwd / fwd+bwd ms)"
    for n in "${names[@]}"; do printf ' %22s' "$n"; done
    echo
    for round in 1 2; do
        for c in "${cases[@]}"; do
            printf '%-44s' "$c"
            for n in "${names[@]}"; do
                # shellcheck disable=SC2086
                r=$(build-ab-$n/fattn-bench path --backend cuda --gate 0 --reps 10 --check none $c 2>&1 | awk '/^packed/ {print $2 " / " $3}')
                printf ' %22s' "${r:-error}"
            done
            echo
        done
    done
} | tee "$OUT/ab.txt"
for n in "${names[@]}"; do
    for c in "${ncu_cases[@]}"; do
        echo "## $n $c"
        # shellcheck disable=SC2086
        BUILD_DIR=build-ab-$n bash scripts/ncu-times.sh --gate 0 $c
    done
done >"$OUT/ab-times.txt" 2>&1
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
echo "per-kernel times: $OUT/ab-times.txt; build and parity logs: $OUT/logs.tgz"
