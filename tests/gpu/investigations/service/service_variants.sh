#!/usr/bin/env bash
# One concurrency level under several daemon and client settings, one
# daemon each, to find where throughput goes: each shape of SHAPES (default
# the batching workload's 32x4096x4096 64x4096x4096) at CONCURRENCY
# (default 64), NT,
# over cuda_ipc regions (every client slot its own A and C, one shared B).
# VARIANTS is a list of "label|matmul-server flags|matmul-cli bench flags"
# separated by ';' (default: batching off and on over 4 rings). Each measurement runs
# twice on its daemon and the second is kept (the first finishes background
# tuning). Prints one table, then where a launch's time went during the
# kept run, from the daemon's /metrics scraped before and after it (means:
# launch wall time, its kernel, answering its batch; queue and total per
# request). JSON, scrapes and matmul-cli's output (bench.log) go to
# $OUT/variants/, TAG prefixing the file names. Needs bundle/
# (tests/gpu/bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/variants
mkdir -p "$res"
SHAPES=${SHAPES:-32x4096x4096 64x4096x4096}
CONCURRENCY=${CONCURRENCY:-64}
TAG=${TAG:-}
VARIANTS=${VARIANTS:-"off|--max_batch_size=1|--rings=4;on|--max_batch_size=32 --max_queue_delay_us=500|--rings=4"}
rc=0
cache_dir=$(mktemp -d)
trap 'rm -rf "$cache_dir"' EXIT
cache=$cache_dir/tuning.json
rm -f "$res/${TAG}"s*_v*.json "$res/${TAG}"s*_v*.prom \
  "$res/${TAG}bench.log"  # an earlier run's
scrape() {  # scrape PORT: the daemon's /metrics text
  python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics",
                             timeout=5).read().decode())' "$1"
}
IFS=';' read -ra variants <<<"$VARIANTS"
read -ra shapes <<<"$SHAPES"
for i in "${!variants[@]}"; do
  IFS='|' read -r label daemon_flags bench_flags <<<"${variants[$i]}"
  port=$((19400 + i))
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen="127.0.0.1:$port" \
    --tuning_cache="$cache" --max_queue_size=1024 $daemon_flags
  for s in "${!shapes[@]}"; do
    for pass in warm keep; do
      [ "$pass" = keep ] && scrape "$port" >"$res/${TAG}s${s}_v$i.before.prom"
      # shellcheck disable=SC2086
      bundle/matmul-cli bench --target="$sock" --shape="${shapes[$s]}" \
        --transpose_b --mode=ipc --concurrency="$CONCURRENCY" --warmup=1s \
        --duration=500ms --max_windows=6 --label="$label" \
        --save="$res/${TAG}s${s}_v$i.json" $bench_flags \
        >>"$res/${TAG}bench.log" 2>&1 || rc=1
    done
    scrape "$port" >"$res/${TAG}s${s}_v$i.after.prom"
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
python3 - "$res" "$TAG" <<'PY'
import glob, os, re, sys
def sums(path):  # {metric name: value}, summed over label sets
    total = {}
    for line in open(path):
        m = re.match(r"^(matmul_\w+_(?:sum|count))(?:\{[^}]*\})? (\S+)$", line)
        if m:
            total[m.group(1)] = total.get(m.group(1), 0.0) + float(m.group(2))
    return total
print(f"\n{'shape':<16} {'variant':<7} {'launches':>8} {'batch':>6} "
      f"{'launch us':>9} {'kernel us':>9} {'answer us':>9} "
      f"{'queue us':>8} {'total us':>8}")
for after in sorted(glob.glob(os.path.join(sys.argv[1],
                                           sys.argv[2] + "s*_v*.after.prom"))):
    before = after.replace(".after.", ".before.")
    if not os.path.exists(before):
        continue
    a, b = sums(after), sums(before)
    d = lambda k: a.get(k, 0.0) - b.get(k, 0.0)
    mean = lambda name: d(name + "_sum") / max(d(name + "_count"), 1)
    s, v = re.findall(r"s(\d+)_v(\d+)\.after", after)[0]
    print(f"{'s' + s:<16} {'v' + v:<7} {d('matmul_batch_size_count'):8.0f} "
          f"{mean('matmul_batch_size'):6.1f} "
          f"{mean('matmul_launch_duration_seconds') * 1e6:9.1f} "
          f"{mean('matmul_kernel_duration_seconds') * 1e6:9.1f} "
          f"{mean('matmul_answer_duration_seconds') * 1e6:9.1f} "
          f"{mean('matmul_queue_duration_seconds') * 1e6:8.1f} "
          f"{mean('matmul_request_duration_seconds') * 1e6:8.1f}")
PY
echo "service_variants: rc=$rc"
exit $rc
