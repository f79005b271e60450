#!/usr/bin/env bash
# The dashboard's kernel-TFLOPS query against matmul-bench, on the GPU:
#  1. matmul-bench times SHAPE back to back (--sustained_s) and stores its
#     pick in a tuning cache;
#  2. a CUDA daemon started on that cache (so it runs the same kernel;
#     batching off, so each launch is one product of SHAPE) is driven by
#     matmul-cli bench in GPU memory (--mode=ipc) while a real Prometheus
#     scrapes it every second;
#  3. dashboard_vs_bench.py evaluates the shipped dashboard's "Kernel
#     TFLOPS by shape" expression through Prometheus's query API over the
#     steady part of the load and compares it with the bench's figure
#     (pass: within 5%);
#  4. a mixed load (several shapes inline and through shm, some requests
#     rejected) follows for the dashboard's other panels, then Prometheus
#     stops and its data goes to $OUT/prometheus-data.tar.gz, from which
#     tools/dashboard/pictures.sh draws the panels here.
# Needs bundle/prometheus (tests/gpu/bundle.sh with BUNDLE_PROMETHEUS=1);
# skipped without it. Env: SHAPE (default 5120x11008x2048, B transposed),
# LOAD_S (default 60).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/prometheus ] || [ ! -x bundle/matmul-server ]; then
  echo "dashboard_vs_bench: bundle/prometheus or matmul-server missing; skipped"
  exit 0
fi
OUT=${OUT:-$PWD/gpu-out}
shape=${SHAPE:-5120x11008x2048}
load_s=${LOAD_S:-60}
# stop_cuda_daemon removes the daemon's $dir: what outlives it is here.
work=$(mktemp -d)
prometheus_pid=
cleanup() {
  [ -n "$prometheus_pid" ] && kill "$prometheus_pid" 2>/dev/null
  kill_cuda_daemon
  wait 2>/dev/null
}
trap cleanup EXIT

echo "== matmul-bench $shape NT, sustained"
bundle/matmul-bench --shapes="$shape" --layouts=NT --sustained_s=20 \
  --tuning_cache="$work/tuning.json" --json="$OUT/dashboard_bench.json" || exit 1

echo "== daemon on that tuning cache, Prometheus scraping it"
metrics_port=9467
start_cuda_daemon --metrics_listen="127.0.0.1:$metrics_port" \
  --tuning_cache="$work/tuning.json" --max_batch_size=1 --max_dimension=65536
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: matmul
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
EOF
bundle/prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$work/prometheus-data" \
  --web.listen-address=127.0.0.1:9468 --log.level=warn \
  >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
cli() { bundle/matmul-cli --target="$sock" "$@"; }
wait_cuda_daemon_serving 20

echo "== load: $shape NT through CUDA IPC, ${load_s} s"
start=$(date +%s)
windows=$((load_s / 5))
cli bench --shape="$shape" --transpose_b --mode=ipc --concurrency=8 \
  --duration=5s --stable_windows="$windows" --max_windows="$windows" \
  --save="$OUT/dashboard_cli_bench.json" || exit 1
end=$(date +%s)

echo "== the dashboard's kernel TFLOPS against matmul-bench"
python3 tests/gpu/checks/dashboard_vs_bench.py http://127.0.0.1:9468 \
  deploy/grafana/dashboards/matmul.json "$OUT/dashboard_bench.json" \
  "$start" "$end" | tee "$OUT/dashboard_vs_bench.txt"
rc=${PIPESTATUS[0]}

echo "== mixed load for the other panels, 30 s"
stop=$(($(date +%s) + 30))
load() { while (($(date +%s) < stop)); do "$@" >/dev/null 2>&1; done; }
short=(bench --warmup=100ms --duration=1s --max_windows=2 --stable_windows=1)
pids=()
load cli "${short[@]}" --shape=2048x4096x4096 --transpose_b --mode=shm --concurrency=4 &
pids+=($!)
load cli "${short[@]}" --shape=16x4096x4096 --transpose_b --mode=ipc --concurrency=16 &
pids+=($!)
load cli "${short[@]}" --shape=256x1024x1024 --concurrency=4 &
pids+=($!)
# Over --max_dimension: rejected with INVALID_ARGUMENT (shape "invalid").
load cli run --shape=70000x8x8 &
pids+=($!)
wait "${pids[@]}"
sleep 3
echo "mixed load window: $((stop - 30)) $stop" | tee -a "$OUT/dashboard_vs_bench.txt"

stop_cuda_daemon 5 || rc=1
# SIGTERM lets Prometheus write its head block cleanly before the copy.
kill "$prometheus_pid"
wait "$prometheus_pid"
prometheus_pid=
tar -C "$work" -czf "$OUT/prometheus-data.tar.gz" prometheus-data
echo "prometheus data: $(du -h "$OUT/prometheus-data.tar.gz" | cut -f1)"
exit $rc
