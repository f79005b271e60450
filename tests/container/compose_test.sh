#!/usr/bin/env bash
# deploy/compose.yaml started with podman-compose (container_test.sh runs it
# after building the image): the daemon and Prometheus, Prometheus running
# the stand-in image from Debian's prometheus package under the upstream
# name compose.yaml gives. With products going to the daemon, Prometheus
# scrapes it through the compose network (by its service name) and every
# dashboard and alert expression evaluates through Prometheus's HTTP API,
# each with data but those over the DCGM exporter's series and CUDA
# launch steps (tests/observability/check_queries.py).
# Grafana and the DCGM exporter are not started: no package of either is
# to be had here.
# Usage: compose_test.sh IMAGE SOCKET_GID MATMUL_CLI_DIR (bin/ and lib/)
set -euo pipefail
image=$1 gid=$2 cli_dir=$3
cd "$(dirname "$0")/../.."
project=matmul-compose-test
compose=(podman-compose -p "$project" -f deploy/compose.yaml)
export MATMUL_IMAGE=$image MATMUL_SOCKET_GID=$gid

upstream=$(/usr/bin/python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["services"]["prometheus"]["image"])' deploy/compose.yaml)
podman tag localhost/matmul-standin/prometheus:debian12 "$upstream"

# compose binds the host's /run/matmul: made here when missing, as the
# README makes it, and removed again.
made_socket_dir=0
if [[ ! -d /run/matmul ]]; then
  install -d -o 990 -g "$gid" -m 0750 /run/matmul
  made_socket_dir=1
fi
load_pid=
work=$(mktemp -d)
cleanup() {
  if [[ -n $load_pid ]]; then
    kill "$load_pid" 2>/dev/null
    wait "$load_pid" 2>/dev/null || true
  fi
  "${compose[@]}" down -v >/dev/null 2>&1 || true
  ((made_socket_dir)) && rm -rf /run/matmul
  rm -rf "$work"
}
on_exit() {
  local status=$?
  cleanup
  exit "$status"
}
trap on_exit EXIT

# What an earlier run may have left (its containers hold the socket
# directory's old mount).
"${compose[@]}" down -v >/dev/null 2>&1 || true
# podman-compose 1.0.3 (Debian 12's) drops group_add: the group the daemon
# gives the socket comes as a podman run argument instead.
"${compose[@]}" --podman-run-args="--group-add=$gid" up -d matmul prometheus \
  >"$work/up.log" 2>&1 ||
  { cat "$work/up.log" >&2; exit 1; }
podman ps --filter "label=io.podman.compose.project=$project" \
  --format '{{.Names}} {{.Image}} {{.Status}}'

cli() {
  LD_LIBRARY_PATH=$cli_dir/lib "$cli_dir/bin/matmul-cli" \
    --target=unix:/run/matmul/matmul.sock "$@"
}
wait_for() {
  local what=$1 i
  shift
  for ((i = 0; i < 120; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "FAIL: $what" >&2
  local service
  for service in matmul prometheus; do
    podman logs "${project}_${service}_1" 2>&1 | tail -20 >&2 || true
  done
  return 1
}
wait_for "the daemon's socket" test -S /run/matmul/matmul.sock
wait_for "Prometheus ready" curl -sf http://127.0.0.1:9090/-/ready
cli health --timeout=5s

# A request the daemon refuses (A's bytes do not cover its shape:
# INVALID_ARGUMENT), for the failure panels.
refused() {
  PYTHONPATH=client/python /usr/bin/python3 - <<'PY'
import grpc
from matmul_client._proto import matmul_pb2 as pb, matmul_pb2_grpc as pb_grpc
stub = pb_grpc.MatmulServiceStub(
    grpc.insecure_channel("unix:/run/matmul/matmul.sock"))
a = pb.Tensor(dtype=pb.DTYPE_BF16, shape=[2, 3], inline_data=b"short")
b = pb.Tensor(dtype=pb.DTYPE_BF16, shape=[3, 2], inline_data=bytes(12))
try:
    stub.Matmul(pb.MatmulRequest(a=a, b=b), timeout=10)
except grpc.RpcError as error:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
PY
}
# Products of two shapes and refused ones until the checks end.
(
  while true; do
    cli run --shape=64x64x64 --iterations=20 >/dev/null 2>&1 || true
    cli run --shape=128x256x64 --transpose_b --iterations=20 >/dev/null 2>&1 || true
    refused >/dev/null 2>&1 || true
    sleep 0.2
  done
) &
load_pid=$!

prom_query() {
  curl -sf --get http://127.0.0.1:9090/api/v1/query --data-urlencode "query=$1"
}
scraped() {
  prom_query 'up{job="matmul"}' |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; sys.exit(not (r and r[0]["value"][1] == "1"))'
}
wait_for "Prometheus scrapes matmul:9466 (up == 1)" scraped
curl -sf http://127.0.0.1:9090/api/v1/targets | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    print("target", t["labels"]["job"], t["scrapeUrl"], t["health"])'

python3 tests/observability/check_queries.py http://127.0.0.1:9090 \
  deploy/grafana/dashboards/matmul.json deploy/prometheus/alerts.yml 120

# A few of the dashboard's numbers, for the record.
/usr/bin/python3 - <<'PY'
import json, urllib.parse, urllib.request
for query in ('up{job="matmul"}',
              'matmul_serving{job="matmul"}',
              'sum by (shape, code) (increase(matmul_requests_total{job="matmul"}[1m]))',
              'sum(rate(matmul_flops_total{job="matmul"}[30s])) / 1e9',
              'histogram_quantile(0.99, sum by (le) (rate('
              'matmul_request_duration_seconds_bucket{job="matmul"}[30s])))'):
    url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode(
        {"query": query})
    for series in json.load(urllib.request.urlopen(url))["data"]["result"]:
        labels = {k: v for k, v in series["metric"].items()
                  if k not in ("__name__", "job", "instance")}
        print(f"{query} {labels or ''} = {float(series['value'][1]):.4g}")
PY
