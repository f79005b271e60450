#!/usr/bin/env bash
# The Python client's GPU tests (tests/gpu/checks/python/test_*.py) against
# a CUDA daemon serving metrics: stream ordering without synchronize, 64
# async products in flight, product lists, shared weights, the custom op
# under torch.compile, a client killed with products in flight. Run by
# tests/gpu/run.sh (STEPS=python_torch runs only this); the measurements
# are tests/gpu/bench/python_bench.sh's.
# Env: DAEMON_FLAGS, extra matmul-server flags.
set -euo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ]; then
  echo "python_torch: matmul-server not bundled; skipped"
  exit 0
fi
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "python_torch: no torch with CUDA here; skipped"
  exit 0
fi
metrics_port=9469
# shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
start_cuda_daemon --metrics_listen="127.0.0.1:$metrics_port" ${DAEMON_FLAGS:-}
rc=0
MATMUL_TARGET="$sock" \
  MATMUL_METRICS_URL="http://127.0.0.1:$metrics_port/metrics" \
  PYTHONUNBUFFERED=1 \
  timeout 270 python3 -m unittest discover -v -s tests/gpu/checks/python \
  -p 'test_*.py' || rc=$?
stop_cuda_daemon 10 || rc=1
exit $rc
