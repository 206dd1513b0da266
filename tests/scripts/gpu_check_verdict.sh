#!/usr/bin/env bash
# gpu_check_verdict.sh SOURCE_DIR — scripts/gpu-check.sh's verdict for the torch step's exit status,
# without a GPU: a copy of scripts/ whose gpu-check-torch.sh is a stub exiting with a given status,
# run as `gpu-check.sh nobuild torch`. 0 must read PASS / ALL PASS; 3 (pytest passed, a later part
# failed or timed out) PARTIAL / INCOMPLETE, never ALL PASS (a run of 2026-12-02 printed ALL PASS over a
# timed-out bench_host and example); 1 FAIL / FAILURES. Then gpu-check-torch.sh's own exit status,
# which library the torch part is handed (gpu-check's shared build, a given one, or none), and the
# budgets the torch and path parts are handed, and the slice the path part gives its pytest.
set -u
SRC=${1:?usage: gpu_check_verdict.sh SOURCE_DIR}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/scripts"
cp "$SRC/scripts/gpu-check.sh" "$W/scripts/"
cat > "$W/scripts/gpu-check-torch.sh" <<'STUB'
#!/usr/bin/env bash
echo "gpu-check-torch: stub | exit ${STUB_RC}"
exit "${STUB_RC}"
STUB
fails=0
expect() {  # expect RC STEP_WORD VERDICT_WORD
    local out
    out=$(cd "$W" && STUB_RC=$1 OUT="$W/out$1" GPU_CHECK_BUDGET=120 bash scripts/gpu-check.sh nobuild torch 2>&1)
    local step verdict
    step=$(grep -E '^torch +' <<< "$out" | awk '{print $2}')
    verdict=$(grep -E '^gpu-check: ' <<< "$out" | tail -n1 | awk '{print $2}')
    if [ "$step" = "$2" ] && [ "$verdict" = "$3" ]; then
        echo "ok: torch step rc $1 -> $step, verdict $verdict"
    else
        echo "FAIL: torch step rc $1 -> '$step', verdict '$verdict' (want $2, $3)"
        fails=1
    fi
}
expect 0 PASS ALL
expect 3 PARTIAL INCOMPLETE
expect 1 FAIL FAILURES

# scripts/gpu-check-torch.sh's own exit status, with a stub python (every part passes except the
# one HOST_RC / EXAMPLE_RC names) and a given FATTN_LIBRARY (no build): 0 only when all passed,
# 3 when pytest passed and bench_host or the example did not.
T=$(mktemp -d)
trap 'rm -rf "$W" "$T"' EXIT
mkdir -p "$T/scripts"
cp "$SRC/scripts/gpu-check-torch.sh" "$SRC/scripts/gpu-check-common.sh" "$T/scripts/"
: > "$T/libfattn.so"
cat > "$T/python" <<'PY'
#!/usr/bin/env bash
case "$*" in
  *pytest*) echo "3 passed in 0.10s" ;;
  *bench_sdpa.py*) echo "bench_sdpa: 1/1 arm-cases ran (fattn: 1), 1 s" ;;
  *bench_host.py*) exit "${HOST_RC:-0}" ;;
  *train_tiny_gpt.py*) echo "max |loss(fattn) - loss(sdpa)| over 40 steps: 0.0001"; exit "${EXAMPLE_RC:-0}" ;;
esac
exit 0
PY
chmod +x "$T/python"
torch_rc() {  # torch_rc HOST_RC EXAMPLE_RC WANT
    (cd "$T" && HOST_RC=$1 EXAMPLE_RC=$2 PYTHON="$T/python" FATTN_LIBRARY="$T/libfattn.so" \
        GPU_CHECK_TORCH_BUDGET=60 bash scripts/gpu-check-torch.sh "$T/out" > "$T/log" 2>&1)
    local rc=$?
    if [ "$rc" = "$3" ]; then
        echo "ok: gpu-check-torch.sh with bench_host rc $1, example rc $2 -> exit $rc"
    else
        echo "FAIL: gpu-check-torch.sh with bench_host rc $1, example rc $2 -> exit $rc (want $3): $(tail -n1 "$T/log")"
        fails=1
    fi
}
torch_rc 0 0 0
torch_rc 124 0 3
torch_rc 0 124 3

