#!/usr/bin/env bash
# The zero-copy benchmark on the GPU machine: the seed's four shapes (NT, as
# nn.Linear) at concurrency 4 through cuda_ipc regions and inline, against
# the selector's standalone kernel TFLOPS (matmul-bench on the same GPU);
# then 256x256x256 at concurrency 1 over the unix socket for the service's
# own latency (end to end minus kernel), p50 and p99. Parts (PARTS; default
# standalone batching nobatch fast): standalone, batching (daemon
# defaults), nobatch (--max_batch_size=1), fast (workers that poll,
# --worker_spin_us, and clients on MatmulStream), ring (requests through a
# shared-memory request ring, daemon defaults), ringfast (the ring with
# polling on both sides: --worker_spin_us=1000 --ring_poll_spin_us=1000,
# client --ring_spin=1ms). The standalone part also runs each pick back to
# back for SUSTAINED_S seconds (default 3) over four clients' worth of A
# and C, the figure a service run at concurrency 4 compares with like for
# like, and stores its picks in the tuning cache that the later parts'
# daemons start on (they run the very kernels measured). The GPU's SM
# clock and power are logged all along (../clock_log.sh: each
# shape's table timing and sustained run are parts of their own), and
# zero_copy_table.py prints the ratios at the end.
# Results (tables, JSON, the tuning cache) go to $OUT/zero_copy/. Needs
# bundle/ (tests/gpu/bundle.sh). DAEMON_FLAGS adds matmul-server flags to
# every part's daemon.
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/zero_copy
mkdir -p "$res"
PARTS=${PARTS:-standalone batching nobatch fast}
shapes="5120x11008x2048 5120x2048x11008 5120x2048x2048 5120x512x2048"
rc=0
bench() { bundle/matmul-cli bench --target="$sock" --transpose_b "$@"; }
seed_shapes() {  # seed_shapes LABEL SUFFIX MODES [bench flags]
  local label=$1 suffix=$2 modes=$3
  shift 3
  for shape in $shapes; do
    for mode in $modes; do
      bench --shape="$shape" --mode=$mode --concurrency=4 --warmup=4s \
        --duration=1s --max_windows=8 --label="$mode$label" \
        --save="$res/${shape}_$mode$suffix.json" "$@" || rc=1
    done
  done
}
small() {  # small LABEL SUFFIX MODES [bench flags]
  local label=$1 suffix=$2 modes=$3
  shift 3
  for mode in $modes; do
    bench --shape=256x256x256 --mode=$mode --concurrency=1 --channels=1 \
      --warmup=2s --duration=1s --max_windows=8 --label="$mode$label" \
      --save="$res/256_$mode$suffix.json" "$@" || rc=1
  done
}
daemon() {
  # shellcheck disable=SC2086
  start_cuda_daemon --metrics_listen= --tuning_cache="$res/tuning.json" "$@" \
    ${DAEMON_FLAGS:-}
}

source tests/gpu/investigations/clock_log.sh
start_clock_log "$res"
for part in $PARTS; do
  part "$part"
  case $part in
    standalone)
      bundle/matmul-bench --shapes="$(echo $shapes | tr ' ' ,)" \
        --layouts=NT --repeat=1 --json="$res/standalone.json" \
        --sustained_s="${SUSTAINED_S:-3}" --operand_sets=4 \
        --tuning_cache="$res/tuning.json" \
        2> >(mark_bench_phases >"$res/standalone_progress.txt") \
        >"$res/standalone.txt" || {
        rc=1
        sleep 1  # the progress filter may still be writing
        tail -5 "$res/standalone_progress.txt"
      }
      cat "$res/standalone.txt" ;;
    batching)
      daemon
      seed_shapes "" "" "ipc inline"
      small "" "" "ipc inline"
      stop_cuda_daemon 3 || rc=1 ;;
    nobatch)
      daemon --max_batch_size=1
      seed_shapes ", batching off" "_nobatch" ipc
      small ", batching off" "_nobatch" ipc
      stop_cuda_daemon 3 || rc=1 ;;
    fast)
      daemon --worker_spin_us=1000
      seed_shapes ", stream, polling workers" "_fast" ipc --stream
      small ", stream, polling workers" "_fast" "ipc inline" --stream
      stop_cuda_daemon 3 || rc=1 ;;
    ring)
      daemon
      seed_shapes ", ring" "_ring" ipc --rings=1
      small ", ring" "_ring" ipc --rings=1
      stop_cuda_daemon 3 || rc=1 ;;
    ringfast)
      daemon --worker_spin_us=1000 --ring_poll_spin_us=1000
      seed_shapes ", ring, polling" "_ringfast" ipc --rings=1 --ring_spin=1ms
      small ", ring, polling" "_ringfast" ipc --rings=1 --ring_spin=1ms
      stop_cuda_daemon 3 || rc=1 ;;
    *) echo "unknown part $part"; rc=1 ;;
  esac
done
python3 tests/gpu/investigations/service/zero_copy_table.py "$res" || rc=1
echo "zero_copy_bench: rc=$rc"
exit $rc
