#!/usr/bin/env bash
# The concurrency tests under ThreadSanitizer: builds build-tsan
# (tests/sanitizers/build.sh tsan) and runs each test executable whose target
# name matches TSAN_TESTS, directly (not through ctest, whose list also
# holds the suite's shell and Python tests). Any race report, deadlock
# report or test failure fails the script.
#
# TSAN_TESTS is an extended regex on target names: the batcher, the
# executor, rings, regions, batching and sessions (regions_test and
# regions_process_test hold the session tests). Extend it for new
# concurrency tests, e.g. TSAN_TESTS='...|sigbus_test'. CI runs exactly
# this; arguments pass to every test executable (e.g. --gtest_filter=...).
#
# Debian's abseil is not built with TSan: tsan_absl_sync.so (built here)
# is preloaded so that absl::Mutex, CondVar and Notification give TSan its
# happens-before edges; tsan.supp holds the suppressions, each explained.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/sanitizers/test_targets.sh
build_dir=${BUILD_DIR:-build-tsan}
include=${TSAN_TESTS:-'^(dynamic_batcher|executor|attached_ring|ring|regions|regions_process|batching)_test$|session'}
BUILD_DIR=$build_dir tests/sanitizers/build.sh tsan
mapfile -t targets < <(test_targets "$build_dir" "$include" '^$')
echo "tsan: ${#targets[@]} test executables: ${targets[*]}"
BUILD_DIR=$build_dir tests/sanitizers/build.sh tsan "${targets[@]}"
preload=$build_dir/tsan_absl_sync.so
clang++ -std=c++20 -O1 -g -fPIC -shared -o "$preload" \
  tests/sanitizers/tsan_absl_sync.cc -ldl
export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
failed=()
for target in "${targets[@]}"; do
  binary=$(find "$build_dir" -type f -name "$target" -perm -u+x | head -1)
  log=$build_dir/tsan-$target.log
  start=$(date +%s)
  status=0
  LD_PRELOAD=$PWD/$preload timeout 1200 "$binary" "$@" >"$log" 2>&1 ||
    status=$?
  races=$(grep -c '^WARNING: ThreadSanitizer' "$log" || true)
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tr '\n' ' ')
  echo "$target: exit $status, $races TSan reports, $((
    $(date +%s) - start)) s; $summary"
  if ((status != 0 || races != 0)); then
    failed+=("$target")
    grep -m3 -A30 '^WARNING: ThreadSanitizer' "$log" ||
      grep -E '^\[  FAILED|Failure' "$log" | head -20 || tail -30 "$log"
  fi
done
if ((${#failed[@]})); then
  echo "tsan: failed: ${failed[*]} (logs: $build_dir/tsan-<test>.log)" >&2
  exit 1
fi
