#!/usr/bin/env bash
# Starts a matmul daemon on a temporary unix socket and metrics port, soaks
# it with matmul-soak, stops it with SIGTERM and checks that it exits 0.
#
#   tests/soak/run_soak.sh                       # 60 s, CPU
#   tests/soak/run_soak.sh --duration=600s       # the long run
#   tests/soak/run_soak.sh --backend=cuda --regions=shm,ipc,vmm
#
# Options (anything else goes to matmul-soak, e.g. --clients=128,
# --scenarios=all,-truncate, --json_out=FILE):
#   --server=PATH   matmul-server (default build/server/matmul-server)
#   --soak=PATH     matmul-soak (default build/tests/soak/matmul-soak)
#   --backend=B     the daemon's --backend (default cpu)
#   --duration=D    how long to soak (default 60s)
#   --daemon_arg=X  one more flag for the daemon (repeatable)
#   --warmup=D      first soak the daemon for D with the same clients and
#                   scenarios, no memory rules (the rest are checked), so
#                   that the soak's memory baseline is a daemon that has
#                   served every kind of product once (default: none)
#
# Memory bounds: a run shorter than 10 minutes gets short-run bounds
# (--rss_max_growth=50% --rss_max_after_load=50% --rss_after_load=20s;
# flags given here come after them and win); longer runs get matmul-soak's
# defaults (5%, 25%, 60 s). Why: in its first minute under 64 clients the
# daemon's RSS still climbs (about 180 MB idle, 310-360 MB under load on
# the CPU backend, flat from about 50 s on), so a short run's growth rule
# catches only a gross leak; after the load jemalloc hands back what the
# load took within seconds (a 120 s run: 1.03 times the start 60 s after).
# The CUDA backend loads kernels the first time they run (CUDA's lazy
# module loading; the selector's tuning launches every candidate), which
# its idle RSS does not hold: --warmup pays that before the baseline, and
# the warm-up's report still prints the idle figure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
server="$root/build/server/matmul-server"
soak="$root/build/tests/soak/matmul-soak"
backend=cpu
duration=60s
warmup=""
clients=64
daemon_args=()
soak_args=()
for arg in "$@"; do
  case "$arg" in
    --server=*) server="${arg#*=}" ;;
    --soak=*) soak="${arg#*=}" ;;
    --backend=*) backend="${arg#*=}" ;;
    --duration=*) duration="${arg#*=}" ;;
    --warmup=*) warmup="${arg#*=}" ;;
    --clients=*) clients="${arg#*=}"; soak_args+=("$arg") ;;
    --daemon_arg=*) daemon_args+=("${arg#*=}") ;;
    *) soak_args+=("$arg") ;;
  esac
done

# Seconds in a duration such as 45s, 10m, 1h30m or 1.5h; empty when it
# cannot tell.
duration_seconds() {
  local text="$1" total=0 number unit
  [[ "$text" =~ ^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$ ]] || return 0
  while [[ "$text" =~ ^([0-9]+(\.[0-9]+)?)(h|ms|m|s)(.*)$ ]]; do
    number="${BASH_REMATCH[1]}"
    unit="${BASH_REMATCH[3]}"
    text="${BASH_REMATCH[4]}"
    case "$unit" in
      h) total=$(awk -v t="$total" -v n="$number" 'BEGIN { print t + n * 3600 }') ;;
      m) total=$(awk -v t="$total" -v n="$number" 'BEGIN { print t + n * 60 }') ;;
      s) total=$(awk -v t="$total" -v n="$number" 'BEGIN { print t + n }') ;;
      ms) total=$(awk -v t="$total" -v n="$number" 'BEGIN { print t + n / 1000 }') ;;
    esac
  done
  awk -v t="$total" 'BEGIN { printf "%d\n", t }'
}
# Short-run memory bounds (see the top of this file).
seconds="$(duration_seconds "$duration")"
if [[ -n "$seconds" && "$seconds" -lt 600 ]]; then
  soak_args=(--rss_max_growth=50% --rss_max_after_load=50%
             --rss_after_load=20s ${soak_args[@]+"${soak_args[@]}"})
fi
for binary in "$server" "$soak"; do
  [[ -x "$binary" ]] || { echo "run_soak: no executable $binary" >&2; exit 2; }
done

