#!/usr/bin/env bash
# ab-sm90-drafts.sh — one device call (~450 s): main (A) against main + sm90-bias-batch.patch (B),
# main + sm90-dkdv-pingpong.patch (C) and main + both (D). Run from the repository root on the GPU
# machine (the `run` tool):   bash docs/drafts/ab-sm90-drafts.sh
# B, C, D get parity and determinism; B memcheck on the bias cases; D racecheck and synccheck (the
# ping-pong's named barriers). Then each variant's benches, alternated A B C D, twice: the rows the
# patches should move (band bias, bf16/f32 dK/dV) and the ones they must not.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
SRC=$(pwd)
tree() {  # tree DIR PATCH...: a copy of the working tree with the patches applied
    rm -rf "$1" && mkdir -p "$1" && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$1"
    local d=$1; shift
    for pt in "$@"; do (cd "$d" && git apply "$SRC/docs/drafts/$pt") || { echo "$pt does not apply"; exit 1; }; done
}
tree /tmp/srcB sm90-bias-batch.patch
tree /tmp/srcC sm90-dkdv-pingpong.patch
tree /tmp/srcD sm90-bias-batch.patch sm90-dkdv-pingpong.patch
cfg() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA_ARCHS=90a -DFATTN_BUILD_TESTS=OFF > "$O/cfg-$3.log" 2>&1; }
cfg "$SRC" /tmp/bA A; cfg /tmp/srcB /tmp/bB B; cfg /tmp/srcC /tmp/bC C; cfg /tmp/srcD /tmp/bD D
for v in A B C D; do
    tg="fattn-bench"; [ $v != A ] && tg="fattn-test fattn-bench"
    (cmake --build /tmp/b$v -j4 --target $tg > "$O/build-$v.log" 2>&1; echo "$v rc=$?" > "$O/built$v") &
done
wait; cat "$O"/built?
for v in A B C D; do echo "$v: $(grep -c spill "$O/build-$v.log") spill warnings"; grep "dkdv_kernel.*spill" "$O/build-$v.log" | sed 's/.*dkdv_kernelI\([^E]*\)E.*,\(.*\)/  dkdv \1:\2/' ; done
el built
for v in B C D; do
    FT=/tmp/b$v/fattn-test
    timeout 60 $FT test --backend cuda --extra > "$O/parity-$v.log" 2>&1; echo "$v parity rc=$? $(grep -E '^[0-9]+ passed' "$O/parity-$v.log" | tail -1)"; grep FAIL "$O/parity-$v.log" | head -5
    timeout 30 $FT determinism --backend cuda > "$O/det-$v.log" 2>&1; echo "$v det rc=$? $(grep -E '^[0-9]+ passed' "$O/det-$v.log" | tail -1)"
done
SAN='^(bias_dense|bias_keypad|bias_rowcol|bias_f32_on_bf16|gqa_bf16_bias|varlen_bias|pad_fltmax|pad_fltmax_d128_s300|pad_1e9_bf16_rand|extra_b4_s512_bias_gqa)$'
timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/bB/fattn-test test --backend cuda --extra -p "$SAN" > "$O/memcheck-B.log" 2>&1; echo "B memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck-B.log" | tail -1)"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/bD/fattn-test test --backend cuda -p "^(plain_s97|plain_d128|bias_dense|varlen_basic|gqa_4_2_b2|bf16_s97)$" > "$O/racecheck-D.log" 2>&1; echo "D racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$O/racecheck-D.log" | tail -1)"
timeout 60 compute-sanitizer --tool synccheck --error-exitcode 9 /tmp/bD/fattn-test test --backend cuda -p "^(plain_s97|plain_d128|bf16_s97|varlen_empty_len1)$" > "$O/synccheck-D.log" 2>&1; echo "D synccheck rc=$? $(grep -E 'ERROR SUMMARY' "$O/synccheck-D.log" | tail -1)"
el tests
bench() {  # bench V R: the rows, fwd+bwd ms of the fused arm
    local b=/tmp/b$1/fattn-bench f="$O/bench-$1$2.txt"
    : > "$f"
    timeout 30 $b --backend cuda --preset hotstep-sites --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 4,4096,4096,16,16,128 --dtype bf16 --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 4,4096,4096,32,32,64 --dtype bf16 --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 2,4096,4096,16,16,128 --dtype f32 --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 2,4096,4096,16,16,64 --dtype f32 --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 1,4096,4096,16,16,128 --dtype bf16 --band 256 --arms fused --reps 10 >> "$f" 2>&1
    timeout 15 $b --backend cuda --shape 1,4096,4096,16,16,128 --dtype f32 --band 256 --arms fused --reps 10 >> "$f" 2>&1
    echo "== $1$2: $(grep -E '^  fused' "$f" | awk '{print $4}' | tr '\n' ' ')"
}
echo "rows: sites (S625 windowed, full, cross; S1250 the same; S3000 the same), bf16 D128 B4 H16, bf16 D64 B4 H32, f32 D128 B2 H16, f32 D64 B2 H16, bf16 band 256, f32 band 256 (S4096)"
for r in 1 2; do for v in A B C D; do bench $v $r; done; done
el done
