#!/usr/bin/env bash
# Configures and builds a sanitizer build of the project with clang, in a
# build directory of its own beside the main (GCC) build/:
#   build.sh asan TARGET...   build-asan: ASan + UBSan, plus libFuzzer's
#                             coverage (MATMUL_FUZZ), so the fuzz targets
#                             and the ASan test suite share one build
#   build.sh tsan TARGET...   build-tsan: ThreadSanitizer
# With no TARGET it only configures.
# Both leave out the project's own CUDA kernels (MATMUL_OWN_KERNELS=OFF) and
# build the rest of the CUDA code for one architecture: the sanitizers
# cover host code only (nvcc never gets their flags), and these builds run
# where no GPU is. BUILD_DIR overrides the directory; ccache is used when
# installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
kind=${1:?usage: build.sh asan|tsan [TARGET...]}
shift
case "$kind" in
  asan) flags=(-DMATMUL_SANITIZE=address,undefined -DMATMUL_FUZZ=ON) ;;
  tsan) flags=(-DMATMUL_SANITIZE=thread) ;;
  *) echo "build.sh: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
build_dir=${BUILD_DIR:-build-$kind}
export PATH=/usr/local/cuda/bin:$PATH
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# -O1: the sanitizers' advice (fast enough, exact stacks); asserts on.
# PRE_TEST: sanitized binaries start slowly (shadow memory, the CUDA
# libraries), so tests are listed when ctest runs, not as part of the build.
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CUDA_HOST_COMPILER=g++ -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  -DMATMUL_OWN_KERNELS=OFF -DMATMUL_ALLOCATOR=glibc "${flags[@]}" "${launcher[@]}" >/dev/null
if (($#)); then
  cmake --build "$build_dir" -j"$(nproc)" --target "$@"
fi
