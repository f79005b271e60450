#!/usr/bin/env bash
# The demo: install what is missing, build, start the daemon on the default
# backend (CUDA when a GPU is present, else CPU), run a checked product
# through the CLI, time 20 more inline and 20 zero-copy through a request
# ring, show the metrics, stop the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install_deps.sh
deploy/build.sh
socket_dir=$(mktemp -d)  # private: the daemon refuses a directory others can write
socket="$socket_dir/matmul.sock"
metrics=127.0.0.1:9466
build/server/matmul-server --listen="unix:$socket" --metrics_listen="$metrics" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$socket_dir"' EXIT
for _ in $(seq 100); do  # the daemon needs a moment to bind its socket
  [[ -S $socket ]] && break
  kill -0 $server 2>/dev/null || { echo "matmul-server exited" >&2; exit 1; }
  sleep 0.1
done
echo "== matmul-cli info"
build/client/matmul-cli info --target="unix:$socket"
echo "== matmul-cli run --shape 127x255x63 --check"
build/client/matmul-cli run --target="unix:$socket" --shape=127x255x63 --check
echo "== matmul-cli run --shape 256x256x256 --iterations 20"
build/client/matmul-cli run --target="unix:$socket" --shape=256x256x256 --iterations=20
echo "== the same, operands in shared memory, requests through a request ring"
build/client/matmul-cli run --target="unix:$socket" --shape=256x256x256 --iterations=20 \
  --mode=shm --ring
echo "== metrics (http://$metrics/metrics)"
curl -s "http://$metrics/metrics" |
  grep -E '^matmul_(requests_total|flops_total|request_duration_seconds_count)' |
  grep -v ' 0$'
