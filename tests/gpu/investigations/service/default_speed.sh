#!/usr/bin/env bash
# What a user gets with the daemon's default flags, in one device call
# (issue 33's figures): the stream-order GPU tests, the Python GPU tests
# against a fresh default daemon RUNS times (wait_modes.sh, the several-
# rings stall test among them), tests/gpu/bench/python_bench.sh's
# native_speed (per call with a synchronize, 100 stream-ordered in a row,
# eight processes, each beside torch in the same run) and lora_step (the
# LoRA training step, also under MPS), grpc_floor.sh (unary gRPC against a
# bare ping-pong) and the idle daemon's CPU. Each part has a time limit;
# a summary is printed last and written to $OUT/default_speed.txt, the
# JSON reports beside it, and every log packed into $OUT/logs.tar.xz (the
# device tool brings back 8 files).
#
# Usage, from the repo root on the GPU machine, after tests/gpu/bundle.sh
# and tests/gpu/build_native_for_device.sh here:
#   run(command="bash tests/gpu/investigations/service/default_speed.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
# Env: PARTS (space-separated, default "tests python native lora grpc idle"),
#      RUNS (Python GPU test runs, default 10), REPEATS (3: runs of each
#      benchmark), MPS (lora_step's: off, on or both, default both),
#      DAEMON_FLAGS (more matmul-server flags for every part).
set -uo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary=$OUT/default_speed.txt
: >"$summary"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
export DAEMON_FLAGS=${DAEMON_FLAGS:-}
parts=${PARTS:-tests python native lora grpc idle}
repeats=${REPEATS:-3}

# part NAME LIMIT_S CMD...: runs CMD with OUT=$logs/NAME, its output to
# $logs/NAME.log, and notes its exit code and time in the summary.
part() {
  local name=$1 limit=$2
  shift 2
  [[ " $parts " == *" $name "* ]] || return 0
  local start=$SECONDS rc=0
  mkdir -p "$logs/$name"
  OUT=$logs/$name timeout "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  printf '== %-8s rc=%-3s %4ss\n' "$name" "$rc" $((SECONDS - start)) \
    >>"$summary"
}

# The idle daemon: CPU time over 10 s, starting 1 s after a burst of
# requests through a ring (so that pollers and workers had cause to spin).
idle_cpu() {
  # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
  start_cuda_daemon --metrics_listen= $DAEMON_FLAGS
  bundle/matmul-cli bench --target="$sock" --shape=256x256x256 \
    --transpose_b --mode=shm --rings=1 --concurrency=4 --duration=3s \
    --max_windows=1 --stable_windows=1
  sleep 1
  local ticks before after
  ticks=$(getconf CLK_TCK)
  before=$(awk '{print $14 + $15}' "/proc/$server/stat")
  sleep 10
  after=$(awk '{print $14 + $15}' "/proc/$server/stat")
  echo "idle daemon: $(awk -v d=$((after - before)) -v t="$ticks" \
    'BEGIN { printf "%.2f", 100 * d / t / 10 }')% of one core over 10 s" \
    "(target < 2%)"
  stop_cuda_daemon 3
}

part tests 300 env TESTS="launch_order_test client_stream_order_test \
stream_order_test cuda_backend_test stream_slots_test" SKIP_BENCH=1 \
  SKIP_TORCH=1 STEPS=none bash tests/gpu/run.sh
part python 560 env MODES=default RUNS="${RUNS:-10}" WATCHDOG_S=120 \
  bash tests/gpu/investigations/python/wait_modes.sh
part native 480 env MPS=off bash tests/gpu/bench/python_bench.sh native_speed \
  --repeat="$repeats"
part lora 560 env MPS="${MPS:-both}" bash tests/gpu/bench/python_bench.sh \
  lora_step --repeat="$repeats" --products
part grpc 300 env REPEATS="$repeats" CONFIGS=defaults \
  bash tests/gpu/investigations/service/grpc_floor.sh
export -f idle_cpu start_cuda_daemon stop_cuda_daemon
part idle 60 bash -c idle_cpu

# The figures, then everything else packed.
for name in $parts; do
  [ -f "$logs/$name.log" ] || continue
  {
    echo "---- $name"
    case $name in
      tests) grep -E "^\s*(\S+_test\s+rc=|\[  (PASSED|FAILED)|PASSED|FAILED)" \
        "$logs/$name.log" | tail -20 ;;
      python) grep -E "^== |iterations of|^FAIL|^ERROR" "$logs/$name.log" ;;
      *) tail -40 "$logs/$name.log" ;;
    esac
  } >>"$summary"
  find "$logs/$name" -maxdepth 1 -name '*.json' -exec cp {} "$OUT/" \;
done
tar -C "$logs" -cJf "$OUT/logs.tar.xz" .
cat "$summary"