dir="$(mktemp -d /tmp/matmul-soak.XXXXXX)"
socket="$dir/matmul.sock"
# A prefix of this run's own: its /dev/shm entries are told apart from
# those of anything else running on the machine.
prefix="msoak$$"
daemon_pid=""
cleanup() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  rm -f /dev/shm/"$prefix"-* 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# A random metrics port; another is tried when the daemon cannot bind it.
started=0
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 40000))
  # Small messages, so that oversized requests cost little to send;
  # rings for every client, a holder's and a dropped one each. The soak's
  # clients are threads of one process, which the daemon counts as one
  # client: no per-client share (tests/transport_test.cc checks it).
  "$server" --backend="$backend" --listen="unix:$socket" \
    --metrics_listen="127.0.0.1:$port" --shm_prefix="$prefix" \
    --max_message_bytes=8388608 --max_rings=$((2 * clients + 32)) \
    --max_in_flight_per_client=0 \
    --ring_poll_spin_us=20 --shutdown_grace=20s \
    ${daemon_args[@]+"${daemon_args[@]}"} >"$dir/daemon.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 1 600); do
    if ! kill -0 "$daemon_pid" 2>/dev/null; then break; fi
    # Ready: the socket exists and (where curl is installed) /metrics
    # answers; matmul-soak reports a metrics endpoint that does not.
    if [[ -S "$socket" ]] && { ! command -v curl >/dev/null ||
       curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" >/dev/null; }; then
      started=1
      break
    fi
    sleep 0.1
  done
  [[ $started == 1 ]] && break
  kill -KILL "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
  rm -f "$socket"
done
if [[ $started != 1 ]]; then
  echo "run_soak: the daemon did not start; its log:" >&2
  cat "$dir/daemon.log" >&2
  exit 1
fi

status=0
# What both runs of matmul-soak (the warm-up and the soak) are told of the
# daemon.
daemon_flags=(--target="unix:$socket" --daemon_pid="$daemon_pid"
              --metrics="127.0.0.1:$port" --shm_prefix="$prefix")
if [[ -n "$warmup" ]]; then
  # The same clients and scenarios; no report file, no memory rules, a
  # short wait after the load for the allocator to give back what it took.
  warmup_args=()
  for arg in ${soak_args[@]+"${soak_args[@]}"}; do
    [[ "$arg" == --json_out=* ]] || warmup_args+=("$arg")
  done
  echo "run_soak: warm-up, $warmup (the soak's memory baseline comes after it)"
  "$soak" "${daemon_flags[@]}" ${warmup_args[@]+"${warmup_args[@]}"} \
    --duration="$warmup" --rss_max_growth=1000000% \
    --rss_max_after_load=1000000% --rss_after_load=5s || status=$?
  if [[ $status != 0 ]]; then
    echo "run_soak: the warm-up failed; the soak itself does not run" >&2
  fi
fi
if [[ $status == 0 ]]; then
  "$soak" "${daemon_flags[@]}" --duration="$duration" \
    ${soak_args[@]+"${soak_args[@]}"} || status=$?
fi

# A failed run (requests left in flight among others): the daemon's
# threads' stacks, where gdb is installed, before it is stopped.
if [[ $status != 0 ]] && kill -0 "$daemon_pid" 2>/dev/null &&
   command -v gdb >/dev/null; then
  echo "run_soak: the daemon's threads (gdb):"
  timeout 60 gdb -batch -p "$daemon_pid" -ex "thread apply all bt" 2>&1 |
    grep -v "^\[New LWP\|^$" | head -n 400 || true
fi

# A graceful stop: SIGTERM, every accepted request answered, exit 0 within
# the daemon's --shutdown_grace (20 s) and the 3 s it may wait for a kernel
# still running.
if kill -0 "$daemon_pid" 2>/dev/null; then
  term_start=$(date +%s.%N)
  kill -TERM "$daemon_pid"
  daemon_status=0
  for _ in $(seq 1 600); do
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    echo "run_soak: the daemon did not exit within 60 s of SIGTERM" >&2
    kill -KILL "$daemon_pid"
    status=1
  fi
  wait "$daemon_pid" || daemon_status=$?
  exit_seconds=$(awk -v a="$term_start" -v b="$(date +%s.%N)" \
    'BEGIN { printf "%.1f", b - a }')
  daemon_pid=""
  if [[ $daemon_status != 0 ]]; then
    echo "run_soak: the daemon exited with status $daemon_status after SIGTERM" >&2
    status=1
  elif awk -v t="$exit_seconds" 'BEGIN { exit !(t > 23) }'; then
    echo "run_soak: the daemon exited 0 but $exit_seconds s after SIGTERM, past its grace of 20 s + 3 s" >&2
    status=1
  else
    echo "run_soak: the daemon exited 0, $exit_seconds s after SIGTERM (grace 20 s)"
  fi
else
  echo "run_soak: the daemon is gone before SIGTERM" >&2
  status=1
fi
if [[ $status != 0 ]]; then
  echo "run_soak: FAILED; the daemon's log (last 40 lines):" >&2
  tail -n 40 "$dir/daemon.log" >&2
fi
exit $status
