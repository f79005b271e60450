"""The zero-copy table from zero_copy_bench.sh's results folder: per seed shape,
the standalone pick (matmul-bench's interleaved timing, and back to back
for seconds over four clients' A and C, without and with an event after
each product) beside every service run found (*_ipc*.json, concurrency 4),
as TFLOP/s with the ratios to the table's figure and to back to back.
Then the GPU's SM clock and power per part, from clocks.csv and parts.txt.

Usage: python3 zero_copy_table.py RESULTS_DIR
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gpu_clocks  # noqa: E402


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
        sustained = next((run for run in entry.get("sustained", [])
                          if run["which"] == "pick"), {})
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
    gpu_clocks.print_clocks(res)


if __name__ == "__main__":
    main(sys.argv[1])
