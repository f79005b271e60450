#!/usr/bin/env bash
# The zero-copy and batching measurements of the service, with the GPU
# tests of the region paths first, by PHASES (default "tests zero_copy
# batching"; "tests zero_copy" and "batching" each fit one device call):
#   tests      the CUDA GPU tests (regions_process_test starts binaries
#              from the build tree: CI runs it) and the regions steps (two
#              C++ processes, the Python client);
#   zero_copy  the seed shapes through a request ring against the
#              standalone pick (interleaved and sustained, with GPU
#              clocks), ROUNDS times (default 1), each round measuring both
#              anew (ZERO_COPY_PARTS: zero_copy_bench.sh's parts, default
#              "standalone ring");
#   batching   the concurrency sweep (M = 16..128, batching off, on, on
#              with a batch of 32 and a 500 us delay) with 2 workers over 8
#              rings, then the concurrency-64 point with the default 4
#              workers;
#   kernels    tests/gpu/investigations/kernels/kernel_clocks.sh (the Spark
#              path and cuBLASLt
#              against their instructions' peaks, clock for clock).
# Logs and JSON are packed into $OUT/results.tgz; the tables are printed.
# Usage, after tests/gpu/bundle.sh:
#   PHASES="tests zero_copy" bash tests/gpu/investigations/service/zero_copy_and_batching.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/logs"
PHASES=${PHASES:-tests zero_copy batching}
rc=0
has() { [[ " $PHASES " == *" $1 "* ]]; }
if has tests; then
for t in cuda_backend_test cublaslt_gemm_test gemm_selector_test \
  regions_test; do
  timeout 300 "bundle/$t" >"$OUT/logs/$t.log" 2>&1 || rc=1
  echo "$t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/logs/$t.log" |
    sort | uniq -c | tr -s ' \n' ' ')"
done
for step in daemon_e2e cli_regions python_regions; do
  timeout 300 bash "tests/gpu/checks/$step.sh" >"$OUT/logs/$step.log" 2>&1
  step_rc=$?
  [ $step_rc -eq 0 ] || rc=1
  echo "$step: rc=$step_rc"
done
fi
if has zero_copy; then
for round in $(seq "${ROUNDS:-1}"); do
  echo "zero copy, round $round"
  OUT=$OUT/round$round PARTS=${ZERO_COPY_PARTS:-standalone ring} \
    bash tests/gpu/investigations/service/zero_copy_bench.sh \
    >"$OUT/logs/zero_copy_$round.log" 2>&1 || rc=1
  sed -n '/^TFLOP\/s; service/,$p' "$OUT/logs/zero_copy_$round.log"
  grep -A2 '256x256x256' "$OUT/logs/zero_copy_$round.log" || true
done
fi
if has kernels; then
bash tests/gpu/investigations/kernels/kernel_clocks.sh >"$OUT/logs/kernel_clocks.log" 2>&1 || rc=1
sed -n '/^mma.sync probe/,$p' "$OUT/logs/kernel_clocks.log"
fi
if has batching; then
DELAY_US=500 DELAY_BATCH=32 BENCH_FLAGS=--rings=8 \
  DAEMON_FLAGS=--worker_threads=2 TAG=_w2 \
  bash tests/gpu/investigations/service/batching_sweep.sh >"$OUT/logs/sweep.log" 2>&1 ||
  rc=1
SHAPES="16x4096x4096 32x4096x4096 64x4096x4096 128x4096x4096" TAG=w4_ \
  VARIANTS="off, 4 workers|--max_batch_size=1|--rings=8;on 32/500, 4 workers|--max_batch_size=32 --max_queue_delay_us=500|--rings=8;on 16/500, 4 workers|--max_batch_size=16 --max_queue_delay_us=500|--rings=8" \
  bash tests/gpu/investigations/service/service_variants.sh 2>&1 | grep -v '^matmul-server' ||
  rc=1
fi
(cd "$OUT" && tar czf results.tgz ./*/ && rm -rf ./*/)
echo "zero_copy_and_batching: rc=$rc"
exit $rc
