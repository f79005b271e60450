#!/usr/bin/env bash
# Samples, every INTERVAL seconds until killed, the GPU memory in use and
# each running matmul-server's resident memory by kind (VmRSS = RssAnon,
# the heap and pinned buffers, + RssFile, the pages of its libraries it has
# touched, such as the CUDA kernels loaded so far, + RssShmem, the clients'
# shm regions it maps). The soak watches VmRSS alone; this tells which part
# a change came from.
#
#   bash tests/gpu/investigations/service/sample_memory.sh FILE [INTERVAL]
set -uo pipefail
out=${1:?usage: sample_memory.sh FILE [INTERVAL]}
interval=${2:-10}
while true; do
  {
    echo "$(date +%s) gpu $(nvidia-smi --query-gpu=memory.used \
      --format=csv,noheader 2>/dev/null)"
    for pid in $(pgrep -x matmul-server); do
      echo "  $pid $(awk '/^(VmRSS|RssAnon|RssFile|RssShmem):/ {
        printf "%s%d ", $1, $2 / 1024}' "/proc/$pid/status" 2>/dev/null)MB"
    done
  } >>"$out"
  sleep "$interval"
done
