#!/usr/bin/env bash
# The GPU-side floor under a stream-ordered product (issue 21): runs
# handoff-probe on the GPU machine after tests/gpu/bundle.sh built bundle/
# here:  run(command="bash tests/gpu/service/handoff_floor.sh", carry=["bundle"])
# Two streams that wait for each other, through words (stream memory
# operations, as the daemon does) and through events (interprocess events
# between processes), in one process and in two (two CUDA contexts), with
# no kernel and with kernels of 5 and 20 us in between; then the
# two-process cases again under MPS (one context on the GPU for both),
# where nvidia-cuda-mps-control exists. To stdout and
# $OUT/handoff_floor.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
probe=bundle/handoff-probe
if [ ! -x "$probe" ]; then
  echo "handoff_floor: $probe missing (run tests/gpu/bundle.sh)" >&2
  exit 1
fi
{
  for kernel_us in 0 5 20; do
    for mode in one two one-events two-events; do
      timeout 60 "$probe" "$mode" 2000 "$kernel_us"
    done
  done
  if command -v nvidia-cuda-mps-control >/dev/null; then
    mps=$(mktemp -d)
    export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      echo "under MPS:"
      for kernel_us in 0 5 20; do
        timeout 60 "$probe" two 2000 "$kernel_us"
        timeout 60 "$probe" two-events 2000 "$kernel_us"
      done
      echo quit | nvidia-cuda-mps-control
    else
      echo "MPS did not start"
    fi
  else
    echo "no nvidia-cuda-mps-control: the MPS case is not measured"
  fi
} 2>&1 | tee "$OUT/handoff_floor.txt"
