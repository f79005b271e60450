#!/usr/bin/env bash
# Where the daemon's CPU time goes under load: perf records a CUDA daemon
# for $SECONDS_RECORDED (3) seconds while matmul-cli bench drives it with
# $SHAPE (16x4096x4096, NT) at concurrency $LEVEL (64) over $MODE (ipc)
# with BENCH_FLAGS (--ring); prints the hottest symbols per thread and
# overall. Daemon flags come as arguments. Needs perf on the GPU machine.
# Run from the repo root with the bundle unpacked.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/cuda_daemon.sh
command -v perf >/dev/null || { echo "profile_daemon: no perf here"; exit 0; }
start_cuda_daemon --metrics_listen= "$@"
bundle/matmul-cli bench --target="$sock" --shape="${SHAPE:-16x4096x4096}" \
  --transpose_b --mode="${MODE:-ipc}" --concurrency="${LEVEL:-64}" \
  --warmup=2s --duration=1s --max_windows=6 ${BENCH_FLAGS:---ring} &
bench=$!
sleep 3
perf record -g -p "$server" -o "$OUT/perf.data" -- sleep "${SECONDS_RECORDED:-3}" \
  >/dev/null 2>&1
wait "$bench"
stop_cuda_daemon 3
perf report -i "$OUT/perf.data" --no-children --sort tid 2>/dev/null |
  grep -E '^ +[0-9]' | head -12
perf report -i "$OUT/perf.data" --no-children --sort tid,symbol -g none \
  2>/dev/null | grep -E '^ +[0-9]' | head -60 | cut -c1-140
perf report -i "$OUT/perf.data" --children --sort symbol -g none 2>/dev/null |
  grep -E '^ +[0-9]' | head -60 | cut -c1-140
