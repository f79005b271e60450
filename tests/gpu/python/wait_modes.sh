#!/usr/bin/env bash
# The Python client's GPU tests under each way the daemon waits for a
# client's stream (--stream_order_wait=cpu and =gpu), one fresh daemon per
# mode, with a watchdog: a test run that outlasts WATCHDOG_S gets every
# daemon thread's stack dumped (gdb, else cuda-gdb) before it is stopped, so
# that a hang says who waits for whom. Prints each mode's unittest summary;
# writes $OUT/wait_modes/MODE.log (the tests' output, the daemon's log's
# tail) and, after a hang, MODE.threads.txt.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/python/build_native_for_device.sh:
#   run(command="bash tests/gpu/python/wait_modes.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
# Env: MODES ("gpu cpu"), TESTS (a unittest -k pattern; default every test),
# WATCHDOG_S (150), DAEMON_FLAGS (more matmul-server flags).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/wait_modes
mkdir -p "$res"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
debugger=$(command -v gdb || command -v cuda-gdb || true)
filter=()
if [ -n "${TESTS:-}" ]; then filter=(-k "$TESTS"); fi
rc=0
for mode in ${MODES:-gpu cpu}; do
  unset dir
  log=$res/$mode.log
  # shellcheck disable=SC2086  # DAEMON_FLAGS is a list of flags
  start_cuda_daemon --stream_order_wait="$mode" ${DAEMON_FLAGS:-}
  start=$SECONDS
  MATMUL_TARGET="$sock" PYTHONPATH="$PWD/client/python" PYTHONUNBUFFERED=1 \
    python3 -m unittest discover -v -s tests/gpu/python -p 'test_*.py' \
    "${filter[@]}" >"$log" 2>&1 &
  tests=$!
  while kill -0 "$tests" 2>/dev/null &&
    ((SECONDS - start < ${WATCHDOG_S:-150})); do
    sleep 1
  done
  if kill -0 "$tests" 2>/dev/null; then
    echo "$mode: still running after ${WATCHDOG_S:-150} s; daemon threads" \
      "in $res/$mode.threads.txt"
    if [ -n "$debugger" ]; then
      timeout 60 "$debugger" -batch -ex "thread apply all bt" -p "$server" \
        >"$res/$mode.threads.txt" 2>&1 || true
    fi
    kill "$tests" 2>/dev/null || true
  fi
  mode_rc=0
  wait "$tests" || mode_rc=$?
  echo "== --stream_order_wait=$mode: exit $mode_rc in $((SECONDS - start)) s"
  grep -E "^(FAIL|ERROR):|^Ran |^OK|^FAILED" "$log" || true
  stop_cuda_daemon 20 >>"$log" 2>&1 || mode_rc=1
  if [ "$mode_rc" != 0 ]; then rc=1; fi
done
exit "$rc"
