#!/usr/bin/env bash
# How close the Spark path (the best own mma.sync config that fits the
# GB10's 99 KiB) gets to the mma.sync ceiling on this GPU, clock for clock:
# the H200 runs at its power cap under sustained load, and the SM clock it
# settles at depends on the kernel. Parts: the register-only mma.sync probe
# (mma_bench --peak_only: FLOP per SM cycle and the clock it ran at), then
# for each shape the best cuBLASLt candidate and the Spark path, each back
# to back for SUSTAINED_S seconds (matmul-bench --sustained_kernel) with
# nvidia-smi sampling the SM clock. kernel_clocks_table.py turns TFLOP/s and
# clock into FLOP per SM cycle and the fraction of each instruction's peak.
# Results under $OUT/kernel_clocks/. Run from the repo root with the bundle
# unpacked.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/kernel_clocks
rm -rf "$res"
mkdir -p "$res"
SHAPES=${SHAPES:-5120x11008x2048 5120x2048x2048 5120x512x2048}
KERNELS=${KERNELS:-cublaslt spark}
rc=0
part() { echo "$(date '+%Y/%m/%d %H:%M:%S.%3N') $1" >>"$res/parts.txt"; }

nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,noheader -lms 100 >"$res/clocks.csv" 2>/dev/null &
clocks=$!
trap 'kill "$clocks" 2>/dev/null' EXIT
: >"$res/parts.txt"
part peak
bundle/mma_bench --peak_only >"$res/peak.txt" 2>&1 || rc=1
cat "$res/peak.txt"
for shape in $SHAPES; do
  for kernel in $KERNELS; do
    part "${shape}_$kernel"
    bundle/matmul-bench --shapes="$shape" --layouts=NT \
      --sustained_s="${SUSTAINED_S:-3}" --sustained_kernel="$kernel" \
      --json="$res/${shape}_$kernel.json" >"$res/${shape}_$kernel.txt" \
      2>&1 || rc=1
  done
done
part end
kill "$clocks" 2>/dev/null
python3 tests/gpu/kernel_clocks_table.py "$res" || rc=1
echo "kernel_clocks: rc=$rc"
exit $rc
