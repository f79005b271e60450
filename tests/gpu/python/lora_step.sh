#!/usr/bin/env bash
# Starts a CUDA daemon from the bundle with its default flags (plus
# DAEMON_FLAGS) and runs lora_step.py against it: a LoRA training step of a
# Qwen-like MLP block at the seed's shapes, through the daemon a request
# per product (torch.ops.matmul_client.linear, issue 33) and as product
# lists (matmul_client.nn.LoraLinear: 4 requests a step, issue 46), against
# the same step in the same process with torch.nn.functional.linear
# (PEFT-style), with Unsloth's addmm_ form, and with the very lists run by
# torch ops (the lists' ceiling): the per-step times, the ratios local /
# side (target >= 0.80), the losses step by step of every side (within 1%
# of local's, else it fails), the adapter gradients after two steps (within
# 1e-2), the requests per step; each figure the median (min..max) of 3
# runs. Writes $OUT/lora_step.json and $OUT/lora_step.txt (the table);
# under MPS (MPS=on, or MPS=both for both in one call) a fresh daemon and
# the script run as clients of one MPS server started here, as
# tests/gpu/service/handoff_floor.sh does, into $OUT/lora_step_mps.json and
# lora_step_mps.txt.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/python/build_native_for_device.sh:
#   run(command="MPS=both bash tests/gpu/python/lora_step.sh --products",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
#   bash tests/gpu/python/lora_step.sh [lora_step.py flags...]
# Env: DAEMON_FLAGS (extra matmul-server flags), OUT (default gpu-out),
# MPS (off, on or both; default off), METRICS_URL (the daemon's /metrics,
# to wait for its tuning; default http://127.0.0.1:9466/metrics, the
# daemon's default; empty: not watched), SERVER (default
# bundle/matmul-server), PYTHON (default python3).
# A CPU smoke test, from a build: SERVER=build/server/matmul-server
#   DAEMON_FLAGS="--backend=cpu --metrics_listen=" METRICS_URL= PYTHON=/usr/bin/python3
#   bash tests/gpu/python/lora_step.sh --device=cpu --tokens=64 --hidden=32
#   --intermediate=64 --warmup=2 --steps=3 --tuning_steps=1
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  "${PYTHON:-python3}" "$(dirname "$0")/lora_step.py" --help 2>/dev/null || true
  exit 0
fi
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
# A daemon named by SERVER (the CPU smoke test's, from a build) needs
# nothing of the bundle's: its libraries would shadow the build's.
if [ -z "${SERVER:-}" ]; then
  source tests/gpu/bundle_env.sh
  SERVER=bundle/matmul-server
fi
if [ ! -x "$SERVER" ]; then
  echo "lora_step.sh: $SERVER missing (tests/gpu/bundle.sh)" >&2
  exit 1
fi
export SERVER
source tests/gpu/cuda_daemon.sh
metrics_url=${METRICS_URL-http://127.0.0.1:9466/metrics}
mps=
server=
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  if [ -n "$mps" ]; then echo quit | nvidia-cuda-mps-control || true; fi
}
trap cleanup EXIT

# run_step NAME [lora_step.py flags...]: a fresh daemon, the script against
# it into $OUT/NAME.json and $OUT/NAME.txt; returns the worse exit code.
run_step() {
  local name=$1 step_rc=0
  shift
  unset dir
  # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
  start_cuda_daemon ${DAEMON_FLAGS:-}
  if [ ! -S "$dir/matmul.sock" ]; then
    echo "lora_step.sh: the daemon did not start" | tee "$OUT/$name.txt" >&2
    stop_cuda_daemon 10 || true
    server=
    return 1
  fi
  PYTHONUNBUFFERED=1 "${PYTHON:-python3}" tests/gpu/python/lora_step.py \
    --target="$sock" --metrics_url="$metrics_url" \
    --json="$OUT/$name.json" "$@" | tee "$OUT/$name.txt" || step_rc=$?
  stop_cuda_daemon 10 || step_rc=1
  server=
  return "$step_rc"
}

rc=0
case ${MPS:-off} in
  off | both) run_step lora_step "$@" || rc=1 ;;
  on) ;;
  *)
    echo "lora_step.sh: MPS=${MPS} (expected off, on or both)" >&2
    exit 2
    ;;
esac
if [ "${MPS:-off}" != off ]; then
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "no nvidia-cuda-mps-control: the MPS case is not measured" |
      tee "$OUT/lora_step_mps.txt"
    rc=1
  else
    mps=$(mktemp -d)
    export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      echo "under MPS:"
      run_step lora_step_mps "$@" || rc=1
      echo quit | nvidia-cuda-mps-control || true
      tail -5 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null || true
    else
      echo "MPS did not start" | tee "$OUT/lora_step_mps.txt"
      rc=1
    fi
    mps=
  fi
fi
exit "$rc"
