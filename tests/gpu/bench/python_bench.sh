#!/usr/bin/env bash
# Runs one of the PyTorch benchmarks here against a fresh CUDA daemon from
# the bundle with its default flags (plus DAEMON_FLAGS):
#   lora_step       a LoRA training step of a Qwen-like MLP block, through
#                   the daemon (a request per product, and product lists)
#                   against the same step in torch in the same process;
#   native_speed    per call with a synchronize, 100 stream-ordered in a
#                   row, eight processes: the daemon against torch.matmul;
#   many_processes  1 to 8 processes, distinct weights, one shared weight,
#                   the shared weight with adapters: daemon against local.
# Each script's docstring (--help) says what it measures and checks.
# Writes $OUT/NAME.json (the report, docs/bench/ reads it), $OUT/NAME.txt
# (the table) and $OUT/NAME.metrics (the daemon's launch, batch and request
# counts after the run); under MPS (MPS=on, or MPS=both for both in one
# call) a fresh daemon and the script run as clients of one MPS server
# started here, into $OUT/NAME_mps.*.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/build_native_for_device.sh:
#   run(command="MPS=both bash tests/gpu/bench/python_bench.sh lora_step --products",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
#   bash tests/gpu/bench/python_bench.sh NAME [NAME.py flags...]
# Env: DAEMON_FLAGS (extra matmul-server flags), OUT (default gpu-out),
# MPS (off, on or both; default off), METRICS_URL (the daemon's /metrics,
# which lora_step.py watches for the end of the daemon's tuning and
# many_processes.py reads around each daemon round; default
# http://127.0.0.1:9479/metrics, where the daemon is told to serve them;
# empty: not watched nor kept), METRICS_PORT (where the daemon serves
# them, 9479; 0: a free port, read from the daemon's log), TIMEOUT_S (each script run's limit, 540; 0:
# none), SERVER (default bundle/matmul-server), PYTHON (default python3).
# A CPU smoke test, from a build (tests/CMakeLists.txt's
# lora_step_smoke_test): SERVER=build/server/matmul-server
#   DAEMON_FLAGS="--backend=cpu --metrics_listen=" METRICS_URL= PYTHON=/usr/bin/python3
#   bash tests/gpu/bench/python_bench.sh lora_step --device=cpu --tokens=64
#   --hidden=32 --intermediate=64 --warmup=2 --steps=3 --tuning_steps=1
set -euo pipefail
here=$(dirname "$0")
name=${1:-}
case $name in
  lora_step | native_speed | many_processes) shift ;;
  --help | -h)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: python_bench.sh lora_step|native_speed|many_processes [flags...] (--help)" >&2
    exit 2
    ;;
esac
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  "${PYTHON:-python3}" "$here/$name.py" --help
  exit 0
fi
cd "$here/../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
# A daemon named by SERVER (the CPU smoke test's, from a build) needs
# nothing of the bundle's: its libraries would shadow the build's.
if [ -z "${SERVER:-}" ]; then
  source tests/gpu/bundle_env.sh
  SERVER=bundle/matmul-server
fi
if [ ! -x "$SERVER" ]; then
  echo "python_bench.sh: $SERVER missing (tests/gpu/bundle.sh)" >&2
  exit 1
fi
export SERVER
source tests/gpu/cuda_daemon.sh
port=${METRICS_PORT:-9479}
metrics_url=${METRICS_URL-http://127.0.0.1:$port/metrics}
trap 'kill_cuda_daemon; stop_mps' EXIT

# run_script OUTNAME [NAME.py flags...]: a fresh daemon, the script against
# it into $OUT/OUTNAME.*; returns the worse exit code.
run_script() {
  local out=$1 status=0
  shift
  # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
  if ! start_cuda_daemon --metrics_listen="127.0.0.1:$port" ${DAEMON_FLAGS:-}; then
    echo "python_bench.sh: the daemon did not start" | tee "$OUT/$out.txt" >&2
    kill_cuda_daemon
    return 1
  fi
  local url=$metrics_url script_flags=()
  if [ "$port" = 0 ] && [ -n "$url" ]; then
    # The daemon picked the port: its first line says which.
    url=
    for _ in $(seq 50); do
      url=$(grep -o 'metrics on http://[^ ]*/metrics' "$dir/server.log" |
        head -1 | cut -d' ' -f3) || true
      [ -n "$url" ] && break
      sleep 0.1
    done
    if [ -z "$url" ]; then
      echo "python_bench.sh: the daemon's log names no metrics address" >&2
      kill_cuda_daemon
      return 1
    fi
  fi
  if [ -n "$url" ] && [ "$name" != native_speed ]; then
    script_flags=(--metrics_url="$url")
  fi
  PYTHONUNBUFFERED=1 timeout "${TIMEOUT_S:-540}" "${PYTHON:-python3}" \
    "tests/gpu/bench/$name.py" --target="$sock" --json="$OUT/$out.json" \
    "${script_flags[@]}" "$@" | tee "$OUT/$out.txt" || status=$?
  if [ -n "$url" ]; then
    curl -s "$url" |
      grep -E '^matmul_(batch_size|launch_duration_seconds|launch_worker|launch_stage|requests_total|kernel_seconds_total)' |
      grep -v _bucket >"$OUT/$out.metrics" || true
  fi
  stop_cuda_daemon 10 || status=1
  return "$status"
}

rc=0
case ${MPS:-off} in
  off | both) run_script "$name" "$@" || rc=1 ;;
  on) ;;
  *)
    echo "python_bench.sh: MPS=${MPS} (expected off, on or both)" >&2
    exit 2
    ;;
esac
if [ "${MPS:-off}" != off ]; then
  if start_mps; then
    echo "under MPS:"
    run_script "${name}_mps" "$@" || rc=1
    stop_mps 5
  else
    echo "MPS did not start: the MPS case is not measured" |
      tee "$OUT/${name}_mps.txt"
    rc=1
  fi
fi
exit "$rc"
