#!/usr/bin/env bash
# One device-machine call: the mma GPU tests, the timing tool and the SASS
# check, from a bundle built here (kernels/mma/make_bundle.sh).
#   run_h200.sh BUNDLE_DIR [bench args...]   logs go to $OUT (or /tmp/out)
set -uo pipefail
B=$1; shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
echo "== tests"
timeout 300 "$B/mma_gemm_test" --gtest_brief=0 >"$OUT/test.log" 2>&1
echo "test rc=$?"
grep -E "^\s+mma_|PASSED|FAILED|SKIPPED \]|tests ran" "$OUT/test.log" | tail -40
echo "== bench"
timeout 200 "$B/mma_bench" "$@" >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
timeout 200 "$B/mma_bench" "$@" >"$OUT/bench2.log" 2>&1
echo "bench rc=$?"
cat "$OUT/bench.log" | tail -60
echo "== sass"
PATH=/usr/local/cuda/bin:$PATH bash "$B/check_spark_build.sh" --sass-only "$B/cubins" 2>&1 | tee "$OUT/sass.log"
