"""The dashboard's per-device panels on a daemon with two GPUs, evaluated by
promtool on made-up series (no daemon, no GPU): every query whose legend
names {{device}} must give each device its own value, and the DCGM panels
must join each device to its own GPU by UUID although DCGM numbers the GPUs
the other way round (as it does when the daemon runs under
CUDA_VISIBLE_DEVICES). A new per-device panel fails this test until it is
given its expected values below.

Usage: dashboard_devices_test.py DASHBOARD_JSON PROMTOOL
"""
import json
import math
import os
import subprocess
import sys
import tempfile

DAEMON = 'instance="spark:9466",job="matmul"'
# CUDA ordinal -> the GPU's UUID; DCGM's "gpu" index is the other order.
UUIDS = {"0": "GPU-bbbb", "1": "GPU-aaaa"}
DCGM_INDEX = {"GPU-aaaa": "0", "GPU-bbbb": "1"}
DCGM = 'instance="dcgm:9400",job="dcgm",modelName="NVIDIA H200"'

# Per device: gauges, and counters as rates per second.
DCGM_VALUES = {  # metric -> {device: value}
    "DCGM_FI_DEV_SM_CLOCK": {"0": 1980, "1": 1410},
    "DCGM_FI_DEV_POWER_USAGE": {"0": 612, "1": 305},
    "DCGM_FI_DEV_GPU_UTIL": {"0": 97, "1": 41},
}
FLOPS_PER_S = {"0": 6e12, "1": 2e12}
REQUESTS_PER_S = {"0": 300, "1": 100}
BATCH_SIZE_MEAN = {"0": 1, "1": 4}
# Means per launch, in seconds (made large: the check rounds to 1 ms).
WORKER_SECONDS = {"0": 0.004, "1": 0.009}
STAGE_SECONDS = {"slot": {"0": 0.001, "1": 0.002},
                 "kernel": {"0": 0.003, "1": 0.006}}
LAUNCH_SECONDS = {"0": 0.04, "1": 0.09}
ANSWER_SECONDS = {"0": 0.002, "1": 0.005}
MEMORY_USED = {"0": 20e9, "1": 10e9}
MEMORY_TOTAL = 141e9


def series():
    """input_series: ten minutes, a sample a minute."""
    out = []

    def gauge(name, labels, value):
        out.append({"series": f"{name}{{{labels}}}",
                    "values": f"{value:g}x10"})

    def counter(name, labels, per_second):
        out.append({"series": f"{name}{{{labels}}}",
                    "values": f"0+{per_second * 60:g}x10"})

    for device, uuid in UUIDS.items():
        gauge("matmul_device_info",
              f'{DAEMON},device="{device}",uuid="{uuid}",'
              'name="NVIDIA H200",compute_capability="9.0",sm_count="132"', 1)
        where = f'{DAEMON},device="{device}"'
        shaped = f'{where},shape="5120x2048x2048"'
        counter("matmul_flops_total", f'{shaped},kernel="k"',
                FLOPS_PER_S[device])
        counter("matmul_request_duration_seconds_count", shaped,
                REQUESTS_PER_S[device])
        # Launches of BATCH_SIZE_MEAN products each.
        launches = REQUESTS_PER_S[device] / BATCH_SIZE_MEAN[device]
        counter("matmul_batch_size_count", where, launches)
        counter("matmul_batch_size_sum", where, REQUESTS_PER_S[device])
        for name, mean in (
                ("matmul_launch_worker_duration_seconds", WORKER_SECONDS),
                ("matmul_launch_duration_seconds", LAUNCH_SECONDS),
                ("matmul_answer_duration_seconds", ANSWER_SECONDS)):
            counter(name + "_count", where, launches)
            counter(name + "_sum", where, launches * mean[device])
        for stage, mean in STAGE_SECONDS.items():
            staged = f'{where},stage="{stage}"'
            counter("matmul_launch_stage_seconds_count", staged, launches)
            counter("matmul_launch_stage_seconds_sum", staged,
                    launches * mean[device])
        for le in ("1", "2", "4", "8", "+Inf"):
            full = float(le) >= BATCH_SIZE_MEAN[device]
            counter("matmul_batch_size_bucket", f'{where},le="{le}"',
                    launches if full else 0)
        gauge("matmul_device_memory_used_bytes", where, MEMORY_USED[device])
        gauge("matmul_device_memory_total_bytes", where, MEMORY_TOTAL)
        for name, values in DCGM_VALUES.items():
            gauge(name, f'{DCGM},UUID="{uuid}",gpu="{DCGM_INDEX[uuid]}"',
                  values[device])
    return out


