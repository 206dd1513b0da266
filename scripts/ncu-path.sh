#!/usr/bin/env bash
# ncu-path.sh OUTDIR NAME [fattn-bench path options] — Nsight Compute on the first fwd + bwd of the
# PaTH CUDA kernels (`fattn-bench path --backend cuda --reps 1 --check none ...`), written as text
# so a machine without Nsight Compute can read it (the library is built with -lineinfo):
#   OUTDIR/NAME-details.txt   the run's output, then per kernel: speed of light, occupancy,
#                             scheduler and warp-state sections and their rule notes
#   OUTDIR/NAME-stalls.csv    per kernel: time at the card's clocks, registers, issued IPC and the
#                             average warp stall cycles per issued instruction, by reason
#   OUTDIR/NAME-sass.csv.gz   (NCU_SASS=1) every profiled kernel's SASS with per-instruction
#                             metrics (the source page; a kernel filter on the import printed
#                             nothing on 2026-12-04)
# Needs BUILD_DIR (default build-gpu) with fattn-bench built. NCU_SET (default "full") picks the
# section set.
set -u
OUT=${1:?usage: scripts/ncu-path.sh OUTDIR NAME [fattn-bench path options]}
NAME=${2:?usage: scripts/ncu-path.sh OUTDIR NAME [fattn-bench path options]}
shift 2
FB=${BUILD_DIR:-build-gpu}/fattn-bench
REP=/tmp/ncu-$NAME
# fwd: prep, fwd; bwd: prep, seg-prep, delta, hist, dkv, seg-inter, seg-intra, own, (group sum), chain-A, chain-B
N=${NCU_LAUNCHES:-12}
ncu --clock-control none --import-source yes --set "${NCU_SET:-full}" -k regex:path_kernel --launch-count "$N" -f -o "$REP" \
    "$FB" path --backend cuda --reps 1 --check none "$@" >"$OUT/$NAME-details.txt" 2>&1
ncu -i "$REP.ncu-rep" --page details >>"$OUT/$NAME-details.txt" 2>&1
ncu -i "$REP.ncu-rep" --page raw --csv --metrics \
    'gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,sm__inst_executed.avg.per_cycle_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    >"$OUT/$NAME-stalls.csv" 2>&1
if [ -n "${NCU_SASS:-}" ]; then
    ncu -i "$REP.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip -c >"$OUT/$NAME-sass.csv.gz"
fi
