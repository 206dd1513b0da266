#!/usr/bin/env bash
# gpu-check.sh — the one command for the GPU machine (issue 3): build for sm_90a with all cores,
# CUDA parity (all cases incl. --extra --large), determinism, compute-sanitizer memcheck and
# racecheck on a small subset, the CUDA benchmarks, the PyTorch checks when
# scripts/gpu-check-torch.sh exists, and the PaTH checks beside FLA (scripts/gpu-check-path.sh). Run from the repository root; results go to ${OUT:-out}:
# build.log, parity.log (test + determinism), sanitize.log, bench.log, bench.csv, torch.log,
# torch-out.tar.gz, summary.txt (8 files: few enough to copy back from the GPU machine), and a short summary table printed LAST.
#
#   scripts/gpu-check.sh                      # everything
#   scripts/gpu-check.sh parity bench         # only these parts (build runs unless "nobuild")
#   parts: build parity determinism sanitize bench torch path   (+ nobuild)
#   and, named only: ggml (scripts/ggml-cuda-check.sh: the ggml integration on ggml's CUDA
#   backend; its own build, needs .carry/ggml-tree.tgz):
#   GPU_CHECK_BUDGET=580 scripts/gpu-check.sh nobuild ggml
#   unit (scripts/gpu-check-unit.sh: the GoogleTest suite with its CUDA tests, in the build folder
#   with the tests on; needs .carry/googletest.tgz): scripts/gpu-check.sh nobuild unit
# Everything does not fit one 10-minute run on the GPU machine: run it as four, back to back (each finds
# the previous one's build; measured on an H100, 2026-12-05: build 173 s, parity + large +
# determinism ~115 s, racecheck ~125-250 s; 2026-12-02: 158 s for torch, ~350 s for path). The build
# is shared, with the compiled torch ops where torch is importable, and the torch and path parts
# load it (FATTN_LIBRARY) rather than build the package again with pip (167 s of the torch part on
# the H100, 2026-12-05); without that build the torch part installs the package with pip:
#   GPU_CHECK_BUDGET=420 scripts/gpu-check.sh build parity determinism bench
#   GPU_CHECK_BUDGET=330 scripts/gpu-check.sh nobuild sanitize
#   scripts/gpu-check.sh nobuild torch
#   GPU_CHECK_BUDGET=580 scripts/gpu-check.sh nobuild path
#
# Never hangs: every step runs under `timeout`, capped by a global budget (GPU_CHECK_BUDGET
# seconds, default 580, so one 10-minute run on the GPU machine holds it), and the summary is printed
# whatever fails. Environment knobs: BENCH_PRESETS (default "hotstep-sites:40 targets:110
# hotstep:40", preset:seconds), TORCH_RESERVE (340 s kept for the torch step),
# BENCH_REPS (10), BENCH_ARMS (fused,portable,exact,cudnn), SAN_FILTER (fattn-test -p regex for the
# sanitizers; default: the quick subset plus the D128 sm90 padding-mask cases).
# The cudnn-frontend headers for the cuDNN SDPA arm come from .carry/cudnn-frontend/include
# (scripts/fetch-peer-headers.sh on the dev machine); cuDNN itself from the nvidia-cudnn wheel.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD_DIR:-build-gpu}
BUDGET=${GPU_CHECK_BUDGET:-580}
T0=$(date +%s)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
FAILED=0
INCOMPLETE=0

parts="$*"
[ -z "$parts" ] && parts="build parity determinism sanitize bench torch path"
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
if ! want nobuild && ! want build; then parts="build $parts"; fi

elapsed() { echo $(( $(date +%s) - T0 )); }
# Seconds a step may take: its cap, or what is left of the budget (minus a reserve for the summary).
slice() {
    local cap=$1 left=$(( BUDGET - $(elapsed) - 10 - ${RESERVE:-0} ))
    [ "$left" -lt "$cap" ] && cap=$left
    echo "$cap"
}
# record NAME STATUS SECONDS DETAIL
record() { printf '%-12s %-8s %5ss  %s\n' "$1" "$2" "$3" "$4" >>"$SUMMARY"; }