def dcgm_labels(device):
    uuid = UUIDS[device]
    return (f'{{{DCGM},UUID="{uuid}",gpu="{DCGM_INDEX[uuid]}",'
            f'device="{device}"}}')


def by_device(values):
    return [(f'{{device="{d}"}}', v) for d, v in values.items()]


def raw(values):
    # The selector's labels (its name is dropped by the rounding in main).
    return [(f'{{{DAEMON},device="{d}"}}', v) for d, v in values.items()]


def p90(mean):
    # Every launch in the bucket (mean/2, mean], or (0, 1] for launches of
    # one: linear interpolation, rounded up to a whole batch by the panel
    # (launches of one alone would read 0.9).
    lower = 0 if mean == 1 else mean / 2
    return math.ceil(lower + (mean - lower) * 0.9)


# (panel title, legend) -> [(labels, value)] per device.
EXPECTED = {
    ("Batch size", "mean device {{device}}"): by_device(BATCH_SIZE_MEAN),
    ("Batch size", "p90 device {{device}}"):
        by_device({d: p90(m) for d, m in BATCH_SIZE_MEAN.items()}),
    ("Served TFLOPS by device", "device {{device}}"):
        by_device({d: f / 1e12 for d, f in FLOPS_PER_S.items()}),
    ("Requests/s by device", "device {{device}}"): by_device(REQUESTS_PER_S),
    ("Worker time per launch, by step", "held device {{device}}"):
        by_device(WORKER_SECONDS),
    ("Worker time per launch, by step", "{{stage}} device {{device}}"): [
        (f'{{device="{d}",stage="{stage}"}}', v)
        for stage, means in STAGE_SECONDS.items() for d, v in means.items()],
    ("Launch to end, and answers", "launch to end device {{device}}"):
        by_device(LAUNCH_SECONDS),
    ("Launch to end, and answers", "answers device {{device}}"):
        by_device(ANSWER_SECONDS),
    ("Device memory", "used {{instance}} device {{device}}"):
        raw(MEMORY_USED),
    ("Device memory", "total {{instance}} device {{device}}"):
        raw({d: MEMORY_TOTAL for d in UUIDS}),
}
for _title, _name in (("SM clock", "DCGM_FI_DEV_SM_CLOCK"),
                      ("Power", "DCGM_FI_DEV_POWER_USAGE"),
                      ("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL")):
    EXPECTED[(_title, "device {{device}} {{modelName}}")] = [
        (dcgm_labels(d), v) for d, v in DCGM_VALUES[_name].items()]


def panels(items):
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def main():
    dashboard_path, promtool = sys.argv[1:3]
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    tests, found = [], set()
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            legend = target.get("legendFormat", "")
            if "{{device}}" not in legend:
                continue
            key = (panel["title"], legend)
            if key not in EXPECTED:
                sys.exit(f"FAIL: no expected values for {key}: add them "
                         "to EXPECTED")
            found.add(key)
            expr = target["expr"]
            for variable, value in (("$instance", ".*"), ("$device", ".*"),
                                    ("$shape", ".*"),
                                    ("$__rate_interval", "5m")):
                expr = expr.replace(variable, value)
            # promtool compares exactly; rate()'s extrapolation is not.
            tests.append({"expr": f"round(({expr}) * 1000) / 1000",
                          "eval_time": "10m",
                          "exp_samples": [{"labels": labels, "value": value}
                                          for labels, value in
                                          EXPECTED[key]]})
    missing = set(EXPECTED) - found
    if missing:
        sys.exit(f"FAIL: panels no longer in the dashboard: {sorted(missing)}")
    spec = {"evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series(),
                       "promql_expr_test": tests}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "devices_test.yml")
        with open(path, "w") as f:
            json.dump(spec, f, indent=1)  # YAML reads JSON
        result = subprocess.run([promtool, "test", "rules", path],
                                capture_output=True, text=True)
    print(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit("FAIL: promtool test rules")
    print(f"PASS: {len(tests)} per-device queries, each device its own "
          "values, DCGM joined on UUID")


if __name__ == "__main__":
    main()
