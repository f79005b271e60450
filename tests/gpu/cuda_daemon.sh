# shellcheck shell=bash
# Sourced by tests/gpu/steps/*.sh: a CUDA daemon on a fresh unix socket.
#   start_cuda_daemon [matmul-server flags...]  sets dir (unless set: flags
#                                               may name files in it), sock,
#                                               server
#   stop_cuda_daemon [log lines]                SIGTERM, prints the log's tail,
#                                               returns the daemon's exit code
# SERVER names the matmul-server binary (default bundle/matmul-server);
# CUDA_DAEMON_FLAGS, flags for every daemon started (e.g.
# --cuda_devices=all, to run the steps on every GPU), before the step's own.
start_cuda_daemon() {
  dir=${dir:-$(mktemp -d)}
  sock="unix:$dir/matmul.sock"
  # shellcheck disable=SC2086  # CUDA_DAEMON_FLAGS is a list of flags
  ${SERVER:-bundle/matmul-server} --backend=cuda --listen="$sock" \
    ${CUDA_DAEMON_FLAGS:-} "$@" >"$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do  # the daemon needs a moment to bind its socket
    [ -S "$dir/matmul.sock" ] && break
    sleep 0.1
  done
}

stop_cuda_daemon() {
  kill -TERM "$server"
  wait "$server"
  local server_rc=$?
  echo "matmul-server exit $server_rc"
  tail -"${1:-5}" "$dir/server.log"
  rm -rf "$dir"
  return $server_rc
}
