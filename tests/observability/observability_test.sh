#!/usr/bin/env bash
# The shipped Prometheus and Grafana files against a real Prometheus
# scraping a real daemon under load (CPU backend):
#  1. promtool check config / check rules / test rules on deploy/prometheus/;
#  2. a daemon on a temporary unix socket and loopback metrics port, driven
#     by matmul-cli: two shapes inline, one through shm regions, and
#     requests the daemon rejects (a dimension over --max_dimension);
#  3. Prometheus on loopback scraping it every second, with the shipped
#     alert rules; after a few scrapes, check_queries.py evaluates every
#     dashboard and alert expression through the HTTP API (all must
#     evaluate, all but those over series a CPU daemon without a
#     DCGM exporter lacks must return data), and must reject a
#     dashboard with a broken and an empty expression;
#  4. promtool check metrics on a live scrape, and every family it exports
#     named in the README's metrics table.
# Installs nothing: deploy/install_deps.sh puts prometheus (and promtool)
# in place. Every process it starts is stopped on exit.
# Usage: observability_test.sh MATMUL_SERVER MATMUL_CLI SOURCE_DIR
set -euo pipefail
server="$1"
cli="$2"
source_dir="$3"
deploy="$source_dir/deploy"
checker="$source_dir/tests/observability/check_queries.py"

dir=$(mktemp -d)
load_pids=()
pids=()
cleanup() {
  # The load loops end after their current command; then the services.
  touch "$dir/stop"
  for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$dir"/*.log; do
    [[ -s $log ]] && { echo "== $log"; tail -n 20 "$log"; }
  done
  exit 1
}
# A port nobody listens on now (the daemon and Prometheus bind it next).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "== promtool on deploy/prometheus (${SECONDS}s)"
promtool check config "$deploy/prometheus/prometheus.yml"
promtool check rules "$deploy/prometheus/alerts.yml"
(cd "$deploy/prometheus" && promtool test rules alerts_test.yml)

echo "== daemon under load (${SECONDS}s)"
socket="$dir/matmul.sock"
target="--target=unix:$socket"
metrics_port=$(free_port)
"$server" --backend=cpu --listen="unix:$socket" \
  --metrics_listen="127.0.0.1:$metrics_port" --max_dimension=2048 \
  --worker_threads=2 >"$dir/server.log" 2>&1 &
pids+=($!)
# Loading the CUDA libraries can take seconds on a busy machine.
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  "$cli" health "$target" --timeout=1s >/dev/null 2>&1 && break
  sleep 0.1
done
"$cli" health "$target" --timeout=1s >/dev/null ||
  fail "the daemon did not start serving in 60 s"

# Each load loop runs short benches until told to stop.
load() {
  while [[ ! -e $dir/stop ]]; do "$@" >/dev/null 2>&1 || true; done
}
bench=(bench "$target" --warmup=100ms --duration=300ms --max_windows=2
  --stable_windows=1)
load "$cli" "${bench[@]}" --shape=96x128x256 --concurrency=3 >"$dir/load1.log" 2>&1 &
load_pids+=($!)
load "$cli" "${bench[@]}" --shape=64x256x128 --transpose_b --concurrency=2 \
  --mode=shm >"$dir/load2.log" 2>&1 &
load_pids+=($!)
# Rejected with INVALID_ARGUMENT (over --max_dimension): counted as
# shape="invalid".
load "$cli" run "$target" --shape=4096x8x8 >"$dir/load3.log" 2>&1 &
load_pids+=($!)

echo "== prometheus scraping it (${SECONDS}s)"
prometheus_port=$(free_port)
cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: matmul
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
EOF
promtool check config "$dir/prometheus.yml" >/dev/null
prometheus --config.file="$dir/prometheus.yml" \
  --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$prometheus_port" \
  --log.level=warn >"$dir/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$prometheus_port"
scrapes() {
  curl -sf "$api/api/v1/query" \
    --data-urlencode 'query=count_over_time(up{job="matmul"}[5m])' |
    grep -o '"value":\[[^]]*\]' | sed 's/.*,"\([0-9]*\)"\]/\1/'
}
n=0
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  n=$(scrapes 2>/dev/null || true)
  [[ ${n:-0} -ge 6 ]] && break
  sleep 0.2
done
[[ ${n:-0} -ge 6 ]] || fail "Prometheus did not scrape the daemon six times in 60 s"
echo "$n scrapes"

echo "== every dashboard and alert expression (${SECONDS}s)"
python3 "$checker" "$api" "$deploy/grafana/dashboards/matmul.json" \
  "$deploy/prometheus/alerts.yml" 60 || fail "check_queries.py"

echo "== the check rejects a broken and an empty expression (${SECONDS}s)"
python3 - "$deploy/grafana/dashboards/matmul.json" "$dir/broken.json" <<'EOF'
import json, sys
dashboard = json.load(open(sys.argv[1]))
dashboard["panels"].append({"type": "timeseries", "title": "broken", "targets": [
    {"refId": "A", "expr": "sum(rate(matmul_flops_total[1m]) by"},
    {"refId": "B", "expr": 'matmul_flops_total{shape="no such shape"}'}]})
json.dump(dashboard, open(sys.argv[2], "w"))
EOF
if python3 "$checker" "$api" "$dir/broken.json" "$deploy/prometheus/alerts.yml" 3 \
  >"$dir/broken.out" 2>&1; then
  fail "check_queries.py passed a broken dashboard"
fi
grep -q 'panel "broken" target A: does not evaluate' "$dir/broken.out" ||
  fail "no parse error reported: $(cat "$dir/broken.out")"
grep -q 'panel "broken" target B: returned no data' "$dir/broken.out" ||
  fail "no empty result reported: $(cat "$dir/broken.out")"

echo "== promtool check metrics on a live scrape (${SECONDS}s)"
curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$dir/scrape.txt"
promtool check metrics <"$dir/scrape.txt" || fail "promtool check metrics"

echo "== every exported family is in the README's metrics table (${SECONDS}s)"
missing=$(awk '/^# TYPE / {print $3}' "$dir/scrape.txt" | sort -u |
  while read -r family; do
    grep -q "\`$family\`" "$source_dir/README.md" || echo "$family"
  done)
[[ -z $missing ]] || fail "not in README.md's metrics table: $missing"

echo "PASS"
