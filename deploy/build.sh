#!/usr/bin/env bash
# Configures and builds everything into build/ (Release). Extra arguments go
# to cmake's configure step, e.g. -DCMAKE_CUDA_ARCHITECTURES=121a.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
