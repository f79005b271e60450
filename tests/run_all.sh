#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest. GPU tests skip
# (reported as skipped, with the reason) where no GPU is present.
#
#   tests/run_all.sh         the main build (build/) and its ctest suite
#   tests/run_all.sh --all   also what CI runs besides (CI=true implies it):
#     the fuzzers for 20 s each (tests/fuzz/run_fuzzers.sh), the CPU suite
#     under ASan + UBSan with leak checks (tests/sanitizers/asan_ubsan.sh)
#     and the strict TSan list (the batcher, the executor, the ring's daemon
#     side, the client's call tickets: tests/sanitizers/tsan.sh with
#     TSAN_GRPC_TESTS empty). Those build with clang into build-asan/ and
#     build-tsan/, without the project's own CUDA kernels and for one CUDA
#     architecture. Each part runs even when an earlier one failed; the
#     script fails if any did.
# Beyond CI (each script's header says more): tests/fuzz/run_fuzzers.sh
# --seconds 600 fuzzes longer; tests/sanitizers/tsan.sh alone also runs the
# gRPC-based ring, regions, session and batching tests under TSan, which
# CI leaves out to stay within its time (their reports cannot fail a run
# while gRPC itself is not built with TSan).
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
[[ ${CI:-} == true ]] && all=1
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    *) echo "run_all.sh: unknown argument $arg (--all)" >&2; exit 2 ;;
  esac
done
deploy/install_deps.sh
failed=()
# Runs one part, timed; a failure is noted and the next part still runs.
part() {
  local name=$1 start status=0
  shift
  start=$(date +%s)
  echo "=== $name"
  "$@" || status=$?
  echo "=== $name: $( ((status == 0)) && echo passed || echo "FAILED ($status)"
    ), $(( $(date +%s) - start )) s"
  ((status == 0)) || failed+=("$name")
}
main_suite() {
  deploy/build.sh
  ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
}
part "build and ctest" main_suite
if ((all)); then
  part "fuzzers" tests/fuzz/run_fuzzers.sh --seconds 20
  part "ASan+UBSan suite" tests/sanitizers/asan_ubsan.sh
  part "TSan subset" env TSAN_GRPC_TESTS= tests/sanitizers/tsan.sh
fi
if ((${#failed[@]})); then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
