#!/usr/bin/env bash
# Zero-copy regions between two C++ processes on the GPU: matmul-cli puts
# A, B and C in cudaMalloc memory (--mode=ipc) or a cuMemCreate allocation
# (--mode=vmm), registers it with a CUDA daemon and checks the product
# against FP64; then times the MLP gate/up shape through IPC regions, to
# compare with the inline path of daemon_e2e. Run by tests/gpu/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ] || [ ! -x bundle/matmul-cli ]; then
  echo "cli_regions: matmul-server or matmul-cli not bundled; skipped"
  exit 0
fi
start_cuda_daemon --metrics_listen=
rc=0
cli() { bundle/matmul-cli run --target="$sock" "$@"; }
for mode in ipc vmm; do
  cli --mode=$mode --shape=127x255x63 --check || rc=1
  cli --mode=$mode --shape=512x1024x2048 --transpose_b --check \
    --out_dtype=fp32 --beta=0.5 || rc=1
  cli --mode=$mode --shape=96x80x64 --batch=3 --broadcast_b --check || rc=1
done
# Tuned first (background), then timed: zero-copy end to end.
cli --mode=ipc --shape=5120x11008x2048 --transpose_b --iterations=3 >/dev/null
sleep 3
cli --mode=ipc --shape=5120x11008x2048 --transpose_b --iterations=50 || rc=1
cli --mode=ipc --shape=256x256x256 --iterations=200 || rc=1
stop_cuda_daemon 3 || rc=1
echo "cli_regions: rc=$rc"
exit $rc