# The torch part loads gpu-check's shared build where it holds the library and the compiled ops
# (with the shim's stamp): FATTN_LIBRARY names it and python/ is on PYTHONPATH; with no shim there
# (or a FATTN_LIBRARY given) it is left alone, and the torch part builds with pip.
cat > "$W/scripts/gpu-check-torch.sh" <<'STUB'
#!/usr/bin/env bash
echo "lib=${FATTN_LIBRARY:-none} pypath=${PYTHONPATH:-none}"
STUB
lib_seen() {  # lib_seen WANT_LIB WANT_PYPATH [ENV...]: the FATTN_LIBRARY / PYTHONPATH the torch part saw
    local line
    line=$(cd "$W" && env -u FATTN_LIBRARY -u PYTHONPATH "${@:3}" OUT="$W/outlib" GPU_CHECK_BUDGET=120 \
        bash scripts/gpu-check.sh nobuild torch 2>&1 | grep -oE 'lib=[^ ]* pypath=[^ ]*' | tail -n1)
    if [ "$line" = "lib=$1 pypath=$2" ]; then
        echo "ok: the torch part saw $line"
    else
        echo "FAIL: the torch part saw '$line' (want lib=$1 pypath=$2)"
        fails=1
    fi
}
mkdir -p "$W/build-gpu/python/csrc"
: > "$W/build-gpu/libfattn.so"
: > "$W/build-gpu/python/csrc/libfattn_torch.so"
lib_seen none none                                    # no stamp: not a complete shim build
echo "2.11.0" > "$W/build-gpu/python/csrc/fattn_torch.txt"
lib_seen "$W/build-gpu/libfattn.so" "$W/python"
lib_seen /x/libfattn.so none FATTN_LIBRARY=/x/libfattn.so

# The path part's pytest slice (gpu-check-path.sh, with a stub python that passes everything): the
# bench's 240 s out of a large budget, at least 130 s where 250 are left (on 2026-12-06 a fresh
# machine's pytest ran out of the 116 s that 356 left it: FLA's Triton kernels autotune inside
# it), 20 s of a short budget.
mkdir -p "$W/pathck/scripts" "$W/pathck/bin"
cp "$SRC/scripts/gpu-check-path.sh" "$SRC/scripts/gpu-check-common.sh" "$W/pathck/scripts/"
printf '#!/usr/bin/env bash\nexit 0\n' > "$W/pathck/bin/python3"
chmod +x "$W/pathck/bin/python3"
for want in 600:360 356:130 200:20; do
    limit=$(cd /tmp && PYTHON="$W/pathck/bin/python3" GPU_CHECK_PATH_BUDGET=${want%%:*} \
        bash "$W/pathck/scripts/gpu-check-path.sh" "$W/pathck/out" 2>&1 | grep -oE 'pytest \(limit [0-9]+s\)' | grep -oE '[0-9]+')
    # (a second may pass between the start and the split: one less is the same plan)
    if [ "$limit" = "${want#*:}" ] || [ "$limit" = "$(( ${want#*:} - 1 ))" ]; then
        echo "ok: a ${want%%:*} s path part gives its pytest $limit s"
    else
        echo "FAIL: a ${want%%:*} s path part gives its pytest '${limit}' s (want ${want#*:})"
        fails=1
    fi
done

# The torch and path parts are told the slice gpu-check gives them (GPU_CHECK_TORCH_BUDGET,
# GPU_CHECK_PATH_BUDGET), not left to their own defaults (330, 390 s): on 2026-12-06 the path part,
# given 205 s, planned for 390 and its bench was cut off after three cases.
for part in torch path; do
    var=GPU_CHECK_$(tr a-z A-Z <<< "$part")_BUDGET
    # (the summary line gpu-check records: the torch part's last line, the path part's "gpu-check-path:" one)
    printf '#!/usr/bin/env bash\necho "gpu-check-%s: budget=${%s:-unset}"\n' "$part" "$var" > "$W/scripts/gpu-check-$part.sh"
    seen=$(cd "$W" && env -u "$var" OUT="$W/outb$part" GPU_CHECK_BUDGET=120 bash scripts/gpu-check.sh nobuild "$part" 2>&1 |
        grep -oE 'budget=[^ ]*' | tail -n1)
    b=${seen#budget=}
    if [[ "$b" =~ ^[0-9]+$ ]] && [ "$b" -le 110 ] && [ "$b" -ge 60 ]; then
        echo "ok: the $part part was given $b s of a 120 s budget"
    else
        echo "FAIL: the $part part saw '$seen' (want its slice of a 120 s budget, 60-110 s)"
        fails=1
    fi
done
exit $fails
