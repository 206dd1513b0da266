# ab-common.sh — sourced by the A/B scripts (path-ab.sh, attn-ab.sh): ab_build builds one variant
# NAME=CMAKE_ARGS into build-ab-NAME (sm_90a, Release, all cores; the targets named after it),
# logs into $LOGS/build-NAME.log, and appends NAME to the array `names` when it built. CMAKE_ARGS
# is split at spaces; a ^ inside an argument stands for a space, so one CMAKE_CUDA_FLAGS can carry
# several definitions: "old=-DCMAKE_CUDA_FLAGS=-DFATTN_PATH_LOAD_OVERLAP=0^-DFATTN_PATH_FWD_SPLIT=0"
# (commas pass through: nvcc and CMake use them). ab_build_all TARGETS VARIANT... builds every variant
# at once (each build's long pole is one translation unit, so concurrent builds overlap: four
# builds, one with fattn-test, in 94 s on the 16-core GPU machine, 2026-12-06, where one takes ~90; AB_SERIAL=1
# builds one after another) and fills `names` in the order given.
export PATH=/usr/local/cuda/bin:$PATH
AB_GEN=()
command -v ninja >/dev/null 2>&1 && AB_GEN=(-G Ninja)
ab_build() {
    local v=$1 name args dir t0 w
    local -a cargs=()
    shift
    name=${v%%=*}
    args=${v#*=}
    # shellcheck disable=SC2086
    for w in $args; do cargs+=("${w//^/ }"); done
    dir=build-ab-$name
    t0=$(date +%s)
    if cmake -S . -B "$dir" "${AB_GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA=ON -DFATTN_CUDA_ARCHS=90a \
        -DFATTN_BUILD_TESTS=OFF "${cargs[@]}" >"$LOGS/build-$name.log" 2>&1 &&
        cmake --build "$dir" -j "$(nproc)" --target "$@" >>"$LOGS/build-$name.log" 2>&1; then
        names+=("$name")
        echo "built $name ($args) in $(( $(date +%s) - t0 )) s"
    else
        echo "build of $name FAILED:"; tail -n 15 "$LOGS/build-$name.log"
    fi
}
ab_build_all() {
    local targets=$1 v n i=0
    shift
    if [ "${AB_SERIAL:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        for v in "$@"; do ab_build "$v" $targets; done
        return
    fi
    local -a pids=()
    for v in "$@"; do
        # shellcheck disable=SC2086
        ( names=(); ab_build "$v" $targets >"$LOGS/.status-$i"; printf '%s\n' "${names[@]}" >"$LOGS/.names-$i" ) &
        pids+=($!)
        i=$((i + 1))
    done
    wait "${pids[@]}"
    for ((i = 0; i < $#; i++)); do
        cat "$LOGS/.status-$i"
        while read -r n; do [ -n "$n" ] && names+=("$n"); done <"$LOGS/.names-$i"
        rm -f "$LOGS/.status-$i" "$LOGS/.names-$i"
    done
}
