#!/usr/bin/env bash
# ncu-path.sh OUTDIR NAME [fattn-bench path options] — Nsight Compute on the first fwd + bwd of the
# PaTH CUDA kernels (`fattn-bench path --backend cuda --reps 1 --check none ...`): the full section
# set with source correlation (the library is built with -lineinfo), written as text so a machine
# without Nsight Compute can read it:
#   OUTDIR/NAME-details.txt   the run's output, then per kernel: speed of light, occupancy, warp states, top stall lines
#   OUTDIR/NAME-source.csv.gz per kernel and CUDA source line: instructions, stall samples
#   OUTDIR/NAME-time.txt      per kernel duration at the card's own clocks
# Needs BUILD_DIR (default build-gpu) with fattn-bench built.
set -u
OUT=${1:?usage: scripts/ncu-path.sh OUTDIR NAME [fattn-bench path options]}
NAME=${2:?usage: scripts/ncu-path.sh OUTDIR NAME [fattn-bench path options]}
shift 2
FB=${BUILD_DIR:-build-gpu}/fattn-bench
REP=/tmp/ncu-$NAME
# fwd: prep, fwd; bwd: prep, seg-prep, delta, hist, dkv, seg-inter, seg-intra, own, (group sum), chain-A, chain-B
N=${NCU_LAUNCHES:-12}
ncu --clock-control none --import-source yes --set full -k regex:path_kernel --launch-count "$N" -f -o "$REP" \
    "$FB" path --backend cuda --reps 1 --check none "$@" >"$OUT/$NAME-details.txt" 2>&1
ncu -i "$REP.ncu-rep" --page details >>"$OUT/$NAME-details.txt" 2>&1
ncu -i "$REP.ncu-rep" --page source --csv --print-source cuda 2>&1 | gzip -c >"$OUT/$NAME-source.csv.gz"
ncu -i "$REP.ncu-rep" --page raw --csv --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    >"$OUT/$NAME-time.txt" 2>&1
