"""Issue 4's table from zero_copy_bench.sh's results folder: per seed shape,
the standalone pick (matmul-bench's interleaved timing, and back to back
for seconds over four clients' A and C, without and with an event after
each product) beside every service run found (*_ipc*.json, concurrency 4),
as TFLOP/s with the ratios to the table's figure and to back to back.
Then the GPU's SM clock and power per part, from clocks.csv and parts.txt.

Usage: python3 zero_copy_table.py RESULTS_DIR
"""
import collections
import glob
import json
import os
import sys


def main(res):
    standalone_path = os.path.join(res, "standalone.json")
    if not os.path.exists(standalone_path):
        print("no standalone.json (run the standalone part): no table")
        return
    standalone = {}
    for run in json.load(open(standalone_path))["runs"]:
        for entry in run:
            standalone[entry["shape"]] = entry
    print("TFLOP/s; service cells: value (/ table pick, / sustained back "
          "to back)")
    for shape, entry in standalone.items():
        table = entry["pick"]["tflops"]
        sustained = entry.get("sustained", {})
        b2b = sustained.get("back_to_back_tflops", 0)
        print(f"{shape}: pick {entry['pick']['kernel']}: table {table:.0f}, "
              f"sustained back to back {b2b:.0f}, with an event after each "
              f"{sustained.get('event_after_each_tflops', 0):.0f}")
        for path in sorted(glob.glob(os.path.join(res, f"{shape}_ipc*.json"))):
            d = json.load(open(path))
            level = d["levels"][0]
            t = level["tflops"]
            same = level["kernel"] == entry["pick"]["kernel"]
            print(f"  {d['label']:<34} {t:6.0f} ({t / table:.2f}, "
                  f"{t / b2b if b2b else 0:.2f}) {level['kernel']}"
                  f"{'' if same else ' (NOT the standalone pick)'}, "
                  f"kernel p50 {level['server_kernel_p50_s'] * 1e6:.1f} us, "
                  f"batch {level['mean_batch_size']:.2f}")
    clocks_path = os.path.join(res, "clocks.csv")
    parts_path = os.path.join(res, "parts.txt")
    if not (os.path.exists(clocks_path) and os.path.exists(parts_path)):
        return
    parts = [line.split(" ", 2) for line in open(parts_path) if line.strip()]
    starts = [(f"{day} {time}", name.strip()) for day, time, name in parts]
    samples = collections.defaultdict(list)
    for line in open(clocks_path):
        fields = [f.strip() for f in line.split(",")]
        try:
            clock = float(fields[1].split()[0])
            watts = float(fields[2].split()[0])
        except (IndexError, ValueError):  # a header or "[N/A]"
            continue
        part = None
        for start, name in starts:
            if fields[0] >= start:
                part = name
        if part is not None:
            samples[part].append((clock, watts))
    print("GPU while each part ran: SM clock MHz and power W (median, min)")
    for _, name in starts:
        s = samples.get(name)
        if not s:
            continue
        clocks = sorted(c for c, _ in s)
        watts = sorted(w for _, w in s)
        print(f"  {name:<12} clock {clocks[len(clocks) // 2]:.0f} "
              f"(min {clocks[0]:.0f}), power {watts[len(watts) // 2]:.0f} W "
              f"(max {watts[-1]:.0f}), {len(s)} samples")


if __name__ == "__main__":
    main(sys.argv[1])
