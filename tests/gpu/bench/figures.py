"""What the PyTorch benchmarks here (lora_step.py, native_speed.py,
many_processes.py) share: a figure repeated --repeat times kept as its
median (min..max) and every run (the JSON's {median, min, max, runs},
which tools/benchmarks_page.py reads), its table cell, the client's
version line, and the daemon against torch on N products in a row.
Imports torch only where a clock needs it (many_processes.py imports it
in its workers alone)."""

import importlib.util
import statistics
import time


def spread(values):
    """{median, min, max, runs} of repeated figures."""
    return {"median": statistics.median(values), "min": min(values),
            "max": max(values), "runs": list(values)}


def cell(figure, fmt="%.1f"):
    """A spread as "median (min..max)"."""
    return (fmt % figure["median"]) + " (" + (fmt % figure["min"]) + ".." + \
        (fmt % figure["max"]) + ")"


def client_version():
    """matmul_client's version and whether its native extension (the
    request ring's fast path) is there."""
    import matmul_client
    native = ("present" if importlib.util.find_spec("matmul_client._native")
              else "absent")
    return f"{matmul_client.__version__}, extension {native}"


class Clock:
    """Marks between steps: CUDA events on a CUDA device (recorded on the
    current stream, no synchronize), the host's clock on the CPU (where the
    products are synchronous)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            import torch
            self.torch = torch

    def mark(self):
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, start, end):
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end)
        return (end - start) * 1e3

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


def in_a_row_ms(product, a, b, count, clock):
    """ms for `count` calls of product(a, b) issued back to back, no
    synchronize between them."""
    clock.sync()
    start = clock.mark()
    for _ in range(count):
        product(a, b)
    end = clock.mark()
    return clock.ms(start, end)


def in_a_row_against(ours, theirs, a, b, count, repeat, clock):
    """([ms] of ours, [ms] of theirs): `count` products in a row of each,
    `repeat` times, after 10 of each to warm up (regions, kernels, the
    daemon's tuning); the two take turns within a repetition, the first
    of them alternating from one repetition to the next."""
    for product in (ours, theirs):
        in_a_row_ms(product, a, b, 10, clock)
    ours_ms, theirs_ms = [], []
    for r in range(repeat):
        for side in ((ours, theirs) if r % 2 == 0 else (theirs, ours)):
            ms = in_a_row_ms(side, a, b, count, clock)
            (ours_ms if side is ours else theirs_ms).append(ms)
    return ours_ms, theirs_ms
