#!/usr/bin/env bash
# One device call's service measurements: issue 4's seed shapes through a
# ring against the standalone pick (interleaved and sustained, with GPU
# clocks logged), then issue 5's concurrency-64 point under the settings in
# VARIANTS. Run from the repo root with the bundle unpacked; results under
# $OUT (zero_copy/, variants/).
set -uo pipefail
rc=0
PARTS=${PARTS:-standalone ring ring4 ring4spin} \
  bash tests/gpu/service/zero_copy_bench.sh || rc=1
bash tests/gpu/service/service_variants.sh || rc=1
echo "measure: rc=$rc"
exit $rc
