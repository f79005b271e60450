#!/usr/bin/env bash
# Zero-copy regions through the Python client against a CUDA daemon:
# tests/gpu/python_regions_check.py. Run by tests/gpu/run.sh.
set -uo pipefail
if [ ! -x bundle/matmul-server ]; then
  echo "python_regions: matmul-server not bundled; skipped"
  exit 0
fi
source tests/gpu/cuda_daemon.sh
start_cuda_daemon --metrics_listen=
PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 240 python3 tests/gpu/python_regions_check.py "$sock"
rc=$?
stop_cuda_daemon || rc=1
exit $rc
