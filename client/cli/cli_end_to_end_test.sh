#!/bin/sh
# matmul-cli against a real matmul-server (CPU backend) on a temporary unix
# socket: info, health, a checked product in every layout, JSON output, the
# load generator (its saved JSON charted by tools/plot_bench.py when that is
# given), and health again while the daemon drains.
# Usage: cli_end_to_end_test.sh path/to/matmul-cli path/to/matmul-server \
#          [path/to/plot_bench.py]
cli="$1"
server="$2"
plot="${3:-}"
dir=$(mktemp -d)
socket="$dir/matmul.sock"
"$server" --backend=cpu --listen="unix:$socket" --metrics_listen= \
  >"$dir/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$dir"' EXIT

# Wait up to 10 s for the socket.
i=0
while [ ! -S "$socket" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$socket" ] || { echo "FAIL: server did not start"; cat "$dir/server.log"; exit 1; }

target="--target=unix:$socket"
failures=0
run() {
  if ! "$cli" "$@" >"$dir/out" 2>&1; then
    echo "FAIL: matmul-cli $*"
    cat "$dir/out"
    failures=$((failures + 1))
  fi
}

run health "$target" --timeout=5s
grep -qx 'SERVING' "$dir/out" ||
  { echo "FAIL: health did not print SERVING"; cat "$dir/out"; failures=$((failures + 1)); }
run info "$target"
run info "$target" --json
run run "$target" --shape=127x255x63 --check
run run "$target" --shape=127x255x63 --check --transpose_a --out_dtype=fp32
run run "$target" --shape=7x1000x33 --check --transpose_b --alpha=0.5 --beta=2
run run "$target" --shape=1x1x1 --check --transpose_a --transpose_b
run run "$target" --shape=33x17x65 --check --batch=3 --broadcast_b --out_dtype=fp32
run run "$target" --shape=127x255x63 --check --mode=shm --transpose_b --beta=0.5
run run "$target" --shape=33x17x65 --check --mode=shm --batch=3 --out_dtype=fp32 --iterations=3
run run "$target" --shape=40x48x56 --check --mode=shm --ring --beta=0.5 --iterations=3
run run "$target" --shape=64x64x64 --iterations=5 --json
grep -q '"latency_ms_median"' "$dir/out" ||
  { echo "FAIL: --json lacks latency_ms_median"; failures=$((failures + 1)); }

# The load generator: two levels over shm, saved; rings; CSV over a stream.
bench="bench $target --shape=16x64x64 --transpose_b --warmup=100ms --duration=200ms --max_windows=3"
run $bench --mode=shm --concurrency=1,4 --save="$dir/a.json" --label=first
run $bench --mode=shm --concurrency=3 --rings=2 --save="$dir/b.json" --label=rings
grep -q '"requests_per_second"' "$dir/a.json" ||
  { echo "FAIL: bench --save wrote no results"; failures=$((failures + 1)); }
run $bench --mode=inline --concurrency=2 --stream --csv
grep -q '^this run,16x64x64:NT,inline,2,' "$dir/out" ||
  { echo "FAIL: bench --csv lacks its row"; cat "$dir/out"; failures=$((failures + 1)); }
if [ -n "$plot" ]; then
  # The chart script reads what --save wrote (the two runs as two lines).
  if ! "$plot" "$dir/a.json" "$dir/b.json" -o "$dir/chart.png" >"$dir/out" 2>&1; then
    echo "FAIL: plot_bench.py on bench --save's JSON"
    cat "$dir/out"
    failures=$((failures + 1))
  fi
  [ "$(head -c 4 "$dir/chart.png" 2>/dev/null | tail -c 3)" = PNG ] ||
    { echo "FAIL: plot_bench.py wrote no PNG"; failures=$((failures + 1)); }
fi

# A tolerance no BF16 result can meet must fail the check with exit 1.
"$cli" run "$target" --shape=64x64x64 --check --tolerance=1e-12 >/dev/null 2>&1
[ $? -eq 1 ] || { echo "FAIL: impossible tolerance passed"; failures=$((failures + 1)); }

# Draining: SIGTERM while a slow product runs turns health NOT_SERVING and
# refuses new calls; either way the probe must fail, and say why.
"$cli" run "$target" --shape=1500x1500x1500 >/dev/null 2>&1 &
slow_pid=$!
sleep 0.5
kill -TERM "$server_pid"
sleep 0.2
if "$cli" health "$target" --timeout=2s >"$dir/out" 2>&1; then
  echo "FAIL: health passed against a draining daemon"
  failures=$((failures + 1))
elif ! grep -q 'NOT_SERVING\|health check failed' "$dir/out"; then
  echo "FAIL: health against a draining daemon gave no reason:"
  cat "$dir/out"
  failures=$((failures + 1))
fi
wait "$slow_pid" 2>/dev/null

[ "$failures" -eq 0 ] && echo "PASS" && exit 0
exit 1