# run_step NAME CAP LOG CMD... : runs CMD under timeout, appends to LOG; sets STEP_RC/STEP_S.
run_step() {
    local name=$1 cap=$2 log=$3
    shift 3
    local t
    t=$(slice "$cap")
    if [ "$t" -lt 15 ]; then
        STEP_RC=125  # not run: reported SKIP, and the verdict says INCOMPLETE
        INCOMPLETE=1
        STEP_S=0
        echo "[$name] skipped: out of time budget" | tee -a "$log"
        return
    fi
    echo "== [$name] (limit ${t}s) $*" | tee -a "$log"
    local s0=$(date +%s)
    timeout -k 10 "$t" "$@" >>"$log" 2>&1
    STEP_RC=$?
    STEP_S=$(( $(date +%s) - s0 ))
    echo "== [$name] rc=$STEP_RC in ${STEP_S}s" | tee -a "$log"
}

# The verdict line of a fattn-test log ("N passed, N failed[, N skipped]").
test_line() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" 2>/dev/null | tail -n1; }
status_of() { # rc -> word
    case "$1" in 0) echo PASS ;; 3) echo PARTIAL ;; 124|137) echo TIMEOUT ;; 125) echo SKIP ;; *) echo FAIL ;; esac
}

echo "gpu-check: parts [$parts], budget ${BUDGET}s, out $OUT" | tee "$OUT/build.log"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -n1; git log --oneline -1 2>/dev/null; } | tee -a "$OUT/build.log"

# ---------------------------------------------------------------- build
CUDNN_ARGS=()
CUDNN_LIB=""
if [ -f .carry/cudnn-frontend/include/cudnn_frontend.h ]; then
    CUDNN_ROOT=$(python3 -c "import nvidia.cudnn as c; print(list(c.__path__)[0])" 2>/dev/null || true)
    CUDNN_ARGS=(-DFATTN_CUDNN_FRONTEND_DIR="$ROOT/.carry/cudnn-frontend/include")
    if [ -n "$CUDNN_ROOT" ] && [ -d "$CUDNN_ROOT/include" ]; then
        CUDNN_ARGS+=(-DFATTN_CUDNN_DIR="$CUDNN_ROOT")
        CUDNN_LIB="$CUDNN_ROOT/lib"
    fi
