#!/usr/bin/env bash
# Issue 5's concurrency-64 point under several daemon and client settings,
# one daemon each, to find where batching's throughput goes: for M in $MS
# (default 32 64) with N = K = 4096, NT, over cuda_ipc regions. VARIANTS is
# a list of "label|matmul-server flags|matmul-cli bench flags" separated by
# ';' (default: batching off and on over 4 rings). Each measurement runs
# twice on its daemon and the second is kept (the first finishes background
# tuning). Prints one table; JSON goes to $OUT/variants/. Run from the repo
# root with the bundle unpacked.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/variants
mkdir -p "$res"
source tests/gpu/cuda_daemon.sh
MS=${MS:-32 64}
VARIANTS=${VARIANTS:-"off|--max_batch_size=1|--rings=4;on|--max_batch_size=32 --max_queue_delay_us=500|--rings=4"}
rc=0
cache=$(mktemp -d)/tuning.json
IFS=';' read -ra variants <<<"$VARIANTS"
for i in "${!variants[@]}"; do
  IFS='|' read -r label daemon_flags bench_flags <<<"${variants[$i]}"
  dir=$(mktemp -d)
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
    --max_queue_size=1024 $daemon_flags
  for m in $MS; do
    for pass in warm keep; do
      # shellcheck disable=SC2086
      bundle/matmul-cli bench --target="$sock" --shape="${m}x4096x4096" \
        --transpose_b --mode=ipc --concurrency=64 --warmup=1s \
        --duration=500ms --max_windows=6 --label="$label" \
        --save="$res/m${m}_v$i.json" $bench_flags >/dev/null 2>&1 || rc=1
    done
  done
  stop_cuda_daemon 2 || rc=1
done
python3 - "$res" <<'PY'
import glob, json, os, sys
print(f"{'M':>4} {'variant':<44} {'req/s':>9} {'p50 us':>7} {'p99 us':>7} "
      f"{'batch':>6} {'queue':>6} {'kernel':>6} {'server':>6}")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "m*_v*.json")),
                   key=lambda p: (int(os.path.basename(p)[1:].split("_")[0]),
                                  int(p.rsplit("_v", 1)[1][:-5]))):
    d = json.load(open(path))
    for l in d["levels"]:
        us = lambda k: l[k] * 1e6
        print(f"{d['shape'].split('x')[0]:>4} {d['label'][:44]:<44} "
              f"{l['requests_per_second']:9.0f} {us('latency_p50_s'):7.0f} "
              f"{us('latency_p99_s'):7.0f} {l['mean_batch_size']:6.1f} "
              f"{us('server_queue_p50_s'):6.0f} "
              f"{us('server_kernel_p50_s'):6.0f} "
              f"{us('server_total_p50_s'):6.0f}")
PY
echo "batching_variants: rc=$rc"
exit $rc
