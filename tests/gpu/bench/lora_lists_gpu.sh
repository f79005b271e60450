#!/usr/bin/env bash
# Product lists on the GPU machine, in one device call: the CUDA backend's
# list test, the Python GPU list tests
# (tests/gpu/checks/python/test_lists.py), whether GetServerInfo reports
# the daemon as an MPS client without and with MPS, the LoRA step
# (python_bench.sh lora_step, every side, without and with MPS) and the
# per-call and eight-process figures (python_bench.sh native_speed, without
# and with MPS). Logs and JSON go to $OUT: lora_step{,_mps}.json and
# native_speed{,_mps}.json are docs/bench/'s.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/build_native_for_device.sh:
#   run(command="bash tests/gpu/bench/lora_lists_gpu.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
# Env: OUT (default gpu-out), PARTS (space-separated: backend python info
# lora speed; default all), BACKEND_FILTER (cuda_backend_test's gtest
# filter), LORA_FLAGS (extra lora_step.py flags),
# SPEED_FLAGS (extra native_speed.py flags).
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
export OUT
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
parts=" ${PARTS:-backend python info lora speed} "
rc=0
summary=()
note() {  # note NAME STATUS
  summary+=("$(printf '%-22s %s' "$1" "$2")")
  [ "$2" = ok ] || rc=1
}

# with_mps CMD...: runs CMD as a client of a fresh MPS server; its exit
# code.
with_mps() {
  local status=0
  start_mps || return 1
  "$@" || status=$?
  stop_mps 5
  return "$status"
}

if [[ $parts == *" backend "* ]]; then
  bundle/cuda_backend_test --gtest_filter="${BACKEND_FILTER:-*}" \
    >"$OUT/cuda_backend_test.log" 2>&1 &&
    note cuda_backend_test ok || note cuda_backend_test failed
  tail -3 "$OUT/cuda_backend_test.log"
fi
if [[ $parts == *" python "* ]]; then
  # The list tests alone (tests/gpu/checks/python_torch.sh runs them with
  # the others).
  python_lists() {
    start_cuda_daemon
    MATMUL_TARGET="$sock" PYTHONUNBUFFERED=1 timeout 240 \
      python3 -m unittest -v tests/gpu/checks/python/test_lists.py
    local status=$?
    stop_cuda_daemon 5
    return "$status"
  }
  python_lists >"$OUT/test_lists.log" 2>&1 && note test_lists ok ||
    note test_lists failed
  tail -5 "$OUT/test_lists.log"
fi
if [[ $parts == *" info "* ]]; then
  info() {
    start_cuda_daemon --metrics_listen=127.0.0.1:9477
    bundle/matmul-cli info --target="$sock"
    curl -s http://127.0.0.1:9477/metrics | grep '^matmul_mps_client'
    stop_cuda_daemon 3
  }
  info >"$OUT/info.txt" 2>&1
  echo "--- under MPS" >>"$OUT/info.txt"
  with_mps info >>"$OUT/info.txt" 2>&1
  grep -i "mps" "$OUT/info.txt"
  # Without MPS first, then under it: "no" then "yes" is right.
  if [ "$(grep '^mps client:' "$OUT/info.txt" | awk '{print $3}' |
    tr '\n' ' ')" = "no yes " ]; then
    note mps_client_reported ok
  else
    note mps_client_reported wrong
  fi
fi
if [[ $parts == *" lora "* ]]; then
  # shellcheck disable=SC2086  # LORA_FLAGS is a list of flags
  MPS=both bash tests/gpu/bench/python_bench.sh lora_step ${LORA_FLAGS:-} \
    >"$OUT/lora_step.log" 2>&1 && note lora_step ok || note lora_step failed
fi
if [[ $parts == *" speed "* ]]; then
  # shellcheck disable=SC2086  # SPEED_FLAGS is a list of flags
  MPS=both bash tests/gpu/bench/python_bench.sh native_speed \
    --only=per_call,processes --repeat=3 ${SPEED_FLAGS:-} \
    >"$OUT/native_speed.log" 2>&1 && note native_speed ok ||
    note native_speed failed
fi
printf '%s\n' "${summary[@]}"
exit "$rc"
