#!/usr/bin/env bash
# pip install ./client/python into fresh virtual environments and use the
# installed package (not the source tree) against a CPU daemon:
#   1. with the native extension (built from this source tree; the install
#      fails if it cannot be): __version__ is the project's, products go
#      through the extension's request ring with host and torch CPU tensors,
#      the same as over gRPC, 64 at once with matmul_async, the daemon's
#      errors read the same, the fallback to gRPC (tests/installed_check.py
#      native), and the package's unittest suite passes with the ring;
#   2. where pybind11 is missing: pip installs the package without the
#      extension and warns, the package goes over gRPC (installed_check.py
#      grpc).
# No package index is used: the venvs see the system's grpcio, protobuf,
# pybind11 and torch (--system-site-packages) and pip builds with the
# system's setuptools (--no-build-isolation --no-index). CXX (e.g.
# "ccache g++") compiles the extension when set.
# Usage: install_test.sh PYTHON3 MATMUL_SERVER PROJECT_VERSION
set -euo pipefail
if [[ $# -ne 3 || $1 == --help ]]; then
  echo "usage: install_test.sh PYTHON3 MATMUL_SERVER PROJECT_VERSION" >&2
  exit 2
fi
python=$1 server=$2 version=$3
tests_dir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$tests_dir/../../.." && pwd)
dir=$(mktemp -d)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid"
  rm -rf "$dir"
}
trap cleanup EXIT

# pip builds in place; a copy of what the build reads (the package, the C++
# client and proto/) keeps the source tree clean.
mkdir "$dir/src"
cp -r "$root/client" "$root/common" "$root/proto" "$dir/src/"
rm -rf "$dir/src/client/python/build" "$dir/src/client/python"/*.egg-info \
  "$dir/src/client/python/matmul_client"/_native*.so
export CCACHE_BASEDIR=$dir  # cache hits although the copy moves each run

"$python" -m venv --system-site-packages "$dir/venv"
MATMUL_CLIENT_BUILD_NATIVE=1 "$dir/venv/bin/pip" install -q \
  --no-build-isolation --no-index "$dir/src/client/python"

# As where pybind11 is not installed: a module of that name that does not
# import comes first on the build's path.
"$python" -m venv --system-site-packages "$dir/venv-grpc"
mkdir "$dir/no-pybind11"
echo 'raise ImportError("hidden by install_test.sh")' \
  >"$dir/no-pybind11/pybind11.py"
PYTHONPATH=$dir/no-pybind11 "$dir/venv-grpc/bin/pip" install -v \
  --no-build-isolation --no-index "$dir/src/client/python" \
  >"$dir/pip-grpc.log" 2>&1 || { cat "$dir/pip-grpc.log"; exit 1; }
grep -q "WITHOUT the native extension.*pybind11 is not installed" \
  "$dir/pip-grpc.log" || {
  echo "FAIL: pip install without pybind11 gave no warning" >&2
  exit 1
}

mkdir "$dir/sockets" && chmod 700 "$dir/sockets"
socket=$dir/sockets/matmul.sock
"$server" --backend=cpu --listen="unix:$socket" \
  --metrics_listen= >"$dir/server.log" 2>&1 &
server_pid=$!

cd "$dir"  # nothing of the source tree on sys.path
"$dir/venv/bin/python" - "$socket" "$version" <<'PY'
import os, sys, time
import matmul_client

socket, version = sys.argv[1], sys.argv[2]
where = os.path.dirname(matmul_client.__file__)
assert "/venv/" in where, f"imported from {where}, not the venv"
assert matmul_client.__version__ == version, (matmul_client.__version__, version)
deadline = time.monotonic() + 60
while not os.path.exists(socket):
    assert time.monotonic() < deadline, "matmul-server did not start"
    time.sleep(0.05)
print(f"matmul-client {matmul_client.__version__} from {where}")
PY
"$dir/venv/bin/python" "$tests_dir/installed_check.py" "$socket" native
"$dir/venv-grpc/bin/python" "$tests_dir/installed_check.py" "$socket" grpc
# The unittest suite (each test file starts its own daemon) with the
# installed package, whose products go through the ring.
MATMUL_CLIENT_TEST_INSTALLED=1 MATMUL_CLIENT_TEST_TRANSPORT=ring \
  MATMUL_SERVER=$server \
  "$dir/venv/bin/python" -m unittest discover -s "$tests_dir"
echo PASS
