#!/usr/bin/env bash
# ncu-stalls.sh KERNEL_REGEX [fattn-bench arguments] — where one kernel's warps wait: Nsight
# Compute on its first launch (occupancy, launch, scheduler and warp-state sections, and PC
# sampling), printing the warp-state breakdown and the SASS instructions with the most stall
# samples (with their columns of stall reasons). E.g.
#   BUILD_DIR=build-gpu scripts/ncu-stalls.sh KPrep path --backend cuda --reps 1 --check none --gate 0 --T 4096 --hq 32 --h 32
# NCU_KEEP=FILE also keeps the whole source page (every SASS line with its samples, CSV) in FILE.
FB=${BUILD_DIR:-build-gpu}/fattn-bench
K=${1:?usage: scripts/ncu-stalls.sh KERNEL_REGEX [fattn-bench arguments]}
shift
dir=$(mktemp -d)
ncu --clock-control none --kernel-name-base demangled -k "regex:$K" --launch-count 1 --section LaunchStats --section Occupancy \
    --section SchedulerStats --section WarpStateStats --section SourceCounters -o "$dir/r" "$FB" "$@" >"$dir/run.log" 2>&1
[ -f "$dir/r.ncu-rep" ] || { echo "no report:"; grep -i -E "==(PROF|WARNING|ERROR)==" "$dir/run.log" | head -n 10; tail -n 5 "$dir/run.log"; exit 1; }
ncu -i "$dir/r.ncu-rep" --page details --print-details all 2>&1 |
    grep -E 'Duration|Registers|Shared Memory Config|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit|Eligible Warps|Issued Warp|No Eligible|Active Warps|Warp Cycles Per|Stall|stall' | sed 's/^ *//' | head -n 60
ncu -i "$dir/r.ncu-rep" --page source --print-source sass --csv >"$dir/src.csv" 2>"$dir/src.err" || { echo "no source page:"; head -n 5 "$dir/src.err"; exit 0; }
[ -n "${NCU_KEEP:-}" ] && cp "$dir/src.csv" "$NCU_KEEP"
python3 - "$dir/src.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
if hdr is None:
    print("source page without sampling columns:", rows[:2]); sys.exit(0)
h = rows[hdr]
col = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c)
num = lambda s: float(s.replace(",", "") or 0) if s.replace(",", "").replace(".", "").isdigit() else 0.0
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
total = sum(num(r[col]) for r in body) or 1
reason = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
print(f"{len(body)} SASS lines, {total:.0f} stall samples; top 40:")
for r in sorted(body, key=lambda r: -num(r[col]))[:40]:
    why = ", ".join(f"{h[i]}={r[i]}" for i in reason if num(r[i]) >= 0.1 * max(num(r[col]), 1))
    print(f"{100 * num(r[col]) / total:5.1f}%  {r[0]:>6s}  {r[1][:70]:70s}  {why[:120]}")
PY
