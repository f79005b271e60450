#!/usr/bin/env bash
# Configures and builds everything into build/ (Release). Extra arguments go
# to cmake's configure step, e.g. -DCMAKE_CUDA_ARCHITECTURES=121a;
# BUILD_TARGETS="matmul-server matmul-cli" builds only those (the
# Dockerfile does).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
# shellcheck disable=SC2086  # a list of target names
cmake --build build -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
