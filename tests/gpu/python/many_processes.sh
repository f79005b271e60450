#!/usr/bin/env bash
# Starts a CUDA daemon from the bundle and runs many_processes.py against it
# without MPS, then again with the daemon and every process as clients of
# an MPS server: distinct weights, one shared weight, and the shared
# weight with an adapter per process, for 1, 2, 4 and 8 processes, daemon
# and local. Keeps the daemon's launch and batch metrics after each run.
# Writes $OUT/many_processes{,_mps}.{json,txt,metrics}.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/python/build_native_for_device.sh:
#   run(command="bash tests/gpu/python/many_processes.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
#   bash tests/gpu/python/many_processes.sh [many_processes.py flags...]
# Env: DAEMON_FLAGS (extra matmul-server flags), OUT (default gpu-out),
# MPS (both, off or only; default both).
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
rc=0

# run NAME [many_processes.py flags...]
run() {
  local name=$1
  shift
  unset dir
  # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
  start_cuda_daemon --metrics_listen=127.0.0.1:9479 ${DAEMON_FLAGS:-}
  PYTHONUNBUFFERED=1 timeout 540 python3 tests/gpu/python/many_processes.py \
    --target="$sock" --json="$OUT/$name.json" "$@" |
    tee "$OUT/$name.txt" || rc=1
  curl -s http://127.0.0.1:9479/metrics |
    grep -E '^matmul_(batch_size|launch_duration_seconds|launch_worker|requests_total|kernel_seconds_total)' |
    grep -v _bucket >"$OUT/$name.metrics"
  stop_cuda_daemon 3 || rc=1
}

if [ "${MPS:-both}" != only ]; then
  run many_processes "$@"
fi
if [ "${MPS:-both}" != off ]; then
  mps=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    run many_processes_mps "$@"
    echo quit | nvidia-cuda-mps-control
  else
    echo "many_processes.sh: the MPS control daemon did not start" >&2
    rc=1
  fi
fi
exit "$rc"
