#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/sanitizers/build.sh asan: clang, ASan +
# UBSan) and runs each for a bounded time, starting from the seed corpus in
# tests/fuzz/corpus/<fuzzer>/. Fails when any of them finds a crash, a leak,
# undefined behaviour, a broken FUZZ_CHECK or an input slower than 25 s; the
# input is kept as build-asan/fuzz/<fuzzer>-crash-... (rerun it with
# `build-asan/tests/fuzz/<fuzzer> <file>`). Prints the executions of each.
#
#   run_fuzzers.sh                 every fuzzer, 30 s each (what CI runs)
#   run_fuzzers.sh --seconds 600   longer runs
#   run_fuzzers.sh --no-build ring_slot_fuzzer   one fuzzer, already built
# The seeds are written by make_fuzz_corpus.cc (rebuild them with
# `cmake --build build-asan --target make_fuzz_corpus &&
#  build-asan/tests/fuzz/make_fuzz_corpus tests/fuzz/corpus`).
# New inputs that reach new code collect in build-asan/fuzz/<fuzzer>/ and
# seed the next run; to add some to the repo's corpus, minimise them first
# (`<fuzzer> -merge=1 tests/fuzz/corpus/<fuzzer> build-asan/fuzz/<fuzzer>`).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=30
build=1
only=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "run_fuzzers.sh: unknown option $1" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done
build_dir=${BUILD_DIR:-build-asan}
if ((build)); then
  BUILD_DIR=$build_dir tests/sanitizers/build.sh asan matmul_fuzzers
fi
if ((${#only[@]} == 0)); then
  for binary in "$build_dir"/tests/fuzz/*_fuzzer; do
    only+=("$(basename "$binary")")
  done
fi
work=$build_dir/fuzz
mkdir -p "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OPENBLAS_NUM_THREADS=1
failed=()
for fuzzer in "${only[@]}"; do
  mkdir -p "$work/$fuzzer"
  log=$work/$fuzzer.log
  seeds=tests/fuzz/corpus/$fuzzer
  [[ -d $seeds ]] || seeds=
  status=0
  "$build_dir/tests/fuzz/$fuzzer" -max_total_time="$seconds" -timeout=25 \
    -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/$fuzzer-" "$work/$fuzzer" $seeds \
    >"$log" 2>&1 || status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if ((status != 0)); then
    failed+=("$fuzzer")
    echo "$fuzzer: FAILED (exit $status) after ${executions:-?} executions;" \
      "log $log, input in $work/$fuzzer-*"
    grep -m1 -A25 -E '^==[0-9]+==|FUZZ_CHECK|runtime error' "$log" || tail -30 "$log"
  else
    echo "$fuzzer: ${executions:-?} executions in $seconds s, no crash"
  fi
done
if ((${#failed[@]})); then
  echo "fuzzers that failed: ${failed[*]}" >&2
  exit 1
fi
