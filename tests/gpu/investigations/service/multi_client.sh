#!/usr/bin/env bash
# Is one load generator process the limit? The batching measurement of
# batching_sweep.sh with the concurrency split over PROCS matmul-cli bench
# processes that run at once (default 4 x 16 = 64), batching off and on,
# for M = $M (16) x 4096 x 4096 NT over ipc; prints each process's line
# and the total requests/s. BENCH_FLAGS adds bench flags (e.g. --stream).
# Needs bundle/ (tests/gpu/bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/multi_client
mkdir -p "$res"
PROCS=${PROCS:-4}
PER=${PER:-16}
M=${M:-16}
BENCH_FLAGS=${BENCH_FLAGS:-}
SETTINGS=${SETTINGS:-off on}
rc=0
cache=$(mktemp -d)/tuning.json
for label in $SETTINGS; do
  setting=$([ "$label" = off ] && echo ":--max_batch_size=1" ||
    echo ":--max_batch_size=64")
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
    --max_queue_size=1024 ${setting#*:}
  # A first run tunes the kernels (not measured).
  bundle/matmul-cli bench --target="$sock" --shape="${M}x4096x4096" \
    --transpose_b --mode=ipc --concurrency=$((PROCS * PER)) --warmup=3s \
    --duration=300ms --max_windows=3 $BENCH_FLAGS >/dev/null 2>&1
  pids=()
  for p in $(seq "$PROCS"); do
    # shellcheck disable=SC2086
    bundle/matmul-cli bench --target="$sock" --shape="${M}x4096x4096" \
      --transpose_b --mode=ipc --concurrency="$PER" --warmup=1s \
      --duration=1s --stable_windows=3 --max_windows=3 --json $BENCH_FLAGS \
      >"$res/${label}_$p.json" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"  # not the daemon, which runs in the background too
  python3 - "$label" "$res" "$PROCS" <<'PY'
import json, sys
label, res, procs = sys.argv[1], sys.argv[2], int(sys.argv[3])
total = 0
for p in range(1, procs + 1):
    level = json.load(open(f"{res}/{label}_{p}.json"))["levels"][0]
    total += level["requests_per_second"]
    print(f"  batching {label} process {p}: {level['requests_per_second']:.0f} "
          f"req/s, p99 {level['latency_p99_s'] * 1e3:.2f} ms, batch "
          f"{level['mean_batch_size']:.1f}")
print(f"batching {label}: {total:.0f} req/s in total")
PY
  stop_cuda_daemon 2 || rc=1
done
exit $rc