fi
[ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH="$CUDNN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
GEN=()
command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/Makefile" ] && GEN=(-G Ninja)
# Shared, with the compiled torch ops (python/csrc) where torch is importable: the torch and path
# parts load this build (see the header). GPU_CHECK_CUDA=OFF builds without CUDA (a check of the
# build and torch parts on a machine without a GPU; the CUDA parts then have nothing to run).
if want build; then
    SHARED_ARGS=(-DBUILD_SHARED_LIBS=ON -DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON)
    TOOLS="fattn-test fattn-bench"
    if python3 -c "import torch" >/dev/null 2>&1; then
        SHARED_ARGS+=(-DFATTN_TORCH_SHIM=ON)
        TOOLS="$TOOLS fattn_torch"
    fi
    # `timeout` runs programs, not shell functions: configure and each tool are separate steps,
    # so one tool that fails to build does not stop the other.
    run_step configure 120 "$OUT/build.log" cmake -S . -B "$BUILD" "${GEN[@]}" \
        -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA="${GPU_CHECK_CUDA:-ON}" -DFATTN_CUDA_ARCHS=90a -DFATTN_BUILD_TESTS=OFF \
        "${SHARED_ARGS[@]}" "${CUDNN_ARGS[@]}"
    b_rc=$STEP_RC
    b_s=$STEP_S
    if [ "$b_rc" -eq 0 ]; then
        for tool in $TOOLS; do
            run_step "build:$tool" 300 "$OUT/build.log" cmake --build "$BUILD" -j "$(nproc)" --target "$tool"
            [ "$STEP_RC" -ne 0 ] && b_rc=$STEP_RC
            b_s=$(( b_s + STEP_S ))
        done
    fi
    cudnn_state=$(grep -o 'cuDNN SDPA arm [A-Z]*' "$OUT/build.log" | tail -n1)
    record build "$(status_of $b_rc)" "$b_s" "sm_90a, -j$(nproc)${cudnn_state:+, $cudnn_state}"
    [ "$b_rc" -ne 0 ] && FAILED=1 && grep -E 'error|Error' "$OUT/build.log" | head -n 20
fi
FT="$BUILD/fattn-test"
FB="$BUILD/fattn-bench"

# ---------------------------------------------------------------- parity
if want parity; then
    if [ -x "$FT" ]; then
        # Family AUTO: the sm90 kernels (wgmma/TMA) wherever they apply on this device.
        run_step parity 120 "$OUT/parity.log" "$FT" test --backend cuda --extra
        record parity "$(status_of $STEP_RC)" "$STEP_S" "$(test_line "$OUT/parity.log")"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
        # The portable family (mma.sync) too: on a Hopper GPU AUTO no longer runs it for bf16/f16.
        n0=$(wc -l <"$OUT/parity.log")
        run_step portable 90 "$OUT/parity.log" "$FT" test --backend cuda --family portable --algo fused
        pv=$(tail -n +"$((n0 + 1))" "$OUT/parity.log" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n1)
        record portable "$(status_of $STEP_RC)" "$STEP_S" "${pv:-no verdict line}"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
        # The --large cases (S >= 16k, a tensor over 2^31 elements) in a step of their own, so a
        # slow host-side setup cannot take the main parity verdict down with it.
        n0=$(wc -l <"$OUT/parity.log")
        run_step large 180 "$OUT/parity.log" "$FT" test --backend cuda --large -p large
        # Its own verdict only (a timed-out run prints none: never show parity's line for it).
        lv=$(tail -n +"$((n0 + 1))" "$OUT/parity.log" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n1)
        lok=$(tail -n +"$((n0 + 1))" "$OUT/parity.log" | grep -c '^  OK ')
        record large "$(status_of $STEP_RC)" "$STEP_S" "${lv:-no verdict line; $lok cases OK before the stop}"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    else
        record parity FAIL 0 "no $FT"; FAILED=1
    fi
fi

# ---------------------------------------------------------------- determinism
if want determinism; then
    if [ -x "$FT" ]; then
        run_step determinism 60 "$OUT/parity.log" "$FT" determinism --backend cuda
        record determinism "$(status_of $STEP_RC)" "$STEP_S" "$(test_line "$OUT/parity.log")"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    else
        record determinism FAIL 0 "no $FT"; FAILED=1
    fi
fi

# ---------------------------------------------------------------- sanitizers (small subset)
if want sanitize; then
    # The quick subset (bf16/f16 D64 cases run the sm90 kernels under AUTO) plus D128 sm90 cases.
    SAN_SEL=(-p "${SAN_FILTER:-^(plain_s1|plain_s17|plain_d40|f16_s97|bf16_s97|cross_sq17_skv97|causal_tl_s97|causal_br_sq97_skv40|window_16_16_tl|window_d256_f16_cross|bias_dense|bias_keypad|bias_rowcol|gqa_4_2_b2|varlen_basic|varlen_empty_len1|fused_qkv|bhsd|pad_fltmax|pad_1e9|pad_inf|lpad_fltmax_causal_tl|pad_1e9_bf16_rand|pad_bf16_min|path/dense_T97_gqa_K16_V32_gate_f32|path/dense_T513_gqa_K32_V16_f32|path/varlen_gqa_K64_f16|path/dense_T640_K128_gate_bf16|path/varlen_K100_V72_f16)\$}")
    # Limits: memcheck ran the subset in ~2 s, racecheck in 60-65 s (H200, 2026-12-02); on
    # 2026-12-04 racecheck of the subset passed 150 s, and of the 8 PaTH cases alone took 110 s.
    for tool in memcheck:60 racecheck:300; do
        lim=${tool#*:}; tool=${tool%%:*}
        log="$OUT/sanitize.log"
        if [ -x "$FT" ] && command -v compute-sanitizer >/dev/null 2>&1; then
            from=1  # this tool's lines only
            [ -f "$log" ] && from=$(( $(wc -l <"$log") + 1 ))
            run_step "$tool" "$lim" "$log" compute-sanitizer --tool "$tool" --error-exitcode 99 \
                "$FT" test --backend cuda "${SAN_SEL[@]}"
            tail -n +"$from" "$log" >"$OUT/.san-part"
            errs=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/.san-part" | tail -n1)
            record "$tool" "$(status_of $STEP_RC)" "$STEP_S" "${errs:-no summary} | $(test_line "$OUT/.san-part")"
            [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
        else
            record "$tool" FAIL 0 "no $FT or no compute-sanitizer"; FAILED=1
        fi
    done
    rm -f "$OUT/.san-part"
fi

# ---------------------------------------------------------------- benchmarks
if want bench; then
    : >"$OUT/bench.log"
    rm -f "$OUT/bench.csv"
    # The torch step keeps its slice: the bench presets share what is left before it.
    RESERVE=0
    want torch && [ -f scripts/gpu-check-torch.sh ] && RESERVE=${TORCH_RESERVE:-340}
    for entry in ${BENCH_PRESETS:-hotstep-sites:35 targets:100 hotstep:40}; do
        preset=${entry%%:*}
        cap=${entry#*:}
        [ "$cap" = "$entry" ] && cap=120
        if [ ! -x "$FB" ]; then record "bench" FAIL 0 "no $FB"; FAILED=1; break; fi
        run_step "bench:$preset" "$cap" "$OUT/bench.log" "$FB" --backend cuda --preset "$preset" \
            --arms "${BENCH_ARMS:-fused,portable,exact,cudnn}" --reps "${BENCH_REPS:-10}" --csv "$OUT/bench-$preset.csv"
        if [ -f "$OUT/bench-$preset.csv" ]; then  # one CSV comes back (the device returns 8 files)
            if [ -f "$OUT/bench.csv" ]; then tail -n +2 "$OUT/bench-$preset.csv" >>"$OUT/bench.csv"
            else cp "$OUT/bench-$preset.csv" "$OUT/bench.csv"; fi
            rm -f "$OUT/bench-$preset.csv"
        fi
        line=$(grep -E '^fattn-bench: ' "$OUT/bench.log" | tail -n1)
        record "bench" "$(status_of $STEP_RC)" "$STEP_S" "$preset: ${line:-no verdict line}"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    done
    # PaTH: both history layouts, one process (the history bytes, the workspace, its high-water).
    if [ -x "$FB" ]; then
        run_step "bench:path" 40 "$OUT/bench.log" "$FB" path --backend cuda --T 4096 --hq 32 --h 32 --reps 5 --check none
        record "bench" "$(status_of $STEP_RC)" "$STEP_S" "path: $(grep -E '^packed ' "$OUT/bench.log" | tail -n1 | tr -s ' ')"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    fi
    RESERVE=0
fi

# The torch and path parts load this build's library and compiled ops where both are there (the
# shim's stamp names the torch it was built for; _ops.py checks it), unless FATTN_LIBRARY is set.
if [ -z "${FATTN_LIBRARY:-}" ] && [ -f "$BUILD/libfattn.so" ] && [ -f "$BUILD/python/csrc/libfattn_torch.so" ] &&
    [ -f "$BUILD/python/csrc/fattn_torch.txt" ]; then
    case "$BUILD" in /*) FATTN_LIBRARY="$BUILD/libfattn.so" ;; *) FATTN_LIBRARY="$ROOT/$BUILD/libfattn.so" ;; esac
    export FATTN_LIBRARY
    export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
fi

# ---------------------------------------------------------------- PyTorch binding (engineer "torch")
if want torch; then
    if [ -f scripts/gpu-check-torch.sh ]; then
        mkdir -p "$OUT/torch"
        # the part plans its own steps within the slice it is given (10 s kept for its summary)
        run_step torch 340 "$OUT/torch.log" env GPU_CHECK_TORCH_BUDGET=$(( $(slice 340) - 10 )) \
            bash scripts/gpu-check-torch.sh "$OUT/torch"
        last=$(grep -v '^== \[torch\]' "$OUT/torch.log" | grep -v '^\s*$' | tail -n1)
        record torch "$(status_of $STEP_RC)" "$STEP_S" "$last"
        # 3: pytest passed, a later part (bench, host cost, example) failed or ran out of time.
        [ "$STEP_RC" -eq 3 ] && INCOMPLETE=1
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 3 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
        # Few files come back from the GPU machine: fold the torch outputs into one archive.
        if [ -n "$(ls -A "$OUT/torch" 2>/dev/null)" ]; then
            tar -czf "$OUT/torch-out.tar.gz" -C "$OUT" torch && rm -rf "$OUT/torch"
        else
            rmdir "$OUT/torch" 2>/dev/null
        fi
    else
        record torch SKIP 0 "scripts/gpu-check-torch.sh not present"
    fi
fi

# ---------------------------------------------------------------- PaTH beside FLA (after torch)
if want path; then
    if [ -f scripts/gpu-check-path.sh ]; then
        mkdir -p "$OUT/path"
        run_step path 560 "$OUT/path.log" env GPU_CHECK_PATH_BUDGET=$(( $(slice 560) - 10 )) \
            bash scripts/gpu-check-path.sh "$OUT/path"
        record path "$(status_of $STEP_RC)" "$STEP_S" "$(grep '^gpu-check-path:' "$OUT/path.log" | tail -n1 | cut -c17-)"
        [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
        [ -f "$OUT/path/bench_path.log" ] && cp "$OUT/path/bench_path.log" "$OUT/bench_path.log"
        rm -rf "$OUT/path"
    fi
fi

# ---------------------------------------------------------------- the GoogleTest suite (named only)
if want unit; then
    mkdir -p "$OUT/unit"
    run_step unit 420 "$OUT/unit-run.log" env UNIT_BUDGET=$(( $(slice 420) - 15 )) BUILD_DIR="$BUILD" \
        bash scripts/gpu-check-unit.sh "$OUT/unit"
    record unit "$(status_of $STEP_RC)" "$STEP_S" "$(grep '^gpu-check-unit:' "$OUT/unit-run.log" | tail -n1 | cut -c17-)"
    [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    tar -czf "$OUT/unit-out.tar.gz" -C "$OUT" unit 2>/dev/null
    rm -rf "$OUT/unit"
fi

# ---------------------------------------------------------------- ggml's CUDA backend (named only)
if want ggml; then
    mkdir -p "$OUT/ggml"
    run_step ggml 570 "$OUT/ggml.log" env GGML_CHECK_BUDGET=$(( $(slice 570) - 15 )) bash scripts/ggml-cuda-check.sh "$OUT/ggml"
    record ggml "$(status_of $STEP_RC)" "$STEP_S" "$(grep '^ggml-cuda-check:' "$OUT/ggml.log" | tail -n1 | cut -c18-)"
    [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 125 ] && FAILED=1
    tar -czf "$OUT/ggml-out.tar.gz" -C "$OUT" ggml 2>/dev/null
    rm -rf "$OUT/ggml"
fi

# ---------------------------------------------------------------- summary (printed last)
if [ -f "$OUT/bench.log" ]; then
    echo
    echo "---- bench summaries (full tables in bench.log / bench.csv)"
    awk '/^== summary/{p=1} /^fattn-bench: [0-9]+ cases/{p=0} p' "$OUT/bench.log"
fi
echo
echo "==== gpu-check summary ($(elapsed)s of ${BUDGET}s budget; logs in $OUT)"
printf '%-12s %-8s %6s  %s\n' step status time detail
cat "$SUMMARY"
if [ "$FAILED" -ne 0 ]; then echo "gpu-check: FAILURES (see logs)"
elif [ "$INCOMPLETE" -ne 0 ]; then echo "gpu-check: INCOMPLETE (steps skipped, or PARTIAL, for time; nothing failed)"
else echo "gpu-check: ALL PASS"; fi
[ "$FAILED" -ne 0 ] && exit 1
[ "$INCOMPLETE" -ne 0 ] && exit 3
exit 0
