#!/usr/bin/python3
"""Latency against throughput from saved `matmul-cli bench` runs.

Each FILE.json is what `matmul-cli bench --save=FILE.json` wrote: one sweep
over concurrency levels against one daemon configuration. The chart has one
colour per file: its p99 latency as a solid line, its p50 as a dashed line,
each level's point labelled with its concurrency, both axes logarithmic.
The legend names each run by its JSON "label" (matmul-cli's --label).

Usage:
  /usr/bin/python3 tools/plot_bench.py off.json on.json -o chart.png
  /usr/bin/python3 tools/plot_bench.py --title "M=16" docs/bench/*.json -o m16.png

Needs Debian's python3-matplotlib. Exit status: 0 when the chart was
written, 1 when an input is not a matmul-cli bench result (the message
names the file and what is wrong) or the chart cannot be written.
"""
import argparse
import json
import sys

# Matplotlib's default cycle, so that a run keeps its colour from chart to
# chart when the files are given in the same order.
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]

# The fields of one level that the chart reads (bench_report.cc writes them).
LEVEL_FIELDS = ("concurrency", "requests_per_second", "latency_p50_s",
                "latency_p99_s")


class BadInput(Exception):
    """An input file that is not a matmul-cli bench result."""


def load_run(path):
    """The run in `path` as a dict, checked for what the chart needs."""
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e}") from e
    if not isinstance(run, dict):
        raise BadInput(f"{path}: not a JSON object")
    for key in ("label", "shape", "mode", "levels"):
        if key not in run:
            raise BadInput(f"{path}: not a matmul-cli bench result: "
                           f"no \"{key}\"")
    if not isinstance(run["levels"], list) or not run["levels"]:
        raise BadInput(f"{path}: \"levels\" is not a non-empty list")
    for i, level in enumerate(run["levels"]):
        for key in LEVEL_FIELDS:
            value = level.get(key) if isinstance(level, dict) else None
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise BadInput(f"{path}: level {i}: \"{key}\" is missing or "
                               f"not a number")
        # Log axes: a level that answered nothing cannot be drawn.
        if level["requests_per_second"] <= 0 or level["latency_p50_s"] <= 0 \
                or level["latency_p99_s"] <= 0:
            raise BadInput(f"{path}: level {i} (concurrency "
                           f"{level['concurrency']}) has no throughput or "
                           f"latency to draw")
    return run


def default_title(runs):
    shapes = sorted({r["shape"] for r in runs})
    modes = sorted({r["mode"] for r in runs})
    return (f"latency vs throughput, {', '.join(shapes)} over "
            f"{', '.join(modes)}")


def draw(runs, output, title):
    # Imported here so that --help and input errors need no matplotlib.
    import matplotlib
    matplotlib.use("Agg")  # no display on a build or GPU machine
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.6, 6.0), dpi=100)
    for i, run in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        levels = run["levels"]
        x = [lv["requests_per_second"] for lv in levels]
        p99 = [lv["latency_p99_s"] * 1e3 for lv in levels]
        p50 = [lv["latency_p50_s"] * 1e3 for lv in levels]
        ax.plot(x, p99, "-o", color=colour, markersize=4,
                label=f"{run['label']} p99")
        ax.plot(x, p50, "--o", color=colour, markersize=3,
                label=f"{run['label']} p50")
        for lv, xi, yi in zip(levels, x, p99):
            ax.annotate(f"c={lv['concurrency']}", (xi, yi),
                        textcoords="offset points", xytext=(4, 4),
                        fontsize=8, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("latency (ms): p99 solid, p50 dashed")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(output, format="png")
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(
        description="Draws p99 (solid) and p50 (dashed) latency against "
        "throughput, one colour per saved `matmul-cli bench --save` run.",
        epilog="Example: /usr/bin/python3 tools/plot_bench.py off.json "
        "on.json -o chart.png")
    parser.add_argument("runs", nargs="+", metavar="FILE.json",
                        help="a run saved by matmul-cli bench --save")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.png",
                        help="the chart to write (PNG)")
    parser.add_argument("--title", help="chart title (default: the runs' "
                        "shapes and modes)")
    args = parser.parse_args(argv)
    try:
        runs = [load_run(path) for path in args.runs]
    except BadInput as e:
        print(f"plot_bench: {e}", file=sys.stderr)
        return 1
    try:
        draw(runs, args.output, args.title or default_title(runs))
    except OSError as e:
        print(f"plot_bench: cannot write {args.output}: {e.strerror}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
