#!/bin/bash
# grpc-floor against a real matmul-server (CPU backend) on a temporary unix
# socket, with small shapes so that it runs in seconds: every measurement
# must come back, the JSON must hold the echo and the daemon's figures side
# by side, transport settings must reach both servers, and a bad setting
# must be refused.
# Usage: grpc_floor_test.sh path/to/grpc-floor path/to/matmul-server
set -euo pipefail
floor="$1"
server="$2"
dir=$(mktemp -d)
socket="$dir/matmul.sock"
args="flow_control_window=4194304,max_frame_size=1048576,bdp_probe=0"
"$server" --backend=cpu --listen="unix:$socket" --metrics_listen= \
  --grpc_args="$args" >"$dir/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$dir"' EXIT

i=0
while [ ! -S "$socket" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$socket" ] || { echo "FAIL: server did not start"; cat "$dir/server.log"; exit 1; }

fail() { echo "FAIL: $*"; exit 1; }

"$floor" --target="unix:$socket" --grpc_args="$args" --calls=50 --warmup=5 \
  --large_reps=2 --small_shape=32x32x32 --small_mode=shm \
  --large_shape=64x128x256 --socket_dir="$dir" --json="$dir/floor.json" \
  >"$dir/out" 2>&1 || { cat "$dir/out"; fail "grpc-floor exited non-zero"; }
cat "$dir/out"
for key in '"ping_pong"' '"echo"' '"1x1x1_inline"' '"32x32x32 NT shm"' \
  '"64x128x256 NT inline"' '"comparison"' '"difference_us"' \
  'grpc.http2.max_frame_size=1048576'; do
  grep -q "$key" "$dir/floor.json" || fail "floor.json lacks $key"
done
# The large product's payload: A 64x256 and B 128x256 in, C 64x128 out.
grep -q '"bytes_in": 98304' "$dir/floor.json" || fail "wrong bytes_in"
grep -q '"bytes_out": 16384' "$dir/floor.json" || fail "wrong bytes_out"

if "$floor" --grpc_args=window=5 --calls=1 >"$dir/out" 2>&1; then
  fail "grpc-floor accepted an unknown setting"
fi
grep -q "unknown gRPC setting 'window'" "$dir/out" || fail "no reason given"
if "$server" --backend=cpu --listen="unix:$dir/other.sock" --metrics_listen= \
  --grpc_args=max_frame_size=big >"$dir/out" 2>&1; then
  fail "matmul-server accepted a bad --grpc_args"
fi
grep -q "max_frame_size" "$dir/out" || fail "matmul-server gave no reason"
echo PASS
