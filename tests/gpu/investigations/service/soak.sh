#!/usr/bin/env bash
# The soak on the GPU machine (issue 35): tests/soak/run_soak.sh against a
# CUDA daemon from the bundle, COUNT times, each DURATION long, on the
# REGIONS kinds, every scenario; each run ends with SIGTERM, which must end
# the daemon with exit 0 within its grace. Writes $OUT/soak_N.json (the
# soak's report: counts back to their start, RSS samples) and
# $OUT/soak.txt (every run's log and a summary line each).
#
#   run(command="COUNT=4 bash tests/gpu/investigations/service/soak.sh",
#       carry=["bundle"])
#   DURATION=300s REGIONS=shm,ipc,vmm bash tests/gpu/investigations/service/soak.sh
# A run longer than one device call (a 10-minute soak takes about 11):
# soak_long.sh beside it starts it detached and collects it in the next
# call. tests/soak/run_soak.sh starts the daemon (its own way: the soak
# runs on the CPU backend in CI too).
#
# Env: DURATION (default 120s), COUNT (default 1), PARALLEL (runs at once,
# each its own daemon on the one GPU; default 1), REGIONS (default
# shm,ipc,vmm), CLIENTS (default 64), WARMUP (run_soak.sh --warmup: the
# daemon loads its kernels on their first launch, which its idle RSS does
# not hold; default 30s, empty for none), SOAK_ARGS (more run_soak.sh
# flags).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
for binary in bundle/matmul-server bundle/matmul-soak bundle/soak_holder; do
  if [ ! -x "$binary" ]; then
    echo "soak.sh: $binary missing (run tests/gpu/bundle.sh)" >&2
    exit 1
  fi
done
one_soak() {
  local i=$1 start run_rc=0 warmup=${WARMUP-30s}
  start=$(date +%s)
  # shellcheck disable=SC2086  # SOAK_ARGS is a list of flags
  bash tests/soak/run_soak.sh --server=bundle/matmul-server \
    --soak=bundle/matmul-soak --backend=cuda \
    --regions="${REGIONS:-shm,ipc,vmm}" --duration="${DURATION:-120s}" \
    --clients="${CLIENTS:-64}" ${warmup:+--warmup="$warmup"} \
    --json_out="$OUT/soak_$i.json" \
    ${SOAK_ARGS:-} >"$OUT/soak_$i.log" 2>&1 || run_rc=$?
  echo "soak $i: ${DURATION:-120s} on ${REGIONS:-shm,ipc,vmm} after a ${warmup:-0s} warm-up, exit $run_rc, $(($(date +%s) - start)) s in all" >"$OUT/soak_$i.summary"
}
count=${COUNT:-1}
parallel=${PARALLEL:-1}
for first in $(seq 1 "$parallel" "$count"); do
  pids=()
  for i in $(seq "$first" $((first + parallel - 1))); do
    ((i <= count)) || break
    one_soak "$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
done
rc=0
summary=()
for i in $(seq 1 "$count"); do
  tail -n 60 "$OUT/soak_$i.log"
  summary+=("$(cat "$OUT/soak_$i.summary")")
  grep -q ", exit 0," "$OUT/soak_$i.summary" || rc=1
done
{
  for i in $(seq 1 "${COUNT:-1}"); do cat "$OUT/soak_$i.log"; done
  printf '%s\n' "${summary[@]}"
} >"$OUT/soak.txt"
printf '%s\n' "${summary[@]}"
exit $rc
