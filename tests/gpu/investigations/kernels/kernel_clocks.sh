#!/usr/bin/env bash
# How close the Spark path (the best own mma.sync config that fits the
# GB10's 99 KiB) gets to the mma.sync ceiling on this GPU, clock for clock:
# the H200 runs at its power cap under sustained load, and the SM clock it
# settles at depends on the kernel. Parts: the register-only mma.sync probe
# (mma_bench --peak_only: FLOP per SM cycle and the clock it ran at), then
# for each shape the best cuBLASLt candidate and the Spark path, one after
# the other in one process on the same operands, each back to back for
# SUSTAINED_S seconds (matmul-bench --sustained_kernels) with nvidia-smi
# sampling the SM clock (KERNELS: default "cublaslt spark"; own configs by
# name too, e.g. mma_192x128x64_s2_w2x2_tma). kernel_clocks_table.py turns
# TFLOP/s and clock into FLOP per SM cycle and the fraction of each
# instruction's peak.
# Then ncu on the best GB10 configs (NCU_CONFIGS; empty skips it).
# Results under $OUT/kernel_clocks/. Needs bundle/ (tests/gpu/bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
source tests/gpu/bundle_env.sh
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/kernel_clocks
rm -rf "$res"
mkdir -p "$res"
SHAPES=${SHAPES:-5120x11008x2048 5120x2048x2048 5120x512x2048}
KERNELS=${KERNELS:-cublaslt spark}
rc=0
source tests/gpu/investigations/clock_log.sh
start_clock_log "$res" 100
part peak
bundle/mma_bench --peak_only >"$res/peak.txt" 2>&1 || rc=1
cat "$res/peak.txt"
# The clock that counts is each kernel's sustained run, a part of its own
# ("SHAPE WHICH") after the shape's tuning pass (bursts).
for shape in $SHAPES; do
  bundle/matmul-bench --shapes="$shape" --layouts=NT \
    --sustained_s="${SUSTAINED_S:-3}" \
    --sustained_kernels="$(tr ' ' , <<<"$KERNELS")" \
    --json="$res/$shape.json" 2>&1 |
    mark_bench_phases >"$res/$shape.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
part end
stop_clock_log
python3 tests/gpu/investigations/kernels/kernel_clocks_table.py "$res" || rc=1

# Where the Spark path's cycles go: ncu (clocks left alone) on the two best
# GB10 configs, one launch each on 5120x11008x2048: the usual sections,
# then the shared-memory and tensor pipes as a share of their peaks.
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for cfg in ${NCU_CONFIGS-mma_128x128x64_s3 mma_192x128x64_s2}; do
  [ -n "$ncu" ] || { echo "no ncu: profile skipped"; break; }
  profile() {
    timeout 120 "$ncu" --clock-control none -k regex:GemmKernel -s 2 -c 1 \
      "$@" bundle/mma_bench --iters 1 --shapes 5120x11008x2048 \
      --configs "$cfg"
  }
  profile --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy >"$res/ncu_$cfg.txt" 2>&1 || rc=1
  profile --metrics "$(tr -d ' \n' <<'METRICS'
l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,
l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,
l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,
sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_elapsed,
smsp__issue_active.avg.pct_of_peak_sustained_elapsed
METRICS
)" >"$res/ncu_metrics_$cfg.txt" 2>&1 || rc=1
  echo "== ncu $cfg"
  grep -E "SM Frequency|Duration|Compute \(SM\) Throughput|L1/TEX Cache Throughput|Shared|pct_of_peak|ERROR|Stall|Warp Cycles Per Issued" \
    "$res/ncu_$cfg.txt" "$res/ncu_metrics_$cfg.txt" | sed "s|$res/||" | head -40
done
echo "kernel_clocks: rc=$rc"
exit $rc
