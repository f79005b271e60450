#!/usr/bin/env python3
"""Checks the shipped dashboard and alert rules against a live Prometheus.

Every PromQL expression of the Grafana dashboard (panel targets and template
variable queries, with the variables set to "All") must evaluate without
error through Prometheus's query API, and every one must return data but
those over series that need what the checks run without (PARSE_ONLY: the
DCGM exporter's, and the steps of CUDA launches where the daemon runs on
the CPU backend), which must parse. Every alert
rule must be loaded, evaluated with health "ok", and its expression must
evaluate through the query API too.

Usage: check_queries.py PROMETHEUS_URL DASHBOARD_JSON ALERTS_YML [TIMEOUT_S]
Exit status 0 when everything holds; 1 with one line per failure otherwise.
Python 3 standard library only.
"""

import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# What Grafana substitutes at query time, as the check sets it: every
# template variable "All" (its allValue ".*"), and ranges long enough for a
# few 1 s scrapes.
GRAFANA_VALUES = {
    "__rate_interval": "30s",
    "__interval": "5s",
    "__range": "5m",
    "instance": ".*",
    "device": ".*",
    "shape": ".*",
}
# Series a check may run without, by name prefix: what provides them.
PARSE_ONLY = {
    "DCGM_": "the DCGM exporter",
    "matmul_launch_stage_seconds": "a CUDA daemon",
}

VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr, defined):
    """Replaces Grafana variables; raises on one the dashboard lacks."""

    def replace(match):
        name = match.group(1) or match.group(2)
        if name.isdigit():  # label_replace's "$1", not a variable
            return match.group(0)
        if name not in GRAFANA_VALUES:
            raise ValueError(f"variable ${name} has no test value")
        if not name.startswith("__") and name not in defined:
            raise ValueError(f"variable ${name} is not defined by the dashboard")
        return GRAFANA_VALUES[name]

    return VARIABLE.sub(replace, expr)


def query(base, expr):
    """(status, result list or error text) of an instant query at now."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        body = json.load(error)
    if body.get("status") != "success":
        return False, f'{body.get("errorType")}: {body.get("error")}'
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return True, [data["result"]]
    return True, data["result"]


def dashboard_expressions(dashboard):
    """[(where, expr, is_variable_query)] of every query in the dashboard."""
    found = []

    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            if panel.get("type") == "row":
                continue
            targets = panel.get("targets", [])
            if not targets:
                found.append((f'panel "{panel.get("title")}"', "", False))
            for target in targets:
                found.append(
                    (f'panel "{panel.get("title")}" target {target.get("refId")}',
                     target.get("expr", ""), False))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        text = variable.get("query")
        if isinstance(text, dict):
            text = text.get("query", "")
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", text, re.S)
        if match:  # Grafana's function: the series selector is PromQL
            text = match.group(1)
        found.append((f'variable "{variable["name"]}"', text, True))
    return found


def check_layout(dashboard):
    """Panel ids unique, panels inside the 24-column grid and not
    overlapping, every query on the dashboard's datasource variable."""
    failures = []
    panels = []

    def walk(items):
        for panel in items:
            panels.append(panel)
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        failures.append(f"panel ids repeat: {sorted(ids)}")
    boxes = []
    for panel in panels:
        g = panel.get("gridPos")
        title = panel.get("title")
        if not g or not all(k in g for k in "xywh"):
            failures.append(f'panel "{title}" has no complete gridPos')
            continue
        if g.get("x", 0) + g.get("w", 0) > 24:
            failures.append(f'panel "{title}" is wider than the grid: {g}')
        for other, o in boxes:
            if (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"] and
                    g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"]):
                failures.append(f'panels "{title}" and "{other}" overlap')
        boxes.append((title, g))
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("uid") != "${datasource}":
                failures.append(f'panel "{title}" target {target.get("refId")} '
                                "does not use the ${datasource} variable")
    return failures


def check_dashboard(base, path, deadline):
    with open(path) as f:
        dashboard = json.load(f)
    failures = check_layout(dashboard)
    defined = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    pending = []
    for where, expr, _ in dashboard_expressions(dashboard):
        if not expr.strip():
            failures.append(f"{where}: no expression")
            continue
        try:
            pending.append((where, substitute(expr, defined),
                            any(prefix in expr for prefix in PARSE_ONLY)))
        except ValueError as error:
            failures.append(f"{where}: {error}")
    parse_only = sum(1 for _, _, only in pending if only)
    checked = 0
    # Rates need a few scrapes of load: retry an empty answer until the
    # deadline, an error never.
    while pending:
        retry = []
        for where, expr, only in pending:
            ok, result = query(base, expr)
            if not ok:
                failures.append(f"{where}: does not evaluate: {result}\n    {expr}")
            elif not result and not only:
                retry.append((where, expr, only))
            else:
                checked += 1
        pending = retry
        if pending and time.time() > deadline:
            for where, expr, _ in pending:
                failures.append(f"{where}: returned no data\n    {expr}")
            break
        if pending:
            time.sleep(1)
    print(f"dashboard: {checked} expressions evaluated, {parse_only} of them "
          f"checked to parse only ({', '.join(PARSE_ONLY.values())})")
    return failures


def check_rules(base, path, deadline):
    failures = []
    with open(path) as f:
        names = re.findall(r"^\s*-\s*alert:\s*(\S+)", f.read(), re.M)
    if not names:
        return [f"{path}: no alert rules found"]
    while True:
        with urllib.request.urlopen(base + "/api/v1/rules", timeout=10) as response:
            groups = json.load(response)["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        # A rule not yet evaluated has health "unknown" and a zero time.
        evaluated = all(r.get("health") != "unknown" and
                        not r.get("lastEvaluation", "0001").startswith("0001")
                        for r in rules.values())
        if (set(names) <= set(rules) and evaluated) or time.time() > deadline:
            break
        time.sleep(1)
    for name in names:
        rule = rules.get(name)
        if rule is None:
            failures.append(f"alert {name}: not loaded by Prometheus")
            continue
        if rule.get("health") != "ok":
            failures.append(f"alert {name}: health {rule.get('health')}: "
                            f"{rule.get('lastError')}")
        ok, result = query(base, rule["query"])
        if not ok:
            failures.append(f"alert {name}: does not evaluate: {result}")
    print(f"alerts: {len(names)} rules loaded and evaluated")
    return failures


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    base, dashboard, alerts = argv[1].rstrip("/"), argv[2], argv[3]
    deadline = time.time() + (float(argv[4]) if len(argv) == 5 else 60)
    failures = check_dashboard(base, dashboard, deadline)
    failures += check_rules(base, alerts, deadline)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
