#!/usr/bin/env bash
# End to end through the daemon on the GPU: matmul-server --backend=cuda on a
# unix socket, matmul-cli products against it (a checked small one, then
# the MLP gate/up shape 5120x11008x2048 as nn.Linear sends it, timed), then
# SIGTERM and a clean drain. Run by tests/gpu/run.sh when both binaries are
# in bundle/.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ] || [ ! -x bundle/matmul-cli ]; then
  echo "daemon_e2e: matmul-server or matmul-cli not bundled; skipped"
  exit 0
fi
dir=$(mktemp -d)
start_cuda_daemon --metrics_listen=127.0.0.1:9466 \
  --tuning_cache="$dir/tuning.json"
rc=0
cli() { bundle/matmul-cli --target="$sock" "$@"; }
cli info || rc=1
cli run --shape=512x1024x2048 --transpose_b --check || rc=1
# First call: heuristic pick while the shape is tuned in the background;
# the later ones use the tuned kernel.
cli run --shape=5120x11008x2048 --transpose_b --iterations=3 || rc=1
sleep 3
cli run --shape=5120x11008x2048 --transpose_b --iterations=20 || rc=1
cli run --shape=5120x11008x2048 --transpose_b --iterations=1 --json || rc=1
curl -s http://127.0.0.1:9466/metrics 2>/dev/null | grep -E '^matmul_' | head -30
stop_cuda_daemon 20 || rc=1
exit $rc
