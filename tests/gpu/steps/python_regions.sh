#!/usr/bin/env bash
# Zero-copy regions through the Python client against a CUDA daemon:
# tests/gpu/python_regions_check.py. Run by tests/gpu/run.sh.
set -uo pipefail
if [ ! -x bundle/matmul-server ]; then
  echo "python_regions: matmul-server not bundled; skipped"
  exit 0
fi
dir=$(mktemp -d)
bundle/matmul-server --backend=cuda --listen="unix:$dir/matmul.sock" \
  --metrics_listen= >"$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  [ -S "$dir/matmul.sock" ] && break
  sleep 0.1
done
PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 240 python3 tests/gpu/python_regions_check.py "unix:$dir/matmul.sock"
rc=$?
kill -TERM "$server"
wait "$server" || rc=1
tail -5 "$dir/server.log"
rm -rf "$dir"
exit $rc
