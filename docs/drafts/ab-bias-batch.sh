#!/usr/bin/env bash
# ab-bias-batch.sh — one device call: main (A) against main + sm90-bias-batch.patch (B).
# Run from the repository root on the GPU machine (the `run` tool; ~250 s):
#   bash docs/drafts/ab-bias-batch.sh
# B gets the correctness steps (parity with the bias cases, determinism, memcheck and racecheck on
# the bias cases); both get the benches whose rows the patch should move (the band-bias rows) or
# must not move (the no-bias rows, for the changed register allocation), alternated A, B, A, B.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
SRC=$(pwd)
rm -rf /tmp/srcB && mkdir -p /tmp/srcB && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/srcB
(cd /tmp/srcB && git init -q . 2>/dev/null; git apply docs/drafts/sm90-bias-batch.patch) || { echo "patch does not apply"; exit 1; }
cfg() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA_ARCHS=90a -DFATTN_BUILD_TESTS=OFF > "$O/cfg-$3.log" 2>&1; }
cfg "$SRC" /tmp/bA A && cfg /tmp/srcB /tmp/bB B
(cmake --build /tmp/bA -j8 --target fattn-bench > "$O/build-A.log" 2>&1; echo "A rc=$?" > "$O/builtA") &
cmake --build /tmp/bB -j8 --target fattn-test fattn-bench > "$O/build-B.log" 2>&1 || { grep -m20 error "$O/build-B.log"; exit 1; }
wait; cat "$O/builtA"; grep -h "spill" "$O"/build-*.log | sort | uniq -c | sort -rn | head -20 > "$O/spills.txt"
el built
FT=/tmp/bB/fattn-test
timeout 150 $FT test --backend cuda --extra > "$O/parity.log" 2>&1; echo "parity rc=$?"; grep -E "^[0-9]+ passed" "$O/parity.log" | tail -1; grep FAIL "$O/parity.log" | head
timeout 90 $FT determinism --backend cuda > "$O/det.log" 2>&1; echo "det rc=$?"; grep -E "^[0-9]+ passed" "$O/det.log" | tail -1
timeout 120 $FT test --backend cuda --large -p "window_bias" > "$O/large.log" 2>&1; echo "large rc=$?"; grep -E "^[0-9]+ passed" "$O/large.log" | tail -1
SAN='^(bias_dense|bias_keypad|bias_rowcol|bias_f32_on_bf16|gqa_bf16_bias|varlen_bias|pad_fltmax|pad_fltmax_d128_s300|pad_1e9_bf16_rand|extra_b4_s512_bias_gqa)$'
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $FT test --backend cuda --extra -p "$SAN" > "$O/memcheck.log" 2>&1; echo "memcheck rc=$?"; grep -E "^[0-9]+ passed|ERROR SUMMARY" "$O/memcheck.log" | tail -2
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $FT test --backend cuda -p "^(bias_dense|bias_keypad|pad_fltmax_d128_s300)$" > "$O/racecheck.log" 2>&1; echo "racecheck rc=$?"; grep -E "^[0-9]+ passed|RACECHECK SUMMARY" "$O/racecheck.log" | tail -2
el tests
for r in 1 2; do for v in A B; do
  timeout 60 /tmp/b$v/fattn-bench --backend cuda --preset hotstep-sites --arms fused,portable --reps 10 > "$O/sites-$v$r.txt" 2>&1
  timeout 90 /tmp/b$v/fattn-bench --backend cuda --preset targets --arms fused,cudnn --reps 10 > "$O/targets-$v$r.txt" 2>&1
  echo "== $v$r"; grep -E "^\| " "$O/sites-$v$r.txt" "$O/targets-$v$r.txt" | grep -v "^.*| case" | cut -d'|' -f2,4 | head -24
done; done
el done
