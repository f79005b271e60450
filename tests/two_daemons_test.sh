#!/usr/bin/env bash
# Two daemons behind one target, as a Kubernetes headless Service or an
# ipv4: list names them: matmul-cli (the C++ client) spreads inline
# products over both with gRPC's round_robin, each daemon's metrics count
# some; regions go to the daemon on this host (--local_target) and the CLI
# says so; one daemon drained with SIGTERM under load fails no product, and
# the other takes the rest.
# With PYTHON3 (grpcio, protobuf), the Python client (client/python, from
# the source tree) does the same: host products inline over both daemons,
# a shared buffer (a region) on the local one, with a warning that says so.
# Usage: two_daemons_test.sh MATMUL_CLI MATMUL_SERVER [PYTHON3]
set -euo pipefail
cli=$1 server=$2 python=${3:-}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_ports() {
  python3 -c '
import socket
sockets = [socket.socket() for _ in range(4)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))'
}
read -r port_a port_b metrics_a metrics_b < <(free_ports)
# Daemon a also serves this host's unix socket (the one regions use).
"$server" --backend=cpu --listen="unix:$dir/a.sock,127.0.0.1:$port_a" \
  --metrics_listen="127.0.0.1:$metrics_a" >"$dir/a.log" 2>&1 &
pid_a=$!
"$server" --backend=cpu --listen="127.0.0.1:$port_b" \
  --metrics_listen="127.0.0.1:$metrics_b" >"$dir/b.log" 2>&1 &
pid_b=$!
pids=("$pid_a" "$pid_b")
for target in "127.0.0.1:$port_a" "127.0.0.1:$port_b"; do
  for ((i = 0; i < 100; i++)); do
    "$cli" health --target="$target" --timeout=1s >/dev/null 2>&1 && break
    sleep 0.1
  done
done
both=ipv4:127.0.0.1:$port_a,127.0.0.1:$port_b

# Products answered (any outcome) by the daemon whose /metrics is on PORT.
answered() {
  curl -sf "http://127.0.0.1:$1/metrics" |
    awk '/^matmul_requests_total[{ ]/ { n += $NF } END { printf "%d\n", n }'
}

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# 1. Spread: 40 checked products through one client.
"$cli" run --target="$both" --shape=33x17x65 --iterations=40 --check \
  >"$dir/run.out" 2>&1 || { cat "$dir/run.out"; fail "run over both daemons"; }
a=$(answered "$metrics_a") b=$(answered "$metrics_b")
echo "spread: daemon a answered $a, daemon b $b of 40"
((a > 0 && b > 0 && a + b == 40)) || fail "products not spread over both daemons"

# 2. Regions stay on this host: --mode=shm goes to --local_target, not to
# the TCP daemons (which would refuse them), and the CLI says so.
"$cli" run --target="$both" --local_target="unix:$dir/a.sock" --mode=shm \
  --shape=16x16x16 --check >"$dir/shm.out" 2>&1 ||
  { cat "$dir/shm.out"; fail "shm run with two daemons named"; }
grep -q "regions, which stay on their host: using the daemon on this host, unix:$dir/a.sock" \
  "$dir/shm.out" || { cat "$dir/shm.out"; fail "the CLI did not say where regions go"; }

# 3. The Python client, given both daemons and this host's socket.
if [[ -n $python ]]; then
  a0=$(answered "$metrics_a") b0=$(answered "$metrics_b")
  PYTHONPATH=$source_dir/client/python MATMUL_CLIENT_NATIVE=0 "$python" - \
    "$both" "unix:$dir/a.sock" <<'PY' || fail "the Python client over both daemons"
import sys, warnings
import matmul_client
from matmul_client import HostTensor
from matmul_client._tensors import bf16_bytes

both, local = sys.argv[1:3]
m, n, k = 5, 7, 16
# Small integers: every product is exact in BF16.
a_values = [float((i * 7) % 5 - 2) for i in range(m * k)]
b_values = [float((i * 3) % 5 - 2) for i in range(k * n)]
expected = [sum(a_values[r * k + i] * b_values[i * n + c] for i in range(k))
            for r in range(m) for c in range(n)]
with matmul_client.Client(both, local_target=local) as client:
    assert client.transport == "inline", client.transport
    assert (client.inline_target, client.target) == (both, local)
    a = HostTensor(bf16_bytes(a_values), (m, k))
    b = HostTensor(bf16_bytes(b_values), (k, n))
    for _ in range(20):
        assert client.matmul(a, b).tolist() == expected
    # A shared buffer is a region: it goes to the daemon on this host.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shared = client.shared_buffer(2 * m * k)
    said = [str(w.message) for w in caught]
    assert any("regions stay on their host" in w and local in w
               for w in said), said
    shared[:] = bf16_bytes(a_values)
    assert client.matmul(HostTensor(shared, (m, k)), b).tolist() == expected
print("python: 20 inline products and one through a local region checked")
PY
  a1=$(answered "$metrics_a") b1=$(answered "$metrics_b")
  echo "python spread: daemon a answered $((a1 - a0)), daemon b $((b1 - b0))" \
    "(21 products, one of them through a region on daemon a)"
  ((a1 - a0 > 1 && b1 - b0 > 0 && a1 - a0 + b1 - b0 == 21)) ||
    fail "Python products not spread over both daemons"
fi

# 4. Drain: four clients under load, daemon b stopped with SIGTERM.
b_before=$(answered "$metrics_b")
loads=()
for i in 1 2 3 4; do
  "$cli" run --target="$both" --shape=96x96x96 --iterations=5000 \
    --seed="$i" >"$dir/load$i.out" 2>&1 &
  loads+=($!)
done
# Until daemon b has answered some of this load.
for ((i = 0; i < 200; i++)); do
  (($(answered "$metrics_b") > b_before + 20)) && break
  sleep 0.05
done
a_at_stop=$(answered "$metrics_a")
running=$(jobs -pr | grep -cxF -f <(printf '%s\n' "${loads[@]}") || true)
echo "at the stop: daemon b answered $(($(answered "$metrics_b") - b_before))" \
  "of this load, $running of 4 clients still sending"
((running == 4)) || fail "the load ended before the stop: nothing to drain"
kill -TERM "$pid_b"
b_status=0
wait "$pid_b" || b_status=$?
pids=("$pid_a")
load_failures=0
for i in "${!loads[@]}"; do
  if ! wait "${loads[$i]}"; then
    load_failures=$((load_failures + 1))
    cat "$dir/load$((i + 1)).out"
  fi
done
a_after=$(answered "$metrics_a")
echo "drain: daemon b exited $b_status; $load_failures of 4 clients saw a failure;" \
  "daemon a answered $((a_after - a_at_stop)) products after the stop"
grep -q "draining" "$dir/b.log" || fail "daemon b did not drain"
((b_status == 0)) || { cat "$dir/b.log"; fail "daemon b exited $b_status"; }
((load_failures == 0)) || fail "products failed while daemon b drained"
((a_after > a_at_stop)) || fail "daemon a took none of the load after the stop"

if ((failures)); then
  echo "two daemons: $failures checks failed" >&2
  exit 1
fi
echo "two daemons: all passed"
