#!/bin/sh
# matmul-cli's exit-code contract without a daemon: 0 for --help, 2 for
# every usage error, 1 when nothing listens at the target.
# Usage: cli_usage_test.sh path/to/matmul-cli
cli="$1"
nobody="unix:${TMPDIR:-/tmp}/matmul-cli-nobody-$$.sock"
failures=0

expect() {
  want="$1"
  shift
  "$cli" "$@" >/dev/null 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: matmul-cli $* exited $got, want $want"
    failures=$((failures + 1))
  fi
}

expect 0 --help
expect 0 help
expect 2
expect 2 frobnicate
expect 2 run --shape=12x3
expect 2 run --shape=0x1x1
expect 2 run --shape=axbxc
expect 2 run --out_dtype=fp16
expect 2 run --batch=-1
expect 2 run --batch=abc
expect 2 run --iterations=0
expect 2 run --broadcast_a
expect 2 run --check=maybe
expect 2 run --no_such_flag
expect 2 run --target
expect 2 run extra_argument
expect 2 run --mode=rdma
expect 2 run --ring
expect 2 bench --concurrency=0
expect 2 bench --concurrency=1,x
expect 2 bench --request_rate=-5
expect 2 bench --duration=0s
expect 2 bench --stable_windows=5 --max_windows=3
expect 2 bench --json --csv
expect 2 bench --mode=rdma
expect 2 bench --rings=1
expect 2 bench --rings=1 --mode=shm --stream
expect 2 bench --rings=-1 --mode=shm
expect 2 bench --plot=/tmp/x.png  # charts: tools/plot_bench.py
expect 1 info --target="$nobody"
expect 1 health --target="$nobody"
expect 2 health --timeout=0s
expect 2 health extra_argument
expect 1 run --target="$nobody" --shape=8x8x8
expect 1 bench --target="$nobody" --shape=8x8x8 --concurrency=1

# The usage error says what was wrong.
"$cli" run --shape=12x3 2>&1 | grep -q 'expected MxNxK' ||
  { echo "FAIL: no MxNxK hint for a bad --shape"; failures=$((failures + 1)); }

# A probe against no daemon says where it looked.
"$cli" health --target="$nobody" 2>&1 | grep -q "is matmul-server listening on $nobody" ||
  { echo "FAIL: health against no daemon does not name the target"; failures=$((failures + 1)); }

[ "$failures" -eq 0 ] && echo "PASS" && exit 0
exit 1
