# shellcheck shell=bash
# Sourced, from the repository root, by every script under tests/gpu that
# starts a daemon (after tests/gpu/bundle_env.sh): a CUDA daemon on a fresh
# unix socket, and an MPS server for runs that want one.
#   start_cuda_daemon [matmul-server flags...]  sets dir (unless set: flags
#                                               may name files in it), sock,
#                                               server; 1, with the log's
#                                               tail, if no socket comes
#   wait_cuda_daemon_serving [SECONDS]          until matmul-cli health says
#                                               SERVING (default 60 s);
#                                               1 if it never does
#   stop_cuda_daemon [log lines]                SIGTERM, prints the log's tail,
#                                               removes dir, returns the
#                                               daemon's exit code
#   kill_cuda_daemon                            SIGKILL, for EXIT traps
#   start_mps / stop_mps [log lines]            an MPS control daemon of its
#                                               own for the CUDA processes
#                                               started in between
# SERVER names the matmul-server binary (default bundle/matmul-server), CLI
# matmul-cli (default bundle/matmul-cli); CUDA_DAEMON_FLAGS, flags for every
# daemon started (e.g. --cuda_devices=all, to run the checks on every GPU),
# before the script's own. A later flag overrides an earlier one:
# --backend=cpu in the flags gives a CPU daemon (lora_step's smoke test).
start_cuda_daemon() {
  dir=${dir:-$(mktemp -d)}
  sock="unix:$dir/matmul.sock"
  # shellcheck disable=SC2086  # CUDA_DAEMON_FLAGS is a list of flags
  ${SERVER:-bundle/matmul-server} --backend=cuda --listen="$sock" \
    ${CUDA_DAEMON_FLAGS:-} "$@" >"$dir/server.log" 2>&1 &
  server=$!
  # The daemon binds its socket once its backend is up: seconds with CUDA.
  for _ in $(seq 300); do
    [ -S "$dir/matmul.sock" ] && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "start_cuda_daemon: no socket at $dir/matmul.sock" >&2
  tail -20 "$dir/server.log" >&2
  return 1
}

wait_cuda_daemon_serving() {
  local tries=$((${1:-60} * 5))
  for _ in $(seq "$tries"); do
    "${CLI:-bundle/matmul-cli}" health --target="$sock" --timeout=1s \
      >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "wait_cuda_daemon_serving: $sock is not SERVING" >&2
  return 1
}

stop_cuda_daemon() {
  kill -TERM "$server"
  wait "$server"
  local server_rc=$?
  echo "matmul-server exit $server_rc"
  tail -"${1:-5}" "$dir/server.log"
  rm -rf "$dir"
  # The next start gets a fresh folder, and a trap finds nothing to kill.
  unset dir
  server=
  return $server_rc
}

kill_cuda_daemon() {
  if [ -n "${server:-}" ]; then kill -KILL "$server" 2>/dev/null; fi
  server=
  return 0
}

start_mps() {
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "start_mps: no nvidia-cuda-mps-control here" >&2
    return 1
  fi
  mps_dir=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! nvidia-cuda-mps-control -d; then
    echo "start_mps: the MPS control daemon did not start" >&2
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    rm -rf "$mps_dir"
    mps_dir=
    return 1
  fi
}

stop_mps() {
  # Only the server start_mps started: not one the caller's environment
  # names.
  [ -n "${mps_dir:-}" ] || return 0
  echo quit | nvidia-cuda-mps-control || true
  sleep 1  # the server's clients are gone before the next one starts
  tail -"${1:-0}" "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null || true
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -rf "$mps_dir"
  mps_dir=
}
