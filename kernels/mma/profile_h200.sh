#!/usr/bin/env bash
# Tuning helper for one device call: SASS of the main kernel and an ncu
# profile (clocks left alone) of two configs on 5120x11008x2048.
#   profile_h200.sh BUNDLE_DIR     results under $OUT
B=$1
OUT=${OUT:-/tmp/out}
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64"
export PATH=/usr/local/cuda/bin:$PATH
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
cuobjdump --dump-sass --function '_ZN6matmul3mma8internal10GemmKernelINS1_9TileShapeILi128ELi128ELi64ELi3ELi2ELi2ELi8ELi1EEELNS1_5MajorE0ELS5_0ELb1EEEvNS1_12KernelParamsE' \
  "$B/mma_bench" >"$OUT/sass_128x128x64_nt.txt" 2>&1
wc -l "$OUT/sass_128x128x64_nt.txt"
for cfg in ${CONFIGS:-mma_128x128x64_s3 mma_128x256x32_s4}; do
  timeout 120 "$NCU" --clock-control none -k regex:GemmKernel -s 2 -c 1 \
    --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section LaunchStats \
    "$B/mma_bench" --iters 1 --shapes 5120x11008x2048 --configs "$cfg" \
    >"$OUT/ncu_$cfg.txt" 2>&1
  echo "ncu $cfg rc=$?"
done
