#!/usr/bin/env bash
# Installs the packages the project needs, by profile, on Debian 12 or
# Ubuntu 24.04. Run as root (or through sudo). The CUDA toolkit itself
# (nvcc, cudart, cuBLASLt) is expected under /usr/local/cuda; it is not a
# distribution package.
#
#   deploy/install_deps.sh            everything (what tests/run_all.sh needs)
#   deploy/install_deps.sh build      building the daemon and the CLI only
#                                     (the Dockerfile's build stage)
#   deploy/install_deps.sh tests      build + what the tests add
#   deploy/install_deps.sh docs       build + what the docs and plots add
#
# The build profile names only packages that Debian 12 and Ubuntu 24.04
# (universe, which the CUDA images enable) both ship under the same name.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then
  exec sudo --preserve-env=PATH "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
build=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev
  # matmul-server's malloc (server/CMakeLists.txt, MATMUL_ALLOCATOR).
  libjemalloc-dev
  # The build configures its tests too (find_package(GTest) is required).
  libgtest-dev libgmock-dev
  # setcap: the image gives matmul-server its file capability (Dockerfile).
  libcap2-bin
)
tests=(
  curl python3-grpcio python3-protobuf
  prometheus python3-yaml python3-venv python3-setuptools
  # The Python client's native extension (pip install ./client/python) and
  # its CI test with CPU tensors.
  pybind11-dev python3-pybind11 python3-torch
  # tests/fuzz and tests/sanitizers: clang with its sanitizer runtimes and
  # libFuzzer (recommended by clang, so named: we install no recommends).
  clang libclang-rt-14-dev
)
docs=(
  # tools/plot_bench.py (bench charts) and its test.
  python3-matplotlib
)
profiles=("$@")
((${#profiles[@]})) || profiles=(build tests docs)
packages=("${build[@]}")
for profile in "${profiles[@]}"; do
  case "$profile" in
    build) ;;
    tests) packages+=("${tests[@]}") ;;
    docs) packages+=("${docs[@]}") ;;
    *) echo "install_deps.sh: unknown profile $profile (build, tests, docs)" >&2
       exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "error: nvcc not found; install the CUDA 13 toolkit to /usr/local/cuda" >&2
  exit 1
fi
