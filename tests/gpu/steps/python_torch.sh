#!/usr/bin/env bash
# The Python client's GPU tests (tests/gpu/python/test_*.py) against a CUDA
# daemon serving metrics: stream ordering without synchronize, 64 async
# products in flight, the custom op under torch.compile, a client killed
# with products in flight. Run by tests/gpu/run.sh (STEPS=python_torch runs
# only this); the measurements are tests/gpu/python/native_speed.sh.
# Env: DAEMON_FLAGS, extra matmul-server flags.
set -euo pipefail
if [ ! -x bundle/matmul-server ]; then
  echo "python_torch: matmul-server not bundled; skipped"
  exit 0
fi
if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "python_torch: no torch with CUDA here; skipped"
  exit 0
fi
source tests/gpu/cuda_daemon.sh
metrics_port=9469
# shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
start_cuda_daemon --metrics_listen="127.0.0.1:$metrics_port" ${DAEMON_FLAGS:-}
rc=0
MATMUL_TARGET="$sock" \
  MATMUL_METRICS_URL="http://127.0.0.1:$metrics_port/metrics" \
  PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" \
  PYTHONUNBUFFERED=1 \
  timeout 270 python3 -m unittest discover -v -s tests/gpu/python \
  -p 'test_*.py' || rc=$?
stop_cuda_daemon 10 || rc=1
exit $rc
