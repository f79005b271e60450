#!/usr/bin/env bash
# The Python client's GPU tests under each way the daemon waits for a
# client's stream (the daemon's default, --stream_order_wait=gpu, and
# =cpu), one fresh daemon per mode and run, with a watchdog: a test run that outlasts WATCHDOG_S gets every
# daemon thread's stack dumped (gdb, else cuda-gdb) before it is stopped, so
# that a hang says who waits for whom; and when the tests print nothing for
# QUIET_S (a stall that ends by itself, or a test that loops to its
# deadline), the stacks of the daemon and of the tests' process, once per
# quiet spell. Prints each mode's unittest summary; writes
# $OUT/wait_modes/MODE.log (the tests' output, the daemon's log's tail),
# MODE.quiet.txt after quiet spells and MODE.threads.txt after a hang
# (MODE-RUN.* with RUNS > 1), and a line per mode: runs passed of runs.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/build_native_for_device.sh:
#   run(command="bash tests/gpu/investigations/python/wait_modes.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
# Env: MODES ("default cpu"; "default" passes no --stream_order_wait),
# RUNS (1: runs of each mode, each with a fresh daemon), TESTS (a unittest
# -k pattern; default every test), WATCHDOG_S (150), QUIET_S (15),
# DAEMON_FLAGS (more matmul-server flags).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/wait_modes
mkdir -p "$res"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
debugger=$(command -v gdb || command -v cuda-gdb || true)
# The stacks of process $1 (all threads), appended to file $2.
dump_threads() {
  [ -n "$debugger" ] || return 0
  timeout 60 "$debugger" -batch -ex "thread apply all bt" -p "$1" \
    >>"$2" 2>&1 || true
}
filter=()
if [ -n "${TESTS:-}" ]; then filter=(-k "$TESTS"); fi
rc=0
runs=${RUNS:-1}
for mode in ${MODES:-default cpu}; do
  passed=0
  for ((run = 1; run <= runs; run++)); do
    name=$mode
    if ((runs > 1)); then name=$mode-$run; fi
    log=$res/$name.log
    mode_flags=()
    if [ "$mode" != default ]; then mode_flags=(--stream_order_wait="$mode"); fi
    # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
    start_cuda_daemon "${mode_flags[@]}" ${DAEMON_FLAGS:-}
    start=$SECONDS
    MATMUL_TARGET="$sock" PYTHONUNBUFFERED=1 python3 -m unittest discover \
      -v -s tests/gpu/checks/python -p 'test_*.py' \
      "${filter[@]}" >"$log" 2>&1 &
    tests=$!
    size=-1 quiet_since=$SECONDS dumped=0
    while kill -0 "$tests" 2>/dev/null &&
      ((SECONDS - start < ${WATCHDOG_S:-150})); do
      sleep 1
      now_size=$(stat -c %s "$log")
      if [ "$now_size" != "$size" ]; then
        size=$now_size quiet_since=$SECONDS dumped=0
      elif ((!dumped && SECONDS - quiet_since >= ${QUIET_S:-15})); then
        dumped=1
        quiet=$res/$name.quiet.txt
        echo "$name: quiet for ${QUIET_S:-15} s after: $(tail -c 200 "$log" |
          tr '\n' ' ')" | tee -a "$quiet"
        echo "== daemon (pid $server)" >>"$quiet"
        dump_threads "$server" "$quiet"
        echo "== tests (pid $tests)" >>"$quiet"
        dump_threads "$tests" "$quiet"
      fi
  done
  if kill -0 "$tests" 2>/dev/null; then
    echo "$name: still running after ${WATCHDOG_S:-150} s; daemon threads" \
      "in $res/$name.threads.txt"
    dump_threads "$server" "$res/$name.threads.txt"
    kill "$tests" 2>/dev/null || true
  fi
  mode_rc=0
  wait "$tests" || mode_rc=$?
  echo "== $name: exit $mode_rc in $((SECONDS - start)) s"
  grep -E "^(FAIL|ERROR):|^Ran |^OK|^FAILED|iterations of" "$log" || true
  stop_cuda_daemon 20 >>"$log" 2>&1 || mode_rc=1
  if [ "$mode_rc" != 0 ]; then rc=1; else passed=$((passed + 1)); fi
  done
  echo "== $mode: $passed of $runs runs passed"
done
exit "$rc"
