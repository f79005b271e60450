#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest. GPU tests skip
# (reported as skipped, with the reason) where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install_deps.sh
deploy/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
