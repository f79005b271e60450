"""kernel_clocks.sh's table: per shape and kernel, sustained TFLOP/s (and
its ratio to cuBLASLt's, same process and operands), the median SM clock
while that kernel's sustained run went (after the tuning pass), and FLOP per SM cycle as a fraction of the
instruction's peak: the mma.sync probe's (measured, mma_bench --peak_only)
for the Spark path, wgmma's 4096 dense BF16 FLOP per SM cycle (NVIDIA's
989.5 TFLOP/s = 132 SMs x 1830 MHz x 4096) for cuBLASLt.

Usage: python3 kernel_clocks_table.py RES
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_clocks  # noqa: E402

WGMMA_FLOP_PER_SM_CYCLE = 4096


def main(res):
    peak_text = open(os.path.join(res, "peak.txt")).read()
    sms = int(re.search(r"(\d+) SMs", peak_text).group(1))
    probe = re.search(r"([\d.]+) TFLOP/s, (\d+) FLOP per SM cycle at (\d+) "
                      r"MHz", peak_text)
    if probe is None:
        print("no per-cycle mma.sync figure in peak.txt: no table")
        return 1
    mma_peak = float(probe.group(2))
    clocks = gpu_clocks.clocks_per_part(res)
    print(f"mma.sync probe (8 warps per SM): {probe.group(1)} TFLOP/s, "
          f"{mma_peak:.0f} FLOP per SM cycle at {probe.group(3)} MHz; wgmma: "
          f"{WGMMA_FLOP_PER_SM_CYCLE}; {sms} SMs")
    print(f"{'shape':<18} {'kernel':<28} {'TFLOP/s':>8} {'/ lt':>5} "
          f"{'MHz':>6} {'W':>5} {'FLOP/SM/cycle':>14} {'of its peak':>11}")
    for path in sorted(glob.glob(os.path.join(res, "*.json"))):
        entry = json.load(open(path))["runs"][-1][0]
        runs = entry.get("sustained", [])
        lt = next((run["back_to_back_tflops"] for run in runs
                   if run["which"] == "cublaslt"), 0)
        for run in runs:
            part = f"{entry['shape']} {run['which']}"
            if part not in clocks:
                print(f"{part}: no clock samples")
                continue
            tflops = run["back_to_back_tflops"]
            mhz, _, watts, _, _ = clocks[part]
            per_cycle = tflops * 1e12 / (sms * mhz * 1e6)
            peak = (WGMMA_FLOP_PER_SM_CYCLE
                    if run["kernel"].startswith("cublaslt") else mma_peak)
            vs_lt = f"{tflops / lt:5.2f}" if lt else "    -"
            print(f"{entry['shape']:<18} {run['kernel']:<28} {tflops:8.0f} "
                  f"{vs_lt} {mhz:6.0f} {watts:5.0f} {per_cycle:14.0f} "
                  f"{per_cycle / peak:11.2f}")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
