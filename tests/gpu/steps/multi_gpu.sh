#!/usr/bin/env bash
# Several GPUs behind one daemon (--cuda_devices=all), through the Python
# client: tests/gpu/multi_gpu_check.py (it skips with fewer than two GPUs).
# Run by tests/gpu/run.sh.
set -uo pipefail
if [ ! -x bundle/matmul-server ]; then
  echo "multi_gpu: matmul-server not bundled; skipped"
  exit 0
fi
source tests/gpu/cuda_daemon.sh
start_cuda_daemon --metrics_listen= --cuda_devices=all
PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 300 python3 tests/gpu/multi_gpu_check.py "$sock"
rc=$?
stop_cuda_daemon || rc=1
exit $rc
