#!/usr/bin/env bash
# Builds the wgmma ladder on the H200 and runs it on the seed's NT shapes
# and 8192^3, then profiles one rung with Nsight Compute. Results go to
# $OUT. RUNGS picks rungs (default all), PROFILE the rung ncu looks at.
set -u
cd "$(dirname "$0")"
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a wgmma_ladder.cu \
  -lcublasLt -lcuda -o /tmp/wgmma-ladder 2>/dev/null || exit 1
for s in "5120 11008 2048" "5120 2048 11008" "5120 2048 2048" "5120 512 2048" \
  "8192 8192 8192"; do
  timeout 90 /tmp/wgmma-ladder $s | cut -c1-200 | tee -a "$OUT/ladder.txt"
done
if [[ -n "${PROFILE:-}" ]]; then
  RUNGS=$PROFILE timeout 120 ncu --clock-control none -k regex:GemmNt \
    --launch-skip 100 --launch-count 1 --set full -o "$OUT/rung$PROFILE" \
    /tmp/wgmma-ladder > "$OUT/ncu.log" 2>&1
  ncu --import "$OUT/rung$PROFILE.ncu-rep" --page raw 2>/dev/null |
    grep -E "smsp__pcsamp_warps_issue_stalled_[a-z_]+ " | grep -v not_issued |
    sort -t' ' -k3 | awk '{print $1, $NF}' | sort -k2 -n -r | head -12
fi
