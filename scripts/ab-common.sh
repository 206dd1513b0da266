# ab-common.sh — sourced by the A/B scripts (path-ab.sh, attn-ab.sh): ab_build builds one variant
# NAME=CMAKE_ARGS into build-ab-NAME (sm_90a, Release, all cores; the targets named after it),
# logs into $LOGS/build-NAME.log, and appends NAME to the array `names` when it built.
export PATH=/usr/local/cuda/bin:$PATH
AB_GEN=()
command -v ninja >/dev/null 2>&1 && AB_GEN=(-G Ninja)
ab_build() {
    local v=$1 name args dir t0
    shift
    name=${v%%=*}
    args=${v#*=}
    dir=build-ab-$name
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if cmake -S . -B "$dir" "${AB_GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFATTN_CUDA=ON -DFATTN_CUDA_ARCHS=90a \
        -DFATTN_BUILD_TESTS=OFF $args >"$LOGS/build-$name.log" 2>&1 &&
        cmake --build "$dir" -j "$(nproc)" --target "$@" >>"$LOGS/build-$name.log" 2>&1; then
        names+=("$name")
        echo "built $name ($args) in $(( $(date +%s) - t0 )) s"
    else
        echo "build of $name FAILED:"; tail -n 15 "$LOGS/build-$name.log"
    fi
}
