#!/usr/bin/env bash
# The image, built from the Dockerfile with podman and started the way the
# README starts it, then used from the host (run as root; CI runs it):
#   1. podman and its settings (podman_setup.sh), the stand-in base images
#      (standin_images.sh: made once per machine);
#   2. both stages of the Dockerfile built on the stand-ins, tagged
#      matmul:VERSION and left in podman storage; every library of
#      /opt/matmul found inside the image (ldd);
#   3. the daemon started with the socket directory bound from the host
#      (uid 990, a host group, 0750), --ipc=host --pid=host, CPU backend;
#      then, as a host user in that group: health SERVING, checked products
#      inline, through a shm region made on the host and through a request
#      ring, and the Python client's products through its ring; a user
#      outside the group refused at the socket; the image's HEALTHCHECK
#      passing; the daemon running as uid 990;
#   4. `podman stop` while products are in flight: each one answered, and
#      the daemon's exit code 0;
#   5. compose: compose_test.sh.
# Each step prints its time. CI builds one CUDA architecture and the daemon
# and CLI alone (CONTAINER_CMAKE_ARGS=-DMATMUL_OWN_KERNELS=OFF would also
# leave out the project's own kernels); the image for a real host keeps the
# Dockerfile's defaults:
#   CONTAINER_CUDA_ARCHITECTURES="121a;90a;120a" \
#     CONTAINER_BUILD_TARGETS="matmul-server matmul-cli matmul-tune matmul-bench" \
#     tests/container/container_test.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
here=$root/tests/container
archs=${CONTAINER_CUDA_ARCHITECTURES:-121a}
targets=${CONTAINER_BUILD_TARGETS:-matmul-server matmul-cli}
version=$(sed -n 's/^project(matmul_service VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
image=matmul:$version
name=matmul-container-test
group=matmul-ci
member=matmul-ci-client
outsider=matmul-ci-outsider
sockets=/run/matmul-container-test

if [[ $(id -u) -ne 0 ]]; then
  echo "container_test.sh: run as root (podman, users, /run)" >&2
  exit 2
fi

work=$(mktemp -d /var/tmp/matmul-container-test.XXXXXX)
chmod 0755 "$work"
cleanup() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$work" "$sockets"
}
trap cleanup EXIT

passed=0
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# Runs one check, timed; a failure is counted and the next check still runs.
step() {
  local title=$1 start status=0
  shift
  start=$(date +%s)
  echo "=== $title"
  "$@" || status=$?
  echo "=== $title: $( ((status == 0)) && echo passed || echo "FAILED ($status)"
    ), $(($(date +%s) - start)) s"
  if ((status == 0)); then
    passed=$((passed + 1))
  else
    fail "$title"
  fi
  last=$status
}
# After a step the rest cannot do without.
or_stop() {
  ((last == 0)) && return
  echo "container: $passed passed, $failures failed"
  exit 1
}

# --- 1, 2: podman, base images, the image ------------------------------------

# No layer per instruction unless asked (CONTAINER_BUILD_LAYERS=true, which
# keeps a cache between runs): on vfs storage each one copies the whole
# file system.
build_image() {
  podman build --format docker --network host \
    --layers="${CONTAINER_BUILD_LAYERS:-false}" \
    --build-arg BUILD_IMAGE=localhost/matmul-standin/cuda:13.0-devel \
    --build-arg RUNTIME_IMAGE=localhost/matmul-standin/cuda:13.0-runtime \
    --build-arg "CUDA_ARCHITECTURES=$archs" \
    --build-arg "BUILD_TARGETS=$targets" \
    --build-arg "CMAKE_ARGS=${CONTAINER_CMAKE_ARGS:-}" \
    --build-arg "GIT_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
    -t "$image" -f Dockerfile . >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log" >&2; return 1; }
  grep -E '^collected into' "$work/build.log" || true
  # The build stage's image, a few GB on vfs, is not kept.
  podman image prune -f >/dev/null
  echo "image $image: $(podman image inspect -f '{{.Size}}' "$image" |
    awk '{printf "%.0f MB", $1 / 1e6}')"
}

# Every binary of /opt/matmul resolves every library inside the image.
check_libraries() {
  podman run --rm --no-healthcheck --entrypoint /bin/sh "$image" -c \
    'for f in /opt/matmul/bin/*; do echo "$f:"; ldd "$f"; done' >"$work/ldd.txt"
  grep -c '=>' "$work/ldd.txt" | xargs echo "libraries resolved:"
  if grep 'not found' "$work/ldd.txt"; then
    echo "libraries missing in the image" >&2
    return 1
  fi
  grep -q '/opt/matmul/bin/matmul-server:' "$work/ldd.txt"
}

step "podman and its settings" "$here/podman_setup.sh"
step "stand-in base images" "$here/standin_images.sh"
step "podman build ($image, CUDA $archs, $targets)" build_image
or_stop
step "ldd inside the image" check_libraries

# --- 3: the daemon, used from the host ---------------------------------------

getent group "$group" >/dev/null || groupadd --system "$group"
gid=$(getent group "$group" | cut -d: -f3)
id "$member" >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /bin/sh -G "$group" "$member"
id "$outsider" >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /bin/sh "$outsider"
rm -rf "$sockets"
install -d -o 990 -g "$gid" -m 0750 "$sockets"
socket=$sockets/matmul.sock
target=unix:$socket

