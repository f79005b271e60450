#!/usr/bin/env bash
# The GPU-side floor under a stream-ordered product (issue 21): runs
# handoff-probe on the GPU machine after tests/gpu/bundle.sh built bundle/
# here:
#   run(command="bash tests/gpu/investigations/service/handoff_floor.sh",
#       carry=["bundle"])
# Two streams that wait for each other, through words (stream memory
# operations, as the daemon does) and through events (interprocess events
# between processes), in one process and in two (two CUDA contexts), with
# no kernel and with kernels of 5 and 20 us in between; then the
# two-process cases again under MPS (one context on the GPU for both),
# where nvidia-cuda-mps-control exists. Then the pattern of a training
# step (issue 33's LoRA step): the asking side runs a kernel of its own
# before each ask, as a client runs its own work between products, with
# both kernels on one block or filling the GPU, against the same kernels
# on one stream (no hand-off), in one process, in two, and in two under
# MPS. PARTS="floor step" (the default) picks the parts. To stdout and
# $OUT/handoff_floor.txt.
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh  # start_mps, stop_mps
probe=bundle/handoff-probe
if [ ! -x "$probe" ]; then
  echo "handoff_floor: $probe missing (run tests/gpu/bundle.sh)" >&2
  exit 1
fi
parts=" ${PARTS:-floor step} "
# The step's kernels, "answer_us ask_us": about a LoRA step's average
# product and the client's work between two products, then short ones.
step_kernels=("90 45" "20 10")
step_blocks=(1 528)
without_mps() {
  if [[ $parts == *" floor "* ]]; then
    for kernel_us in 0 5 20; do
      for mode in one two one-events two-events; do
        timeout 60 "$probe" "$mode" 2000 "$kernel_us"
      done
    done
  fi
  if [[ $parts == *" step "* ]]; then
    for kernels in "${step_kernels[@]}"; do
      for blocks in "${step_blocks[@]}"; do
        for mode in local one two; do
          # shellcheck disable=SC2086  # two numbers
          timeout 60 "$probe" "$mode" 1000 $kernels "$blocks"
        done
      done
    done
  fi
}
under_mps() {
  if [[ $parts == *" floor "* ]]; then
    for kernel_us in 0 5 20; do
      timeout 60 "$probe" two 2000 "$kernel_us"
      timeout 60 "$probe" two-events 2000 "$kernel_us"
    done
  fi
  if [[ $parts == *" step "* ]]; then
    for kernels in "${step_kernels[@]}"; do
      for blocks in "${step_blocks[@]}"; do
        # shellcheck disable=SC2086  # two numbers
        timeout 60 "$probe" two 1000 $kernels "$blocks"
      done
    done
  fi
}
{
  without_mps
  if start_mps; then
    echo "under MPS:"
    under_mps
    stop_mps 5
  else
    echo "no MPS: the MPS case is not measured"
  fi
} 2>&1 | tee "$OUT/handoff_floor.txt"
