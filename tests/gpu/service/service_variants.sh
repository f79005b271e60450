#!/usr/bin/env bash
# One concurrency level under several daemon and client settings, one
# daemon each, to find where throughput goes: each shape of SHAPES (default
# issue 5's 32x4096x4096 64x4096x4096) at CONCURRENCY (default 64), NT,
# over cuda_ipc regions (every client slot its own A and C, one shared B).
# VARIANTS is a list of "label|matmul-server flags|matmul-cli bench flags"
# separated by ';' (default: batching off and on over 4 rings). Each measurement runs
# twice on its daemon and the second is kept (the first finishes background
# tuning). Prints one table; JSON and matmul-cli's output (bench.log) go
# to $OUT/variants/, TAG prefixing the file names. Run from the repo
# root with the bundle unpacked.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/variants
mkdir -p "$res"
source tests/gpu/cuda_daemon.sh
SHAPES=${SHAPES:-32x4096x4096 64x4096x4096}
CONCURRENCY=${CONCURRENCY:-64}
TAG=${TAG:-}
VARIANTS=${VARIANTS:-"off|--max_batch_size=1|--rings=4;on|--max_batch_size=32 --max_queue_delay_us=500|--rings=4"}
rc=0
cache_dir=$(mktemp -d)
trap 'rm -rf "$cache_dir"' EXIT
cache=$cache_dir/tuning.json
rm -f "$res/${TAG}"s*_v*.json "$res/${TAG}bench.log"  # an earlier run's
IFS=';' read -ra variants <<<"$VARIANTS"
read -ra shapes <<<"$SHAPES"
for i in "${!variants[@]}"; do
  IFS='|' read -r label daemon_flags bench_flags <<<"${variants[$i]}"
  dir=$(mktemp -d)
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
    --max_queue_size=1024 $daemon_flags
  for s in "${!shapes[@]}"; do
    for pass in warm keep; do
      # shellcheck disable=SC2086
      bundle/matmul-cli bench --target="$sock" --shape="${shapes[$s]}" \
        --transpose_b --mode=ipc --concurrency="$CONCURRENCY" --warmup=1s \
        --duration=500ms --max_windows=6 --label="$label" \
        --save="$res/${TAG}s${s}_v$i.json" $bench_flags \
        >>"$res/${TAG}bench.log" 2>&1 || rc=1
    done
  done
  stop_cuda_daemon 2 || rc=1
done
python3 - "$res" "$TAG" <<'PY'
import glob, json, os, re, sys
print(f"{'shape':<16} {'variant':<40} {'req/s':>8} {'TFLOPS':>6} "
      f"{'p50 us':>7} {'p99 us':>7} {'batch':>6} {'queue':>6} {'kernel':>6} "
      f"{'server':>6}")
def order(path):
    return tuple(int(x) for x in re.findall(r"s(\d+)_v(\d+)\.json$", path)[0])
for path in sorted(glob.glob(os.path.join(sys.argv[1], sys.argv[2] + "s*_v*.json")),
                   key=order):
    d = json.load(open(path))
    for l in d["levels"]:
        us = lambda k: l[k] * 1e6
        print(f"{d['shape'].split(':')[0]:<16} {d['label'][:40]:<40} "
              f"{l['requests_per_second']:8.0f} {l['tflops']:6.0f} "
              f"{us('latency_p50_s'):7.0f} "
              f"{us('latency_p99_s'):7.0f} {l['mean_batch_size']:6.1f} "
              f"{us('server_queue_p50_s'):6.0f} "
              f"{us('server_kernel_p50_s'):6.0f} "
              f"{us('server_total_p50_s'):6.0f}")
PY
echo "service_variants: rc=$rc"
exit $rc
