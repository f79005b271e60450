#!/usr/bin/env bash
# GPU faults through the daemon binary (run by tests/gpu/run.sh):
#  1. --test_only_inject_gpu_fault_after=2: the first product runs, the
#     second poisons the CUDA context; that one and those sent with it get
#     UNAVAILABLE, the log says health went NOT_SERVING, and the daemon
#     exits by itself with code 3 (for its supervisor to restart it).
#  2. --test_only_gpu_memory_headroom_bytes: a product too big to stage
#     gets RESOURCE_EXHAUSTED; a small one after it is served and checked;
#     SIGTERM then stops the daemon with 0.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
if [ ! -x bundle/matmul-server ] || [ ! -x bundle/matmul-cli ]; then
  echo "gpu_faults: matmul-server or matmul-cli not bundled; skipped"
  exit 0
fi
rc=0
cli() { bundle/matmul-cli --target="$sock" --timeout=60s "$@"; }
expect() {  # expect DESCRIPTION CONDITION...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; rc=1; fi
}

echo "== injected fault (out-of-range write at launch 2)"
start_cuda_daemon --metrics_listen= --worker_threads=1 \
  --test_only_inject_gpu_fault_after=2
cli run --shape=256x256x256 --check >"$dir/first.txt" 2>&1
expect "first product served" test $? -eq 0
pids=()
for i in 1 2 3 4; do
  cli run --shape=256x256x256 >"$dir/burst$i.txt" 2>&1 &
  pids+=($!)
done
unavailable=0
lost=0
for i in 1 2 3 4; do
  wait "${pids[$((i - 1))]}"
  grep -q "UNAVAILABLE" "$dir/burst$i.txt" && unavailable=$((unavailable + 1))
  grep -q "GPU was lost" "$dir/burst$i.txt" && lost=$((lost + 1))
done
echo "burst: $unavailable of 4 UNAVAILABLE, $lost of them saying the GPU was lost"
sed -n 1,3p "$dir/burst1.txt"
expect "every product from the fault on answered UNAVAILABLE" test "$unavailable" -eq 4
expect "the faulting product's answer says the GPU was lost" test "$lost" -ge 1
# The daemon stops by itself; give it the drain's few seconds.
for _ in $(seq 150); do
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server" 2>/dev/null; then
  echo "FAILED: the daemon is still running 15 s after the fault"
  kill -KILL "$server"
  rc=1
fi
wait "$server"
fault_rc=$?
echo "daemon exit code after the fault: $fault_rc"
tail -4 "$dir/server.log"
expect "exit code 3" test "$fault_rc" -eq 3
expect "log names the sticky CUDA error" grep -q "cudaErrorIllegalAddress" "$dir/server.log"
expect "log says health NOT_SERVING" grep -q "NOT_SERVING" "$dir/server.log"
# The daemon stopped by itself: what stop_cuda_daemon would clean up.
rm -rf "$dir"
unset dir
server=

echo "== out of memory (16 MiB of headroom)"
start_cuda_daemon --metrics_listen= \
  --test_only_gpu_memory_headroom_bytes=$((16 << 20))
cli run --shape=4096x4096x4096 >"$dir/big.txt" 2>&1
big_rc=$?
sed -n 1,3p "$dir/big.txt"
expect "the big product fails" test "$big_rc" -ne 0
expect "... with RESOURCE_EXHAUSTED" grep -q "RESOURCE_EXHAUSTED" "$dir/big.txt"
cli run --shape=256x256x256 --check >"$dir/small.txt" 2>&1
expect "a small product after it is served and correct" test $? -eq 0
cli run --shape=4096x4096x4096 >/dev/null 2>&1
cli run --shape=300x200x100 --check >/dev/null 2>&1
expect "and again" test $? -eq 0
stop_cuda_daemon 3
expect "SIGTERM exits 0" test $? -eq 0
exit $rc
