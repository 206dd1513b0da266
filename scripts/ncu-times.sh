#!/usr/bin/env bash
# ncu-times.sh [fattn-bench path options] — the duration of each PaTH kernel of the first fwd + bwd
# at the card's own clocks (Nsight Compute, one metric: one pass per kernel), one line each.
FB=${BUILD_DIR:-build-gpu}/fattn-bench
ncu --clock-control none --metrics gpu__time_duration.sum -k regex:path_kernel --launch-count "${NCU_LAUNCHES:-12}" --csv \
    "$FB" path --backend cuda --reps 1 --check none "$@" 2>/dev/null |
    awk -F'","' '/gpu__time_duration/ { n = $5; sub(/.*<K/, "K", n); sub(/<.*/, "", n); sub(/"$/, "", $NF); printf "%-10s %9s %s\n", n, $NF, $(NF-1) }'
