#!/usr/bin/env bash
# Pictures of the dashboard from a saved Prometheus run, where no Grafana
# runs: unpacks a Prometheus data folder (the prometheus-data.tar.gz that
# tests/gpu/checks/dashboard_vs_bench.sh brings back from the GPU machine),
# serves it with a Prometheus on loopback, then
#  - render_panels.py draws the dashboard's main time-series panels with
#    matplotlib from the dashboard's own PromQL (dashboard.png), and
#  - headless Chromium screenshots Prometheus's own graph page for the
#    same main expressions (prometheus_*.png).
#
# Usage: tools/dashboard/pictures.sh DATA.tar.gz START END OUT_DIR
#   START, END: Unix seconds of the window to draw.
# Needs prometheus, chromium and python3-matplotlib (Debian packages).
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
if [[ ${1:-} == --help || ${1:-} == -h ]]; then
  usage
  exit 0
fi
if [[ $# -ne 4 ]]; then
  usage >&2
  exit 2
fi
data=$1 start=$2 end=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
dashboard="$here/../../deploy/grafana/dashboards/matmul.json"
python=${PYTHON:-/usr/bin/python3}  # Debian's, which has matplotlib
mkdir -p "$out"
work=$(mktemp -d)
prometheus_pid=
cleanup() {
  [[ -n $prometheus_pid ]] && kill "$prometheus_pid" 2>/dev/null && wait "$prometheus_pid"
  rm -rf "$work"
}
trap cleanup EXIT

tar -C "$work" -xzf "$data"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1m
YAML
# Data older than the default retention would be dropped on start.
prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$work/prometheus-data" --storage.tsdb.retention.time=10y \
  --web.listen-address="127.0.0.1:$port" --log.level=warn >"$work/log" 2>&1 &
prometheus_pid=$!
api="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -sf "$api/-/ready" >/dev/null && break; sleep 0.2; done
curl -sf "$api/-/ready" >/dev/null || { cat "$work/log"; exit 1; }

"$python" "$here/render_panels.py" "$api" "$dashboard" "$start" "$end" \
  "$out/dashboard.png" --columns 2 \
  --panel "Kernel TFLOPS by shape" --panel "Served TFLOPS by shape" \
  --panel "Request latency by shape" --panel "Queue time by shape" \
  --panel "Requests/s by code" --panel "Batch size" \
  --panel "In flight and queued" --panel "Device memory"

# Prometheus's graph page for the same expressions, as a user would open it.
exprs=(
  'sum by (shape) (rate(matmul_flops_total[20s])) / sum by (shape) (rate(matmul_kernel_seconds_total[20s])) / 1e12'
  'histogram_quantile(0.99, sum by (shape, le) (rate(matmul_request_duration_seconds_bucket[20s])))'
  'sum by (code) (rate(matmul_requests_total[20s]))'
)
names=(kernel_tflops p99_latency requests_by_code)
# The page takes its end time to the minute: round END up to one.
end_minute=$(( (${end%.*} + 59) / 60 * 60 ))
range_s=$(( end_minute - ${start%.*} ))
end_input=$(date -u -d "@$end_minute" '+%Y-%m-%d %H:%M')
for i in "${!exprs[@]}"; do
  url="$api/graph?g0.expr=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "${exprs[$i]}")&g0.tab=0&g0.stacked=0&g0.range_input=${range_s}s&g0.end_input=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$end_input")"
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/chromium" --hide-scrollbars --window-size=1400,1000 \
    --virtual-time-budget=15000 --screenshot="$out/prometheus_${names[$i]}.png" \
    "$url" >"$work/chromium.log" 2>&1 || { cat "$work/chromium.log"; exit 1; }
  echo "pictures: $out/prometheus_${names[$i]}.png"
done
