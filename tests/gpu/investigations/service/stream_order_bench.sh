#!/usr/bin/env bash
# Issue 21's stream-ordered target on the GPU machine: stream-order-bench
# (tests/stream_order_bench) against a CUDA daemon started from bundle/,
# one daemon per variant: 100 stream-ordered products back to back on one
# CUDA stream, no synchronize between them, against cuBLASLt doing the
# same in the same process on the same operands, on the seed's four NT
# shapes; TFLOP/s median (min..max) over the repetitions, the ratio and
# the target.
#
# Runs alone after tests/gpu/bundle.sh built bundle/ here:
#   run(command="bash tests/gpu/investigations/service/stream_order_bench.sh",
#       carry=["bundle"])
# Results go to $OUT/stream_order/: VARIANT.txt (the table) and VARIANT.json
# per variant, and with TUNE=1 tuning.json and standalone.txt.
#
# Env:
#   VARIANTS     daemon settings to run, in order (default "default polling"):
#                  default  the daemon's defaults
#                  polling  workers and the ring's poller poll for 1 ms before
#                           they sleep (--worker_spin_us=1000
#                           --ring_poll_spin_us=1000), and so does the
#                           client's completion thread (--ring_spin_us=1000)
#                  gpu_wait the daemon waits for the client's stream on the
#                           GPU (--stream_order_wait=gpu)
#                  gpu_wait_polling  both of the above
#   TUNE         1 (default): matmul-bench first times every kernel for the
#                shapes and stores its picks in the tuning cache the daemons
#                start on, so they run the measured kernels from the first
#                product instead of tuning in the background during the
#                warm-up; 0 skips it.
#   SHAPES       comma-separated MxNxK (default: the seed's four shapes)
#   PRODUCTS     products per burst (100); REPETITIONS (5); WARMUP_S (2)
#   DAEMON_FLAGS extra matmul-server flags for every daemon
#   BENCH_ARGS   extra stream-order-bench flags
#   SERVER       the matmul-server binary (bundle/matmul-server)
set -euo pipefail

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/stream_order
mkdir -p "$res"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
for binary in stream-order-bench matmul-server; do
  if [ ! -x "bundle/$binary" ]; then
    echo "stream_order_bench: bundle/$binary missing (run tests/gpu/bundle.sh)" >&2
    exit 1
  fi
done

VARIANTS=${VARIANTS:-default polling}
SHAPES=${SHAPES:-5120x11008x2048,5120x2048x11008,5120x2048x2048,5120x512x2048}

echo "commit: $(head -1 bundle/COMMIT 2>/dev/null || true)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw \
  --format=csv || true

cache=$res/tuning.json
if [ "${TUNE:-1}" = 1 ]; then
  if [ ! -x bundle/matmul-bench ]; then
    echo "stream_order_bench: bundle/matmul-bench missing; TUNE=0 skips it" >&2
    exit 1
  fi
  echo "== matmul-bench: tuning $SHAPES into $cache"
  bundle/matmul-bench --shapes="$SHAPES" --layouts=NT --repeat=1 \
    --tuning_cache="$cache" >"$res/standalone.txt"
  cat "$res/standalone.txt"
fi

# The daemon of the variant running now, killed on any exit.
trap kill_cuda_daemon EXIT

rc=0
for variant in $VARIANTS; do
  case $variant in
    default)
      daemon_flags=()
      bench_flags=() ;;
    polling)
      daemon_flags=(--worker_spin_us=1000 --ring_poll_spin_us=1000)
      bench_flags=(--ring_spin_us=1000) ;;
    gpu_wait)
      daemon_flags=(--stream_order_wait=gpu)
      bench_flags=() ;;
    gpu_wait_polling)
      daemon_flags=(--stream_order_wait=gpu --worker_spin_us=1000
                    --ring_poll_spin_us=1000)
      bench_flags=(--ring_spin_us=1000) ;;
    *)
      echo "stream_order_bench: unknown variant $variant" >&2
      exit 2 ;;
  esac
  echo "== $variant: matmul-server ${daemon_flags[*]} ${DAEMON_FLAGS:-}"
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" \
    "${daemon_flags[@]}" ${DAEMON_FLAGS:-}
  # shellcheck disable=SC2086
  if ! bundle/stream-order-bench --target="$sock" --shapes="$SHAPES" \
    --products="${PRODUCTS:-100}" --repetitions="${REPETITIONS:-5}" \
    --warmup_s="${WARMUP_S:-2}" --json="$res/$variant.json" \
    "${bench_flags[@]}" ${BENCH_ARGS:-} >"$res/$variant.txt"; then
    rc=1
  fi
  cat "$res/$variant.txt"
  stop_cuda_daemon 5 || rc=1
done
echo "stream_order_bench: rc=$rc"
exit $rc
