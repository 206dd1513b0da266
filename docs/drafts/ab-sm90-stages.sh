#!/usr/bin/env bash
# ab-sm90-stages.sh [VARIANT...] — one device call: the sm90 kernels' ring depths, A/B.
#
# Run from the repository root on the GPU machine (the `run` tool, carry [".carry"] not needed):
#   bash docs/drafts/ab-sm90-stages.sh            # all variants below, ~450 s
#   bash docs/drafts/ab-sm90-stages.sh A K FQK    # a subset
# Why: every sm90 kernel has run with 2-deep rings (K/V in the forward and dQ, Q/dO rows in dK/dV)
# since session 3, and at 16-bit D64 they use a third of the shared memory (fwd 81 KB, dQ 97 KB,
# dK/dV 67 KB). ncu of session 10: the bf16 D64 dK/dV kernel runs 3.88 ms at ~32% of SM and memory
# throughput (latency-bound), ~3.5x its tensor-core bound; deeper rings hide more load latency.
# tiles.h's sm90_{fwd,dq,dkdv}_stages(d, es) are the only knobs; shared memory and the mbarrier
# area follow them (sm90_bar_bytes). One build directory, rebuilt per variant: tiles.h keeps its
# mtime (the portable kernels do not read the stages) and fwd.cu, bwd.cu, select.cpp recompile.
# Each variant: parity + determinism; FQK also racecheck and synccheck; then the benches
# (fwd+bwd ms of the fused arm), A repeated last as a drift check.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
B=/tmp/bstages; TH=src/cuda/attn/tiles.h
# variant -> "fwd_expr|dq_expr|dkdv_expr" (C++ bodies of the three functions of (d, es))
declare -A V=(
  [A]="2|2|2"
  [F]="es == 2 ? (d > 64 ? 3 : 4) : 2|2|2"
  [Q]="2|es == 2 ? 4 : 2|2"
  [K]="2|2|es == 2 ? 4 : 2"
  [FQK]="es == 2 ? (d > 64 ? 3 : 4) : 2|es == 2 ? 4 : 2|es == 2 ? 4 : 2"
  [T]="2|es == 4 \&\& d == 64 ? 3 : 2|es == 4 \&\& d == 64 ? 4 : 2"
)
LIST=${*:-A F Q K FQK T}
cp -p $TH /tmp/tiles.orig
set_stages() {  # set_stages "f|q|k"
    local f q k; IFS='|' read -r f q k <<< "$1"
    cp -p /tmp/tiles.orig $TH
    sed -i "s|constexpr int sm90_fwd_stages(int /\*d\*/, size_t /\*es\*/) { return 2; }|constexpr int sm90_fwd_stages([[maybe_unused]] int d, [[maybe_unused]] size_t es) { return $f; }|" $TH
    sed -i "s|constexpr int sm90_dq_stages(int /\*d\*/, size_t /\*es\*/) { return 2; }|constexpr int sm90_dq_stages([[maybe_unused]] int d, [[maybe_unused]] size_t es) { return $q; }|" $TH
    sed -i "s|constexpr int sm90_dkdv_stages(int /\*d\*/, size_t /\*es\*/) { return 2; }|constexpr int sm90_dkdv_stages([[maybe_unused]] int d, [[maybe_unused]] size_t es) { return $k; }|" $TH
    [ "$(grep -c 'maybe_unused' $TH)" = 3 ] || { echo "tiles.h: the stage functions did not match"; return 1; }
    touch -r /tmp/tiles.orig $TH
    touch src/cuda/attn/sm90/fwd.cu src/cuda/attn/sm90/bwd.cu src/cuda/attn/select.cpp
}
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA_ARCHS=90a -DFATTN_BUILD_TESTS=OFF > "$O/cfg.log" 2>&1
for v in $LIST; do
    set_stages "${V[$v]}" || exit 1
    cmake --build $B -j16 --target fattn-test fattn-bench > "$O/build-$v.log" 2>&1; rc=$?
    mkdir -p /tmp/bin$v; cp $B/fattn-test $B/fattn-bench /tmp/bin$v/
    echo "$v [${V[$v]}] build rc=$rc, $(grep -c 'Building' "$O/build-$v.log") TUs"; el "built $v"
