#!/usr/bin/env bash
# Zero-copy regions through the Python client against a CUDA daemon:
# tests/gpu/checks/python_regions_check.py. Run by tests/gpu/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ]; then
  echo "python_regions: matmul-server not bundled; skipped"
  exit 0
fi
start_cuda_daemon --metrics_listen=
timeout 240 python3 tests/gpu/checks/python_regions_check.py "$sock"
rc=$?
stop_cuda_daemon 5 || rc=1
exit $rc
