#!/usr/bin/env bash
# A step of tests/gpu/run.sh; also runs alone on the GPU machine after
# tests/gpu/bundle.sh built bundle/ here:
#   run(command="bash tests/gpu/steps/hopper_kernel.sh", carry=["bundle"])
# The Hopper kernel family (kernels/hopper): that the backend holds sm_90a
# wgmma code (HGMMA in its SASS), its GPU tests, and matmul-bench on the
# NT shapes it takes (the seed's four, 8192^3 and the small-M ones), whose
# table sets each config's best beside cuBLASLt's and the selector's pick.
# Output: stdout, $OUT/hopper_bench.txt and $OUT/hopper_bench.json.
# Env: BENCH_REPEAT (3).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
if [ ! -x bundle/hopper_gemm_test ]; then
  echo "hopper_kernel: no hopper_gemm_test in the bundle (built without 90a); skipped"
  exit 0
fi
echo "commit: $(head -1 bundle/COMMIT 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
hgmma=$(cuobjdump --dump-sass bundle/lib/libmatmul_cuda.so | grep -c HGMMA || true)
echo "HGMMA instructions in libmatmul_cuda.so's SASS: $hgmma"
if [ "$hgmma" -eq 0 ]; then
  echo "hopper_kernel: no HGMMA in the backend" >&2
  exit 1
fi
bundle/hopper_gemm_test
# matmul-bench's default shapes are those named above.
bundle/matmul-bench --layouts=NT --repeat="${BENCH_REPEAT:-3}" \
  --json="$OUT/hopper_bench.json" | tee "$OUT/hopper_bench.txt"
