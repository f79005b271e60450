#!/usr/bin/env bash
# Two matmul-server builds measured back to back on one GPU machine, so
# that a change is judged against the same GPU, clocks and host (GPU
# instances differ between device calls). For each server in SERVERS
# ("name:path ..."; default: the bundle's alone): the two small seed
# shapes (5120x512x2048, 5120x2048x2048) through one ring at concurrency 4
# with 2 and 4 workers, and M=64 (MS) x 4096 x 4096, the batching
# workload, at concurrency 64 over 4 rings, batching off and
# on (--max_batch_size=32 --max_queue_delay_us=300). Each measurement runs
# twice on one daemon and the second run is kept: the first finishes the
# background tuning of the shapes (and stacked sizes) it meets.
# Tables and JSON go to $OUT/ab/. Needs bundle/ (tests/gpu/bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/ab
mkdir -p "$res"
SERVERS=${SERVERS:-new:bundle/matmul-server}
SHAPES=${SHAPES:-5120x512x2048 5120x2048x2048}
MS=${MS:-64}
rc=0
twice() {  # twice NAME [bench flags]: the second run is saved as NAME
  local name=$1
  shift
  bundle/matmul-cli bench --target="$sock" --transpose_b --mode=ipc \
    --warmup=2s --duration=500ms --max_windows=4 "$@" >/dev/null 2>&1
  bundle/matmul-cli bench --target="$sock" --transpose_b --mode=ipc \
    --warmup=1s --duration=500ms --max_windows=8 --label="$name" \
    --save="$res/$name.json" "$@" || rc=1
}
for entry in $SERVERS; do
  tag=${entry%%:*}
  export SERVER=${entry#*:}
  cache=$(mktemp -d)/tuning.json  # one per server: tuned by its first runs
  for workers in 2 4; do
    start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
      --worker_threads=$workers
    for shape in $SHAPES; do
      twice "${tag}_${shape}_w$workers" --shape="$shape" --concurrency=4 \
        --rings=1
    done
    stop_cuda_daemon 3 || rc=1
  done
  for setting in "off:--max_batch_size=1" \
    "on:--max_batch_size=32 --max_queue_delay_us=300"; do
    # shellcheck disable=SC2086
    start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
      --max_queue_size=1024 ${setting#*:}
    for m in $MS; do
      twice "${tag}_m${m}_${setting%%:*}" --shape="${m}x4096x4096" \
        --concurrency=64 --channels=8 --rings=4
    done
    stop_cuda_daemon 3 || rc=1
  done
done
echo "ab_compare: rc=$rc"
exit $rc
