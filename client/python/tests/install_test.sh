#!/usr/bin/env bash
# pip install ./client/python into a fresh virtual environment and use the
# installed package (not the source tree) against a CPU daemon: its
# __version__ is the project's, and a product of random BF16 operands comes
# back right. No package index is used: the venv sees the system's grpcio
# and protobuf (--system-site-packages) and pip builds with the system's
# setuptools (--no-build-isolation --no-index).
# Usage: install_test.sh PYTHON3 MATMUL_SERVER PROJECT_VERSION
set -euo pipefail
python=$1 server=$2 version=$3
source_dir=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid"
  rm -rf "$dir"
}
trap cleanup EXIT

"$python" -m venv --system-site-packages "$dir/venv"
# pip builds in place otherwise; a copy keeps the source tree clean.
cp -r "$source_dir" "$dir/src"
rm -rf "$dir/src/build" "$dir/src"/*.egg-info
"$dir/venv/bin/pip" install -q --no-build-isolation --no-index "$dir/src"

mkdir "$dir/sockets" && chmod 700 "$dir/sockets"
"$server" --backend=cpu --listen="unix:$dir/sockets/matmul.sock" \
  --metrics_listen= >"$dir/server.log" 2>&1 &
server_pid=$!

cd "$dir"  # nothing of the source tree on sys.path
"$dir/venv/bin/python" - "$dir/sockets/matmul.sock" "$version" <<'PY'
import os, random, sys, time
import matmul_client

socket, version = sys.argv[1], sys.argv[2]
where = os.path.dirname(matmul_client.__file__)
assert "/venv/" in where, f"imported from {where}, not the venv"
assert matmul_client.__version__ == version, (matmul_client.__version__, version)
deadline = time.monotonic() + 60
while not os.path.exists(socket):
    assert time.monotonic() < deadline, "matmul-server did not start"
    time.sleep(0.05)

rng = random.Random()
m, n, k = 7, 5, 9
a = [rng.uniform(-1, 1) for _ in range(m * k)]
b = [rng.uniform(-1, 1) for _ in range(k * n)]
a_bf16 = matmul_client.HostTensor(matmul_client.bf16_bytes(a), (m, k))
b_bf16 = matmul_client.HostTensor(matmul_client.bf16_bytes(b), (k, n))
with matmul_client.Client("unix:" + socket) as client:
    c = client.matmul(a_bf16, b_bf16, out_dtype="fp32")
# The reference from the operands as the daemon saw them (rounded to BF16).
a_r = matmul_client.floats_from_bf16(a_bf16.data)
b_r = matmul_client.floats_from_bf16(b_bf16.data)
got = list(memoryview(c.data).cast("f"))
num = den = 0.0
for i in range(m):
    for j in range(n):
        want = sum(a_r[i * k + x] * b_r[x * n + j] for x in range(k))
        num += (got[i * n + j] - want) ** 2
        den += want ** 2
error = (num / den) ** 0.5
assert error < 1e-2, f"relative error {error}"
print(f"matmul-client {matmul_client.__version__} from {where}: "
      f"{m}x{n}x{k} relative error {error:.2e}")
PY
echo PASS
