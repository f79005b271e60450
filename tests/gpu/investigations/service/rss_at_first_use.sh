#!/usr/bin/env bash
# Where the CUDA daemon's resident memory goes at its first products: its
# RSS by kind (anonymous, file, shm; see sample_memory.sh) idle, after 20
# products of one shape, and after SHAPES more small shapes drawn as the
# soak draws them (M, N, K up to 96, each tuned in the background), with
# CUDA's lazy module loading (the default) and with
# CUDA_MODULE_LOADING=EAGER. Tells the kernels loaded at their first
# launch apart from what the daemon keeps per shape.
#
#   bash tests/gpu/investigations/service/rss_at_first_use.sh [SHAPES]
#   (SHAPES: default 64)
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
for binary in bundle/matmul-server bundle/matmul-cli; do
  if [ ! -x "$binary" ]; then
    echo "rss_at_first_use.sh: $binary missing (run tests/gpu/bundle.sh)" >&2
    exit 1
  fi
done
shapes=${1:-64}
cli() { bundle/matmul-cli --target="$sock" "$@" >/dev/null; }
row() {
  awk -v loading="$1" -v when="$2" '
    /^VmRSS:/ {total = $2} /^RssAnon:/ {anon = $2}
    /^RssFile:/ {file = $2} /^RssShmem:/ {shm = $2}
    END {printf "| %s | %s | %d | %d | %d | %d |\n", loading, when,
         total / 1024, anon / 1024, file / 1024, shm / 1024}' \
    "/proc/$server/status"
}
echo "| module loading | when | VmRSS MB | anon | file | shm |"
echo "|---|---|---|---|---|---|"
rc=0
for loading in LAZY EAGER; do
  export CUDA_MODULE_LOADING=$loading
  start_cuda_daemon --metrics_listen=
  wait_cuda_daemon_serving 60 || rc=1
  sleep 2
  row "$loading" "idle"
  cli run --shape=96x80x64 --iterations=20 || rc=1
  sleep 5
  row "$loading" "after 20 products of one shape"
  for _ in $(seq "$shapes"); do
    cli run --shape=$((RANDOM % 96 + 1))x$((RANDOM % 96 + 1))x$((RANDOM % 96 + 1)) \
      --iterations=2 || rc=1
  done
  sleep 10
  row "$loading" "after $shapes more shapes, 10 s later"
  sleep 20
  row "$loading" "30 s later"
  stop_cuda_daemon 3 >&2 || rc=1
done
unset CUDA_MODULE_LOADING
exit $rc
