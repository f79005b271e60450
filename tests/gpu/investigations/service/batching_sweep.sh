#!/usr/bin/env bash
# The batching measurement on the GPU machine: for M in $MS (default 16 32 64
# 128) with N = K = 4096, NT, over cuda_ipc regions, the concurrency sweep
# 1,4,16,64,256 against three daemons: batching off (--max_batch_size=1),
# on with no delay, and on with --max_batch_size=$DELAY_BATCH (64) and
# --max_queue_delay_us=$DELAY_US (1000). A setting with a bounded p99:
# DELAY_BATCH=32 DELAY_US=300 BENCH_FLAGS=--rings=4.
# Every client slot has its own A and C and all share B (one layer's
# weights). Tables and JSON go to $OUT/batching/, and one PNG chart per M
# (tools/plot_bench.py) where python3 has matplotlib.
# BENCH_FLAGS adds matmul-cli bench flags (e.g. --stream), DAEMON_FLAGS
# matmul-server flags for all three, and TAG names the result files apart.
# Needs bundle/ (tests/gpu/bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/batching
mkdir -p "$res"
MS=${MS:-16 32 64 128}
DELAY_US=${DELAY_US:-1000}
DELAY_BATCH=${DELAY_BATCH:-64}  # --max_batch_size of the delayed setting
LEVELS=${LEVELS:-1,4,16,64,256}
BENCH_FLAGS=${BENCH_FLAGS:-}
DAEMON_FLAGS=${DAEMON_FLAGS:-}
TAG=${TAG:-}
rc=0
settings=("off:--max_batch_size=1" "on:--max_batch_size=64"
  "on, batch $DELAY_BATCH, delay ${DELAY_US}us:--max_batch_size=$DELAY_BATCH --max_queue_delay_us=$DELAY_US")
cache=$(mktemp -d)/tuning.json  # shared by the three daemons: tuned once
for i in "${!settings[@]}"; do
  label=${settings[$i]%%:*}
  flags=${settings[$i]#*:}
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
    --max_queue_size=1024 $flags $DAEMON_FLAGS
  for m in $MS; do
    bundle/matmul-cli bench --target="$sock" --shape="${m}x4096x4096" \
      --transpose_b --mode=ipc --concurrency="$LEVELS" --channels=8 \
      --warmup=1s --duration=500ms --max_windows=8 --label="batching $label" \
      --save="$res/m${m}${TAG}_$i.json" $BENCH_FLAGS || rc=1
  done
  stop_cuda_daemon 3 || rc=1
done
if python3 -c "import matplotlib" 2>/dev/null; then
  for m in $MS; do
    python3 tools/plot_bench.py "$res/m${m}${TAG}"_{0,1,2}.json \
      -o "$res/batching_m${m}${TAG}.png" || rc=1
  done
else
  echo "no matplotlib here: draw the charts with tools/plot_bench.py"
fi
echo "batching_sweep: rc=$rc"
exit $rc
