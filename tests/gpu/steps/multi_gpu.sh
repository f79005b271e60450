#!/usr/bin/env bash
# Several GPUs behind one daemon (--cuda_devices=all), through the Python
# client: tests/gpu/multi_gpu_check.py (it skips with fewer than two GPUs),
# then tests/gpu/service/two_gpu_bench.sh (matmul-cli bench on one GPU and
# on both; it skips likewise). Run by tests/gpu/run.sh.
set -uo pipefail
if [ ! -x bundle/matmul-server ]; then
  echo "multi_gpu: matmul-server not bundled; skipped"
  exit 0
fi
source tests/gpu/cuda_daemon.sh
port=9473
start_cuda_daemon --metrics_listen="127.0.0.1:$port" --cuda_devices=all
PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 300 python3 tests/gpu/multi_gpu_check.py "$sock" \
  "http://127.0.0.1:$port/metrics"
rc=$?
stop_cuda_daemon 5 || rc=1
bash tests/gpu/service/two_gpu_bench.sh || rc=1
exit $rc
