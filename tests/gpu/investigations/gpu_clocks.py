"""The GPU's SM clock and power while each part of a GPU script ran.

A script logs `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,...
--format=csv,noheader -lms N` to RES/clocks.csv and appends one line
"YYYY/MM/DD HH:MM:SS.mmm PART" to RES/parts.txt as each part starts;
samples belong to the last part started before them.

Usage: python3 gpu_clocks.py RES
"""
import collections
import os
import sys


def clocks_per_part(res):
    """{part: (median MHz, min MHz, median W, max W, samples)}, in order."""
    clocks_path = os.path.join(res, "clocks.csv")
    parts_path = os.path.join(res, "parts.txt")
    if not (os.path.exists(clocks_path) and os.path.exists(parts_path)):
        return {}
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
    result = {}
    for _, name in starts:
        s = samples.get(name)
        if not s:
            continue
        clocks = sorted(c for c, _ in s)
        watts = sorted(w for _, w in s)
        result[name] = (clocks[len(clocks) // 2], clocks[0],
                        watts[len(watts) // 2], watts[-1], len(s))
    return result


def print_clocks(res):
    per_part = clocks_per_part(res)
    if not per_part:
        return
    print("GPU while each part ran: SM clock MHz and power W (median, min)")
    for name, (clock, low, watts, high, n) in per_part.items():
        print(f"  {name:<26} clock {clock:.0f} (min {low:.0f}), power "
              f"{watts:.0f} W (max {high:.0f}), {n} samples")


if __name__ == "__main__":
    print_clocks(sys.argv[1])
