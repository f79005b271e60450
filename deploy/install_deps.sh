#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds and tests with. Run as
# root (or through sudo). The CUDA toolkit itself (nvcc, cudart, cuBLASLt) is
# expected under /usr/local/cuda; it is not a Debian package.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then
  exec sudo --preserve-env=PATH "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev curl python3-grpcio python3-protobuf
  prometheus python3-yaml python3-venv python3-setuptools
  # The Python client's native extension (pip install ./client/python) and
  # its CI test with CPU tensors.
  pybind11-dev python3-pybind11 python3-torch
  # tools/plot_bench.py (bench charts) and its test.
  python3-matplotlib
  # tests/fuzz and tests/sanitizers: clang with its sanitizer runtimes and
  # libFuzzer (recommended by clang, so named: we install no recommends).
  clang libclang-rt-14-dev
)
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
