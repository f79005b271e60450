#!/usr/bin/env bash
# Issue 4's benchmark on the GPU machine: the seed's four shapes (NT, as
# nn.Linear) at concurrency 4 through cuda_ipc regions and inline, against
# the selector's standalone kernel TFLOPS (matmul-bench, same process
# kind, same GPU); then 256x256x256 at concurrency 1 over the unix socket
# for the service's own latency (end to end minus kernel), p50 and p99.
# The IPC runs repeat against a daemon with batching off. Results
# (tables, JSON, the tuning cache) go to $OUT/zero_copy/. Run from the repo root with
# the bundle unpacked: bash tests/gpu/service/zero_copy_bench.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/zero_copy
mkdir -p "$res"
source tests/gpu/cuda_daemon.sh
shapes="5120x11008x2048 5120x2048x11008 5120x2048x2048 5120x512x2048"
rc=0

bundle/matmul-bench --shapes="$(echo $shapes | tr ' ' ,)" --layouts=NT \
  --repeat=1 --json="$res/standalone.json" >"$res/standalone.txt" 2>&1 || rc=1
cat "$res/standalone.txt"

dir=$(mktemp -d)
start_cuda_daemon --metrics_listen= --tuning_cache="$res/tuning.json"
bench() { bundle/matmul-cli bench --target="$sock" --transpose_b "$@"; }
for shape in $shapes; do
  for mode in ipc inline; do
    bench --shape="$shape" --mode=$mode --concurrency=4 --warmup=4s \
      --duration=1s --max_windows=8 --label="$mode" \
      --save="$res/${shape}_$mode.json" || rc=1
  done
done
for mode in ipc inline; do
  bench --shape=256x256x256 --mode=$mode --concurrency=1 --channels=1 \
    --warmup=2s --duration=1s --max_windows=8 --label="$mode" \
    --save="$res/256_$mode.json" || rc=1
done
stop_cuda_daemon 5 || rc=1

# The same through IPC with batching off: each request its own launch.
dir=$(mktemp -d)
start_cuda_daemon --metrics_listen= --tuning_cache="$res/tuning.json" \
  --max_batch_size=1
for shape in $shapes; do
  bench --shape="$shape" --mode=ipc --concurrency=4 --warmup=4s \
    --duration=1s --max_windows=8 --label="ipc, batching off" \
    --save="$res/${shape}_ipc_nobatch.json" || rc=1
done
bench --shape=256x256x256 --mode=ipc --concurrency=1 --channels=1 \
  --warmup=2s --duration=1s --max_windows=8 --label="ipc, batching off" \
  --save="$res/256_ipc_nobatch.json" || rc=1
stop_cuda_daemon 5 || rc=1

# 256^3 once more with workers that poll for work instead of sleeping.
dir=$(mktemp -d)
start_cuda_daemon --metrics_listen= --tuning_cache="$res/tuning.json" \
  --worker_spin_us=1000
for mode in ipc inline; do
  bench --shape=256x256x256 --mode=$mode --concurrency=1 --channels=1 \
    --warmup=2s --duration=1s --max_windows=8 --label="$mode, spinning worker" \
    --save="$res/256_${mode}_spin.json" || rc=1
done
stop_cuda_daemon 5 || rc=1
echo "zero_copy_bench: rc=$rc"
exit $rc