# The image's own matmul-cli and libraries, run on the host.
podman create --name "$name-copy" "$image" >/dev/null
podman cp "$name-copy:/opt/matmul" "$work/opt"
podman rm "$name-copy" >/dev/null
chmod -R a+rX "$work/opt"
as() {
  local user=$1
  shift
  runuser -u "$user" -- env HOME="$work" LD_LIBRARY_PATH="$work/opt/lib" "$@"
}
cli() { as "$member" "$work/opt/bin/matmul-cli" "$@"; }

metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_daemon() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  podman run -d --name "$name" --ipc=host --pid=host --network host \
    --group-add "$gid" -v "$sockets:/run/matmul" \
    -v matmul-container-test-cache:/var/cache/matmul \
    "$image" --backend=cpu --listen=unix:/run/matmul/matmul.sock \
    --socket_mode=0660 --socket_group="$gid" \
    --metrics_listen="127.0.0.1:$metrics_port" \
    --tuning_cache=/var/cache/matmul/tuning.json >/dev/null
  local i
  for ((i = 0; i < 300; i++)); do
    [[ -S $socket ]] && return 0
    sleep 0.1
  done
  podman logs "$name" >&2
  return 1
}
step "podman run (CPU backend, socket dir bound from the host)" start_daemon
or_stop

check_socket_and_user() {
  local mode pid uid
  mode=$(stat -c '%A %u %g' "$socket")
  echo "socket: $mode"
  [[ $mode == "srw-rw---- 990 $gid" ]] || { echo "socket is $mode" >&2; return 1; }
  pid=$(podman inspect -f '{{.State.Pid}}' "$name")
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  echo "daemon: host pid $pid, uid $uid"
  [[ $uid == 990 ]]
}
step "socket 0660 990:$group, daemon uid 990" check_socket_and_user

check_member() {
  local status=0
  cli health --target="$target" --timeout=5s >"$work/health" 2>&1 || status=$?
  cat "$work/health"
  [[ $status == 0 && $(cat "$work/health") == SERVING ]] || return 1
  cli run --target="$target" --shape=127x255x63 --check --iterations=3 &&
    cli run --target="$target" --shape=33x17x65 --check --batch=3 --out_dtype=fp32 &&
    cli run --target="$target" --shape=127x255x63 --check --mode=shm --transpose_b --beta=0.5 --iterations=3 &&
    cli run --target="$target" --shape=40x48x56 --check --mode=shm --ring --iterations=5
}
step "as a member of $group: health, inline, shm region, ring" check_member

check_outsider() {
  local status=0
  as "$outsider" "$work/opt/bin/matmul-cli" health --target="$target" \
    --timeout=3s >"$work/outsider" 2>&1 || status=$?
  cat "$work/outsider"
  ((status != 0)) && grep -qi 'permission denied' "$work/outsider"
}
step "a user outside $group refused at the socket" check_outsider

check_healthcheck() {
  local i
  for ((i = 0; i < 30; i++)); do
    podman healthcheck run "$name" && return 0
    sleep 1
  done
  return 1
}
step "podman healthcheck run" check_healthcheck

# The Python client, installed into a venv with its native extension.
install_python_client() {
  mkdir "$work/src" &&
    cp -r client common proto "$work/src/" &&
    rm -rf "$work/src/client/python/build" "$work/src/client/python"/*.egg-info \
      "$work/src/client/python/matmul_client"/_native*.so &&
    /usr/bin/python3 -m venv --system-site-packages "$work/venv" &&
    MATMUL_CLIENT_BUILD_NATIVE=1 "$work/venv/bin/pip" install -q \
      --no-build-isolation --no-index "$work/src/client/python" &&
    chmod -R a+rX "$work/venv"
}
step "pip install ./client/python (native extension)" install_python_client

python_products() {
  as "$member" "$work/venv/bin/python" "$here/python_products.py" "$target" \
    "http://127.0.0.1:$metrics_port/metrics"
}
step "Python client: products through its request ring" python_products

# --- 4: podman stop drains ----------------------------------------------------

drain_on_stop() {
  install -d -o "$member" "$work/drain"
  as "$member" "$work/venv/bin/python" "$here/python_products.py" "$target" \
    "http://127.0.0.1:$metrics_port/metrics" --drain="$work/drain/sent" &
  local client=$! i
  # The client writes the file once the daemon has its products in flight.
  for ((i = 0; i < 1200; i++)); do
    [[ -e $work/drain/sent ]] && break
    kill -0 "$client" 2>/dev/null || break
    sleep 0.1
  done
  [[ -e $work/drain/sent ]] && echo "client: $(cat "$work/drain/sent")"
  podman stop -t 60 "$name" >/dev/null
  local exit_code status=0
  exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
  wait "$client" || status=$?
  podman logs "$name" 2>&1 | tail -3
  echo "daemon exit code $exit_code, client $status"
  [[ -e $work/drain/sent && $exit_code == 0 && $status == 0 ]]
}
step "podman stop drains: every accepted product answered, exit 0" drain_on_stop

# --- 5: compose ---------------------------------------------------------------

step "podman-compose: daemon and Prometheus" \
  "$here/compose_test.sh" "$image" "$gid" "$work/opt"

echo "$image is left in podman storage"
echo "container: $passed passed, $failures failed"
((failures == 0))
