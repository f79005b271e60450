#!/usr/bin/env bash
# Several GPUs behind one daemon (--cuda_devices=all), through the Python
# client: tests/gpu/checks/multi_gpu_check.py (it skips with fewer than two
# GPUs; two_gpu_bench.sh, a step of its own, measures the pair). Run by
# tests/gpu/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ]; then
  echo "multi_gpu: matmul-server not bundled; skipped"
  exit 0
fi
port=9473
start_cuda_daemon --metrics_listen="127.0.0.1:$port" --cuda_devices=all
timeout 300 python3 tests/gpu/checks/multi_gpu_check.py "$sock" \
  "http://127.0.0.1:$port/metrics"
rc=$?
stop_cuda_daemon 5 || rc=1
exit $rc
