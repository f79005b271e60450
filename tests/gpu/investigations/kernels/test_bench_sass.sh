#!/usr/bin/env bash
# The own mma kernels on a GPU in one GPU-machine call: mma_gemm_test, the
# mma_bench timing table (twice, to see the run-to-run spread), and the
# SASS check of the sm_121a cubins (every kernel must contain
# HMMA.16816.F32.BF16; cuobjdump exists on the GPU machine, not here).
#
# Usage, from the repo root:
#   here:  TARGETS="mma_gemm_test mma_bench" bash tests/gpu/bundle.sh
#          bash kernels/mma/check_spark_build.sh      # -> build-spark-check/
#   there: run(command="bash tests/gpu/investigations/kernels/test_bench_sass.sh"
#                      " [bench args...]",
#              carry=["bundle", "build-spark-check"])
# Extra arguments go to mma_bench. Env: OUT (/tmp/out) for the logs,
# CUBINS (build-spark-check) for the cubin folder.
set -euo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
B=bundle
OUT=${OUT:-/tmp/out}
CUBINS=${CUBINS:-build-spark-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
rc=0
echo "== tests"
timeout 300 "$B/mma_gemm_test" --gtest_brief=0 >"$OUT/test.log" 2>&1 || rc=1
grep -E "^\s+mma_|PASSED|FAILED|SKIPPED \]|tests ran" "$OUT/test.log" | tail -40 || true
echo "== bench"
timeout 200 "$B/mma_bench" "$@" >"$OUT/bench.log" 2>&1 || rc=1
timeout 200 "$B/mma_bench" "$@" >"$OUT/bench2.log" 2>&1 || rc=1
tail -60 "$OUT/bench.log"
echo "== sass"
PATH=/usr/local/cuda/bin:$PATH bash kernels/mma/check_spark_build.sh \
  --sass-only "$CUBINS" 2>&1 | tee "$OUT/sass.log" || rc=1
echo "test_bench_sass: rc=$rc"
exit $rc
