# gpu-check-common.sh — sourced by the parts of gpu-check that run as scripts of their own
# (gpu-check-torch.sh, gpu-check-path.sh) after they set DEADLINE (seconds): the output folder
# from their first argument (OUT, absolute, created), the repository root as the working folder
# (ROOT), the Python (PY), the start time (T0) and the seconds since (elapsed) and left (left).
OUT="${1:?usage: $0 OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="${PYTHON:-python3}"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(elapsed) )); }
