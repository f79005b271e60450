#!/usr/bin/env bash
# A step of tests/gpu/run.sh; also runs alone on the GPU machine after
# tests/gpu/bundle.sh built bundle/ here:
#   run(command="bash tests/gpu/checks/hopper_kernel.sh", carry=["bundle"])
# The Hopper kernel family (kernels/hopper): that the backend holds sm_90a
# wgmma code (HGMMA in its SASS), its GPU tests, matmul-bench on every
# shape in both layouts (each family's best re-timed interleaved with
# cuBLASLt and the pick), and the seed shapes' sustained figures (every
# config and cuBLASLt back to back, at the GPU's power cap). With
# HOPPER_NCU=1, ncu's view (speed of light, warp states) of the kernel and
# cuBLASLt's on 5120x11008x2048 NT as well.
# Output: stdout, $OUT/hopper_bench.{txt,json}, $OUT/hopper_sustained.{txt,json}
# and $OUT/hopper_ncu.txt.
# Env: BENCH_REPEAT (3), SUSTAINED_S (1; 0 skips), HOPPER_NCU (0).
set -euo pipefail
cd "$(dirname "$0")/../../.." || exit 1
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
bundle/matmul-bench --layouts=NN,NT --repeat="${BENCH_REPEAT:-3}" \
  --json="$OUT/hopper_bench.json" | tee "$OUT/hopper_bench.txt"
configs=wgmma_128x256x64_s4,wgmma_128x256x64_s4_c2,wgmma_128x128x64_s6_pp,cublaslt
if [ "${SUSTAINED_S:-1}" != 0 ]; then
  bundle/matmul-bench --layouts=NN,NT \
    --shapes=5120x11008x2048,5120x2048x11008,5120x2048x2048,5120x512x2048 \
    --sustained_s="${SUSTAINED_S:-1}" --sustained_kernels="$configs" \
    --json="$OUT/hopper_sustained.json" | tee "$OUT/hopper_sustained.txt"
fi
if [ "${HOPPER_NCU:-0}" = 1 ]; then
  # --clock-control none: the clocks the GPU picks, as in the timings.
  ncu --clock-control none --kernel-name-base demangled \
    -k 'regex:hopper::internal::Gemm|nvjet' --launch-skip 10 --launch-count 4 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    bundle/matmul-bench --shapes=5120x11008x2048 --layouts=NT \
    --max_iterations=30 >"$OUT/hopper_ncu.txt" 2>&1 || true
  grep -E "Gemm|nvjet|Throughput|Stall|Issued" "$OUT/hopper_ncu.txt" | head -60
fi
