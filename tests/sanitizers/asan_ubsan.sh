#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer,
# with leak checking: builds build-asan (tests/sanitizers/build.sh asan, the
# build the fuzzers share) and runs ctest there. Any sanitizer report fails
# its test (-fno-sanitize-recover, LeakSanitizer at exit).
#
# Which tests: every test executable whose target name ends in _test, less
# ASAN_SKIP_TARGETS (the GPU tests: they skip where no GPU is, so here they
# would only cost build time); ctest runs whatever was built, less the
# ctest names in ASAN_SKIP_TESTS. A new foo_test joins by its name alone.
# CI runs exactly this; extra ctest arguments pass through (e.g. -R ring).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/sanitizers/test_targets.sh
build_dir=${BUILD_DIR:-build-asan}
# matmul_bench_test: client-side report code that the main suite covers,
# not worth its build time here.
skip_targets=${ASAN_SKIP_TARGETS:-'^(cublaslt_gemm_test|gemm_selector_test|cuda_backend_test|mma_gemm_test|gpu_fault_test|matmul_bench_test)$'}
# _NOT_BUILT: gtest_discover_tests' placeholders for the skipped targets.
# soak: the soak has its own CI step on the main build. observability and
# deploy manifests check configuration files, not memory.
skip_tests=${ASAN_SKIP_TESTS:-'_NOT_BUILT$|soak|observability_test|deploy_manifests_test'}
BUILD_DIR=$build_dir tests/sanitizers/build.sh asan
mapfile -t targets < <(test_targets "$build_dir" '_test$' "$skip_targets")
echo "asan_ubsan: ${#targets[@]} test executables: ${targets[*]}"
# The daemon, the CLI and grpc-floor: script tests run them.
BUILD_DIR=$build_dir tests/sanitizers/build.sh asan "${targets[@]}" \
  matmul-server matmul-cli grpc-floor
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" --timeout 900 \
  -E "$skip_tests" "$@"
