"""The daemon's /metrics as the benchmarks here read them: a scrape, sums
of a metric's series, and what the daemon's launches cost between two
scrapes (many_processes.py scrapes around each daemon round), and the
machine's CPU (/proc/stat) over the same span: where a launch's time goes,
and whether the daemon and its clients had the cores they wanted."""

import os
import urllib.request


def scrape(url):
    """{"name{labels}": value} of every sample but histogram buckets."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return parse(text)


def parse(text):
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "_bucket{" in line:
            continue
        key, value = line.rsplit(" ", 1)
        samples[key] = float(value)
    return samples


def _labels(key):
    """{label: value} of a sample's key (values hold no '",')."""
    if "{" not in key:
        return {}
    inner = key[key.index("{") + 1:key.rindex("}")]
    pairs = (part.split("=", 1) for part in inner.split('",') if part)
    return {k: v.strip('"') for k, v in pairs}


def _series(samples, name):
    """(labels, value) of each of `name`'s series."""
    return ((_labels(key), value) for key, value in samples.items()
            if key.split("{", 1)[0] == name)


def total(samples, name, **labels):
    """The sum of `name`'s series whose labels include `labels`."""
    return sum(value for have, value in _series(samples, name)
               if all(have.get(k) == v for k, v in labels.items()))


def label_values(samples, name, label):
    return sorted({have[label] for have, _ in _series(samples, name)
                   if label in have})


def launch_breakdown(before, after, wall_seconds):
    """What the daemon's launches between two scrapes cost, in microseconds
    per launch (queue: per request): its worker's hold and each of the
    backend's steps in it (matmul_launch_stage_seconds), the launch to its
    end noticed, the kernel, the answers; the mean batch, the daemon's CPU
    in cores, and the busy share of its completion thread (polling,
    completing)."""
    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    launches = delta("matmul_batch_size_count")
    requests = delta("matmul_batch_size_sum")
    queued = delta("matmul_queue_duration_seconds_count")
    if launches <= 0:
        return {"launches": 0}

    def per_launch(name, **labels):
        return delta(name + "_sum", **labels) / launches * 1e6

    stages = {stage: per_launch("matmul_launch_stage_seconds", stage=stage)
              for stage in label_values(after, "matmul_launch_stage_seconds_sum",
                                        "stage")}
    return {
        "launches": launches, "requests": requests,
        "mean_batch": requests / launches,
        "worker_us": per_launch("matmul_launch_worker_duration_seconds"),
        "stages_us": stages,
        "launch_us": per_launch("matmul_launch_duration_seconds"),
        "kernel_us": per_launch("matmul_kernel_duration_seconds"),
        "answer_us": per_launch("matmul_answer_duration_seconds"),
        "queue_us": (delta("matmul_queue_duration_seconds_sum") / queued * 1e6
                     if queued > 0 else 0.0),
        "daemon_cores": delta("process_cpu_seconds_total") / wall_seconds,
        # The share of the span the completion thread spent on each.
        "completion_polling": delta("matmul_completion_thread_seconds_total",
                                    work="polling") / wall_seconds,
        "completion_completing": delta(
            "matmul_completion_thread_seconds_total",
            work="completing") / wall_seconds,
    }


def cpu_times():
    """(busy seconds of all cores, context switches) since boot."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy, switches = 0.0, 0
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0] == "cpu":
                # user nice system idle iowait irq softirq steal ...
                values = [int(v) for v in fields[1:]]
                busy = (sum(values[:8]) - values[3] - values[4]) / ticks
            elif fields[0] == "ctxt":
                switches = int(fields[1])
    return busy, switches


def machine_load(before, after, wall_seconds, products):
    """Cores busy and context switches per product over a span, from two
    cpu_times()."""
    return {"cores_busy": (after[0] - before[0]) / wall_seconds,
            "switches_per_product": (after[1] - before[1]) / max(1, products)}
