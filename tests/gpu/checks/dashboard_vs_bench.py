#!/usr/bin/env python3
"""The dashboard's kernel TFLOPS for one shape against matmul-bench's.

Evaluates the shipped dashboard's "Kernel TFLOPS by shape" expression, as
Grafana would send it (variables "All", $__rate_interval 20s), through
Prometheus's range-query API over the steady part of a load window, and
compares its median with the sustained figure matmul-bench measured for the
same shape (--sustained_s, its JSON). Also checks that the daemon ran the
kernel the bench measured. Prints a table; exit status 0 when the two agree
within --tolerance (5%).

Usage: dashboard_vs_bench.py PROMETHEUS_URL DASHBOARD_JSON BENCH_JSON
                             LOAD_START LOAD_END   (Unix seconds)
Python 3 standard library only.
"""

import argparse
import json
import os
import statistics
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "observability"))
from check_queries import GRAFANA_VALUES, substitute  # noqa: E402

PANEL = "Kernel TFLOPS by shape"
RATE_WINDOW_S = 20


def api(base, path, **params):
    url = f"{base}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('error')}")
    return body["data"]["result"]


def panel_expression(dashboard_path):
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    panels = list(dashboard["panels"])
    for panel in panels:
        panels.extend(panel.get("panels", []))
        if panel.get("title") == PANEL:
            defined = {v["name"] for v in dashboard["templating"]["list"]}
            return substitute(panel["targets"][0]["expr"], defined)
    raise SystemExit(f'{dashboard_path}: no panel "{PANEL}"')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prometheus")
    parser.add_argument("dashboard")
    parser.add_argument("bench_json")
    parser.add_argument("start", type=float)
    parser.add_argument("end", type=float)
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()

    with open(args.bench_json) as f:
        entry = json.load(f)["runs"][-1][0]
    shape = f'{entry["shape"]}:{entry["layout"]}'
    sustained = entry["sustained"][0]

    GRAFANA_VALUES["__rate_interval"] = f"{RATE_WINDOW_S}s"
    expr = panel_expression(args.dashboard)
    # Points whose whole rate window lies inside the load.
    first = args.start + RATE_WINDOW_S + 5
    last = args.end - 1
    if last <= first:
        raise SystemExit(f"load window {args.end - args.start:.0f} s is too "
                         f"short for a {RATE_WINDOW_S} s rate window")
    series = api(args.prometheus, "query_range", query=expr, start=first,
                 end=last, step=1)
    values = [float(v) for s in series if s["metric"].get("shape") == shape
              for _, v in s["values"]]
    if not values:
        raise SystemExit(f"no kernel TFLOPS for shape {shape}; series: "
                         f"{[s['metric'] for s in series]}\n  {expr}")
    dashboard_tflops = statistics.median(values)

    # Which kernels ran this shape during the load.
    kernels = api(args.prometheus, "query",
                  query=f'sum by (kernel) (increase(matmul_flops_total'
                        f'{{shape="{shape}"}}[{int(args.end - args.start)}s]))',
                  time=args.end)
    ran = sorted(k["metric"].get("kernel", "?") for k in kernels
                 if float(k["value"][1]) > 0)

    bench = sustained["event_after_each_tflops"]
    ratio = dashboard_tflops / bench
    print(f"shape {shape}; dashboard expression ({len(values)} points, "
          f"{RATE_WINDOW_S} s rate window):\n  {expr}")
    print(f"| figure | kernel | TFLOPS |\n|---|---|---|")
    print(f"| dashboard, median over the load | {', '.join(ran)} | "
          f"{dashboard_tflops:.1f} (min {min(values):.1f}, max {max(values):.1f}) |")
    print(f"| matmul-bench, back to back | {sustained['kernel']} | "
          f"{sustained['back_to_back_tflops']:.1f} |")
    print(f"| matmul-bench, an event after each | {sustained['kernel']} | "
          f"{bench:.1f} |")
    print(f"ratio dashboard / bench (event after each): {ratio:.3f}")
    failures = []
    if ran != [sustained["kernel"]]:
        failures.append(f"the daemon ran {ran}, the bench measured "
                        f"{sustained['kernel']}")
    if abs(ratio - 1) > args.tolerance:
        failures.append(f"ratio {ratio:.3f} is outside 1 +- {args.tolerance}")
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
