#!/usr/bin/env bash
# Starts a CUDA daemon from the bundle and runs native_speed.py against it:
# the PyTorch figures of issue 21 (per-call p50 with a synchronize after
# each, 100 stream-ordered products in a row, eight processes), each the
# median (min..max) of repeated runs, torch.matmul in the same process as
# the reference, the issue's targets beside them.
# Writes $OUT/native_speed.json and $OUT/native_speed.txt (the table).
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh:
#   run(command="bash tests/gpu/python/native_speed.sh", carry=["bundle"])
#   bash tests/gpu/python/native_speed.sh [native_speed.py flags...]
# Env: DAEMON_FLAGS (extra matmul-server flags), OUT (default gpu-out).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  python3 "$(dirname "$0")/native_speed.py" --help 2>/dev/null | tail -n +1 || true
  exit 0
fi
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
if [ ! -x bundle/matmul-server ]; then
  echo "native_speed.sh: bundle/matmul-server missing (tests/gpu/bundle.sh)" >&2
  exit 1
fi
source tests/gpu/cuda_daemon.sh
# shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
start_cuda_daemon --metrics_listen= ${DAEMON_FLAGS:-}
trap 'kill "$server" 2>/dev/null || true' EXIT
rc=0
PYTHONUNBUFFERED=1 python3 tests/gpu/python/native_speed.py \
  --target="$sock" --json="$OUT/native_speed.json" "$@" |
  tee "$OUT/native_speed.txt" || rc=$?
trap - EXIT
stop_cuda_daemon 10 || rc=1
exit "$rc"