done
cp -p /tmp/tiles.orig $TH
# Where the bf16 D64 backward waits (stall reasons per kernel), main's build (before the tests, so it always runs).
if [ -x /tmp/binA/fattn-bench ]; then
    timeout 90 ncu --clock-control none -k regex:"sm90_dkdv|sm90_dq" -c 2 --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats /tmp/binA/fattn-bench --backend cuda --shape 4,4096,4096,32,32,64 --dtype bf16 --arms fused \
        --reps 1 --warmup 0 > "$O/ncu-bf16-d64-bwd.txt" 2>&1; echo "ncu rc=$?"
    grep -iE "^  [a-z_].*sm90|Duration|Throughput|Issue Slots|Eligible|Warp Cycles Per Issued|stall" "$O/ncu-bf16-d64-bwd.txt" | head -60
fi
el ncu
for v in $LIST; do
    [ $v = A ] && continue
    FT=/tmp/bin$v/fattn-test
    timeout 60 $FT test --backend cuda --extra > "$O/parity-$v.log" 2>&1; echo "$v parity rc=$? $(grep -E '^[0-9]+ passed' "$O/parity-$v.log" | tail -1)"; grep FAIL "$O/parity-$v.log" | head -5
    timeout 30 $FT determinism --backend cuda > "$O/det-$v.log" 2>&1; echo "$v det rc=$? $(grep -E '^[0-9]+ passed' "$O/det-$v.log" | tail -1)"
done
for v in FQK; do
    case " $LIST " in *" $v "*) ;; *) continue ;; esac
    timeout 80 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/bin$v/fattn-test test --backend cuda -p "^(plain_s97|plain_d128|bias_dense|varlen_basic|gqa_4_2_b2|bf16_s97)$" > "$O/racecheck-$v.log" 2>&1; echo "$v racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$O/racecheck-$v.log" | tail -1)"
    timeout 40 compute-sanitizer --tool synccheck --error-exitcode 9 /tmp/bin$v/fattn-test test --backend cuda -p "^(plain_s97|plain_d128|bf16_s97|varlen_empty_len1)$" > "$O/synccheck-$v.log" 2>&1; echo "$v synccheck rc=$? $(grep -E 'ERROR SUMMARY' "$O/synccheck-$v.log" | tail -1)"
done
el tests
bench() {  # bench V TAG
    local b=/tmp/bin$1/fattn-bench f="$O/bench-$1$2.txt"; : > "$f"
    for sh in "4,4096,4096,32,32,64 --dtype bf16" "4,4096,4096,16,16,128 --dtype bf16" "1,16384,16384,32,32,64 --dtype bf16 --causal" \
              "4,4096,4096,16,16,128 --dtype bf16 --causal" "2,4096,4096,16,16,64 --dtype f32" "2,4096,4096,16,16,128 --dtype f32" \
              "1,3000,3000,16,16,64 --dtype f32" "1,3000,3000,16,16,64 --dtype f32 --band 128"; do
        timeout 20 $b --backend cuda --shape $sh --arms fused --reps 10 >> "$f" 2>&1; done
    echo "== $1$2 f+b: $(grep -E '^  fused' "$f" | awk '{print $4}' | tr '\n' ' ')"
    echo "   $1$2 fwd: $(grep -E '^  fused' "$f" | awk '{print $3}' | tr '\n' ' ')"
}
echo "rows: bf16 D64 S4096 B4 H32, bf16 D128 S4096 B4 H16, bf16 D64 S16k causal, bf16 D128 S4096 causal, f32 D64 / D128 S4096 B2 H16, f32 D64 S3000 B1 H16, same with ±128 band"
for v in $LIST; do bench $v 1; done
case " $LIST " in *" A "*) bench A 2 ;; esac
el done
