#!/usr/bin/env python3
"""Draws the Grafana dashboard's time-series panels from a Prometheus.

Grafana is not available on every machine; this renders what its panels
would show, from the same PromQL (the dashboard's own expressions, template
variables set to "All"), through Prometheus's range-query API, with
matplotlib: one PNG holding a grid of the chosen panels.

Usage:
  render_panels.py PROMETHEUS_URL DASHBOARD_JSON START END OUT.png
      [--panel TITLE ...] [--rate_interval 20s] [--columns 2]
START and END are Unix seconds. Without --panel, every time-series panel
whose expressions return data is drawn (the DCGM ones return none unless a
dcgm-exporter was scraped).
Needs Debian's python3-matplotlib (run it with /usr/bin/python3).
"""

import argparse
import json
import os
import re
import sys
import urllib.parse
import urllib.request
from datetime import datetime

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import dates as mdates  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                "observability"))
from check_queries import GRAFANA_VALUES, substitute  # noqa: E402

# Grafana units the dashboard uses, as a divisor and an axis label.
UNITS = {"s": (1e-3, "ms"), "bytes": (2**30, "GiB"), "percentunit": (0.01, "%"),
         "percent": (1, "%"), "reqps": (1, "requests/s"), "rotmhz": (1, "MHz"),
         "watt": (1, "W"), "short": (1, ""), "none": (1, "")}


def query_range(base, expr, start, end, step):
    url = base + "/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('error')}")
    return body["data"]["result"]


def legend(template, metric):
    """Grafana's legendFormat: {{label}} replaced by the series' value."""
    if not template:
        return ",".join(f"{k}={v}" for k, v in metric.items()) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""),
                  template)


def timeseries_panels(dashboard):
    panels = []
    for panel in dashboard["panels"]:
        panels.extend(p for p in [panel, *panel.get("panels", [])]
                      if p.get("type") == "timeseries")
    return panels


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prometheus")
    parser.add_argument("dashboard")
    parser.add_argument("start", type=float)
    parser.add_argument("end", type=float)
    parser.add_argument("out")
    parser.add_argument("--panel", action="append", default=[],
                        help="a panel title to draw (repeatable)")
    parser.add_argument("--rate_interval", default="20s")
    parser.add_argument("--columns", type=int, default=2)
    args = parser.parse_args()

    with open(args.dashboard) as f:
        dashboard = json.load(f)
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    GRAFANA_VALUES["__rate_interval"] = args.rate_interval
    step = max(1, int((args.end - args.start) / 400))
    chosen = timeseries_panels(dashboard)
    if args.panel:
        by_title = {p["title"]: p for p in chosen}
        missing = [t for t in args.panel if t not in by_title]
        if missing:
            raise SystemExit(f"no time-series panel titled {missing}; "
                             f"there are {sorted(by_title)}")
        chosen = [by_title[t] for t in args.panel]

    drawn = []
    for panel in chosen:
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        scale, unit_label = UNITS.get(unit, (1, unit))
        lines = []
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], defined)
            for series in query_range(args.prometheus, expr, args.start,
                                      args.end, step):
                times = [datetime.fromtimestamp(float(t)) for t, _ in series["values"]]
                values = [float(v) / scale for _, v in series["values"]]
                lines.append((legend(target.get("legendFormat"), series["metric"]),
                              times, values))
        if lines:
            drawn.append((panel["title"], unit_label, lines))
        else:
            print(f'render_panels: "{panel["title"]}" returned no data; left out')
    if not drawn:
        raise SystemExit("render_panels: no panel returned data")

    rows = (len(drawn) + args.columns - 1) // args.columns
    figure, axes = plt.subplots(rows, args.columns, squeeze=False,
                                figsize=(7 * args.columns, 3.4 * rows))
    for ax in axes.flat[len(drawn):]:
        ax.set_visible(False)
    for ax, (title, unit_label, lines) in zip(axes.flat, drawn):
        for label, times, values in lines:
            ax.plot(times, values, label=label, linewidth=1.2)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel(unit_label)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(args.out, dpi=90)
    print(f"render_panels: {len(drawn)} panels -> {args.out}")


if __name__ == "__main__":
    main()
