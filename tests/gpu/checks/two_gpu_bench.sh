#!/usr/bin/env bash
# One daemon on every GPU (--cuda_devices=all) against the same daemon's
# first GPU alone, with matmul-cli bench and CUDA IPC regions: for each
# case, CLIENTS requests in flight on GPU 0, then CLIENTS/2 on each of GPU 0
# and GPU 1 at once (two bench processes, each under CUDA_VISIBLE_DEVICES,
# their regions routed by device UUID). Prints aggregate requests/s and
# TFLOP/s per side, their ratio against the target (>= 1.9x), and the
# daemon's launches per device from /metrics (both GPUs must have run).
# Needs two GPUs; prints SKIP and exits 0 with fewer. A step of
# tests/gpu/run.sh; alone, from the repo root on a machine with two GPUs
# after tests/gpu/bundle.sh built bundle/ here:
#   run(command="bash tests/gpu/checks/two_gpu_bench.sh", carry=["bundle"],
#       kind="nvidia-h200-x2")
# Env: OUT (default ./gpu-out; writes $OUT/two_gpu_bench/), CASES
# ("shape:clients" pairs, default "5120x2048x2048:8 16x4096x4096:16"),
# WINDOW (bench --duration, 3s), BENCH_FLAGS (more matmul-cli bench flags,
# e.g. --rings=2 where gRPC caps the small shape's requests/s), CLI and
# SERVER (default bundle/...).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/two_gpu_bench
mkdir -p "$res"
rm -f "$res/summary.txt"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
CLI=${CLI:-bundle/matmul-cli}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ((gpus < 2)); then
  echo "SKIP: $gpus GPU(s); two_gpu_bench needs two"
  exit 0
fi

port=9472
start_cuda_daemon --cuda_devices=all --metrics_listen="127.0.0.1:$port"
trap 'stop_cuda_daemon 10 || true' EXIT

# bench GPU CLIENTS SHAPE NAME: matmul-cli bench on GPU `GPU` alone (as the
# client sees it), CLIENTS in flight, results in $res/NAME.json.
bench() {
  # shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
  CUDA_VISIBLE_DEVICES=$1 "$CLI" bench --target="$sock" --mode=ipc \
    --shape="$3" --transpose_b --concurrency="$2" --warmup=2s \
    --duration="${WINDOW:-3s}" --max_windows=3 --stable_windows=3 \
    --label="$4" --save="$res/$4.json" ${BENCH_FLAGS:-} >"$res/$4.txt" 2>&1
}

launches() {
  python3 - "http://127.0.0.1:$port/metrics" <<'EOF'
import collections, re, sys, urllib.request
counts = collections.Counter()
for line in urllib.request.urlopen(sys.argv[1]).read().decode().splitlines():
    m = re.match(r'matmul_launch_duration_seconds_count\{.*device="(\w+)".*\} (\S+)',
                 line)
    if m:
        counts[m.group(1)] += float(m.group(2))
print(" ".join(f"device {d}: {int(n)}" for d, n in sorted(counts.items())))
EOF
}

rc=0
for case in ${CASES:-5120x2048x2048:8 16x4096x4096:16}; do
  shape=${case%%:*} clients=${case##*:}
  half=$((clients / 2))
  bench 0 "$clients" "$shape" "${shape}_one" || rc=1
  bench 0 "$half" "$shape" "${shape}_gpu0" &
  first=$!
  bench 1 "$half" "$shape" "${shape}_gpu1" || rc=1
  wait "$first" || rc=1
  python3 - "$res" "$shape" "$clients" <<'EOF' >>"$res/summary.txt" || rc=1
import json, os, sys
res, shape, clients = sys.argv[1:]
def level(name):
    path = os.path.join(res, f"{shape}_{name}.json")
    with open(path) as f:
        levels = json.load(f)["levels"]
    if not levels or levels[-1]["errors"]:
        sys.exit(f"{shape} {name}: no clean level in {path}")
    return levels[-1]
one = level("one")
both = [level("gpu0"), level("gpu1")]
rps = sum(l["requests_per_second"] for l in both)
tflops = sum(l["tflops"] for l in both)
ratio = rps / one["requests_per_second"]
print(f"{shape} NT, {clients} clients: one GPU "
      f"{one['requests_per_second']:.0f} req/s {one['tflops']:.1f} TFLOP/s; "
      f"two GPUs {rps:.0f} req/s {tflops:.1f} TFLOP/s "
      f"({both[0]['requests_per_second']:.0f} + "
      f"{both[1]['requests_per_second']:.0f}); ratio {ratio:.2f}x "
      f"(target 1.9x: {'met' if ratio >= 1.9 else 'not met'})")
EOF
done
cat "$res/summary.txt"
echo "launches per device: $(launches)" | tee -a "$res/summary.txt"
exit "$rc"
