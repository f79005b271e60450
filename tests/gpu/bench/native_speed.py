"""How a PyTorch user's products through the daemon compare with torch.matmul
in the same process (issue 21's PyTorch done-when lines), on CUDA tensors,
every product NT (y = x @ w.T, w as nn.Linear holds it):

  per call     each call followed by torch.cuda.synchronize(): p50 of the
               wall time per call, for 256x256x256, 16x4096x4096 and the
               seed's four shapes.
  100 in a row stream-ordered calls with no synchronize between them (as a
               model's forward pass issues them), timed by CUDA events
               around the 100: torch's time / the daemon's (>= 1 is as
               fast as torch), for the seed's four shapes.
  8 processes  each calling 16x4096x4096 products one after another with
               its own weights: aggregate products/s through the daemon /
               with torch.matmul in the same eight processes (whose
               contexts time-slice the GPU); each product waited for
               before the next (the issue's reference), and stream-ordered
               calls waited for at the end of the round.

Every figure is the median of --repeat repetitions with their min..max;
the two sides of a comparison alternate within each repetition. Each
shape's daemon result is checked against torch first (relative norm error
< 1e-2; the script fails otherwise). Prints a table with the issue's
targets beside the figures and writes everything to --json.

    python3 tests/gpu/bench/native_speed.py --target=unix:/path/matmul.sock \\
        --json=$OUT/native_speed.json
(tests/gpu/bench/python_bench.sh native_speed starts a daemon from the
bundle and runs this.)
"""

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)

import torch  # noqa: E402

import matmul_client  # noqa: E402

from figures import Clock, cell, client_version, spread  # noqa: E402
from figures import in_a_row_against  # noqa: E402

SMALL_SHAPES = [(256, 256, 256), (16, 4096, 4096)]  # M, N, K
SEED_SHAPES = [(5120, 11008, 2048), (5120, 2048, 11008), (5120, 2048, 2048),
               (5120, 512, 2048)]
PER_CALL_TARGET_US = {(256, 256, 256): 50.0, (16, 4096, 4096): 50.0}
IN_A_ROW_TARGET = {(5120, 11008, 2048): 0.95, (5120, 2048, 11008): 0.95,
                   (5120, 2048, 2048): 0.90, (5120, 512, 2048): 0.80}
PROCESSES_TARGET = 3.0
PROCESSES_SHAPE = (16, 4096, 4096)


def operands(m, n, k, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16,
                    generator=generator)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16,
                    generator=generator)
    return x, w


def daemon_product(target):
    def product(x, w):
        return matmul_client.matmul(x, w, transpose_b=True, target=target)
    return product


def torch_product(x, w):
    return torch.matmul(x, w.T)


def check_result(target, m, n, k):
    x, w = operands(m, n, k, seed=1)
    got = daemon_product(target)(x, w)
    want = x.float() @ w.float().T
    torch.cuda.synchronize()
    return ((got.float() - want).norm() / want.norm()).item()


# --- per call, synchronize after each ----------------------------------------

def per_call_p50_us(product, x, w, calls):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        product(x, w)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure_per_call(target, shapes, repeat):
    rows = []
    for (m, n, k) in shapes:
        x, w = operands(m, n, k)
        calls = 200 if m * n * k <= 16 * 4096 * 4096 else 40
        ours, theirs = daemon_product(target), torch_product
        for product in (ours, theirs):  # warm: regions, heuristics, tuning
            per_call_p50_us(product, x, w, 10)
        daemon_us, torch_us = [], []
        for _ in range(repeat):
            daemon_us.append(per_call_p50_us(ours, x, w, calls))
            torch_us.append(per_call_p50_us(theirs, x, w, calls))
        rows.append({"shape": [m, n, k], "calls": calls,
                     "daemon_us": spread(daemon_us),
                     "torch_us": spread(torch_us),
                     "target_us": PER_CALL_TARGET_US.get((m, n, k))})
        print(".", end="", flush=True, file=sys.stderr)
    return rows


# --- 100 stream-ordered products in a row ------------------------------------

def measure_in_a_row(target, shapes, repeat, count=100):
    clock = Clock(torch.device("cuda"))
    rows = []
    for (m, n, k) in shapes:
        x, w = operands(m, n, k)
        daemon_ms, torch_ms = in_a_row_against(
            daemon_product(target), torch_product, x, w, count, repeat, clock)
        ratio = [t / d for t, d in zip(torch_ms, daemon_ms)]
        flops = 2.0 * m * n * k * count
        rows.append({
            "shape": [m, n, k], "count": count,
            "daemon_ms": spread(daemon_ms), "torch_ms": spread(torch_ms),
            "daemon_tflops": spread([flops / t * 1e-9 for t in daemon_ms]),
            "torch_tflops": spread([flops / t * 1e-9 for t in torch_ms]),
            "ratio": spread(ratio), "target_ratio": IN_A_ROW_TARGET.get(
                (m, n, k))})
        print(".", end="", flush=True, file=sys.stderr)
    return rows


# --- eight processes ----------------------------------------------------------
#
# Two ways to call serially: "sync", each product waited for (a
# torch.cuda.synchronize() after each call) before the next, which is what
# the reference figures are (8 processes time-slicing the GPU:
# 6,465 products/s, one alone 26,937); and "stream", stream-ordered calls
# with no wait until the end of the round, reported beside it.

PROCESS_MODES = [("daemon", "sync"), ("torch", "sync"), ("daemon", "stream"),
                 ("torch", "stream")]


def process_round(product, x, w, count, sync):
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for all processes
    for _ in range(count):
        product(x, w)
        if sync:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return start, time.monotonic()


def process_worker(index, target, repeat, count, barrier, results):
    """One of the processes: its own weights, `count` products per round,
    one round per (repetition, mode), all processes starting a round
    together at the barrier."""
    m, n, k = PROCESSES_SHAPE
    x, w = operands(m, n, k, seed=100 + index)
    products = {"daemon": daemon_product(target), "torch": torch_product}
    for side in products:  # warm
        process_round(products[side], x, w, 20, True)
    for r in range(repeat):
        for side, how in PROCESS_MODES:
            barrier.wait()
            start, end = process_round(products[side], x, w, count,
                                       how == "sync")
            results.put((side, how, r, start, end))
    barrier.wait()


def measure_processes(target, processes, repeat, count):
    context = multiprocessing.get_context("spawn")  # CUDA in children
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [context.Process(target=process_worker,
                               args=(i, target, repeat, count, barrier,
                                     results))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    rounds = {}
    for _ in range(len(PROCESS_MODES) * repeat * processes):
        side, how, r, start, end = results.get(timeout=600)
        rounds.setdefault((side, how, r), []).append((start, end))
    for worker in workers:
        worker.join(timeout=60)
        if worker.exitcode != 0:
            raise RuntimeError(f"a process worker exited {worker.exitcode}")
    rates = {}
    for (side, how, r), spans in sorted(rounds.items()):
        wall = max(e for _, e in spans) - min(s for s, _ in spans)
        rates.setdefault((side, how), []).append(processes * count / wall)
    # One process calling torch.matmul alone, for scale.
    m, n, k = PROCESSES_SHAPE
    x, w = operands(m, n, k)
    process_round(torch_product, x, w, 20, True)  # warm (cuBLAS, kernels)
    alone = {"sync": [], "stream": []}
    for _ in range(repeat):
        for how in alone:
            start, end = process_round(torch_product, x, w, count,
                                       how == "sync")
            alone[how].append(count / (end - start))
    report = {"shape": list(PROCESSES_SHAPE), "processes": processes,
              "products_per_process": count}
    for how in ("sync", "stream"):
        daemon, local = rates[("daemon", how)], rates[("torch", how)]
        report[how] = {
            "daemon_per_s": spread(daemon), "torch_per_s": spread(local),
            "torch_one_process_per_s": spread(alone[how]),
            "ratio": spread([d / t for d, t in zip(daemon, local)]),
            "target_ratio": PROCESSES_TARGET if how == "sync" else None}
    return report


# --- report ------------------------------------------------------------------

def verdict(value, target, higher_is_better):
    if target is None:
        return "reported"
    met = value >= target if higher_is_better else value <= target
    return ("met" if met else "NOT met") + (" (>= %g)" if higher_is_better
                                            else " (<= %g)") % target


def table(report):
    shape = lambda s: "x".join(map(str, s))  # noqa: E731
    lines = [f"native_speed: torch {report['torch']}, {report['gpu']}, "
             f"matmul_client {report['matmul_client']}; median (min..max) "
             f"of {report['repeat']} repetitions", "",
             "per call, torch.cuda.synchronize() after each (p50, us)",
             "%-18s %22s %22s  %s" % ("shape NT", "daemon", "torch.matmul",
                                      "target")]
    for row in report["per_call"]:
        lines.append("%-18s %22s %22s  %s" % (
            shape(row["shape"]), cell(row["daemon_us"]),
            cell(row["torch_us"]), verdict(row["daemon_us"]["median"],
                                           row["target_us"], False)))
    lines += ["", "100 stream-ordered products in a row (CUDA events; "
              "TFLOP/s; ratio = torch time / daemon time)",
              "%-18s %20s %20s %20s  %s" % ("shape NT", "daemon", "torch",
                                            "ratio", "target")]
    for row in report["in_a_row"]:
        lines.append("%-18s %20s %20s %20s  %s" % (
            shape(row["shape"]), cell(row["daemon_tflops"], "%.0f"),
            cell(row["torch_tflops"], "%.0f"), cell(row["ratio"], "%.3f"),
            verdict(row["ratio"]["median"], row["target_ratio"], True)))
    p = report.get("processes")
    if p:
        lines += ["", f"{p['processes']} processes, {shape(p['shape'])} NT "
                  f"serially, own weights ({p['products_per_process']} "
                  "each; products/s in all)",
                  "%-36s %18s %18s" % ("", "sync after each",
                                       "stream-ordered")]
        for label, key, fmt in (
                ("daemon", "daemon_per_s", "%.0f"),
                ("torch.matmul", "torch_per_s", "%.0f"),
                ("torch.matmul, one process alone",
                 "torch_one_process_per_s", "%.0f"),
                ("ratio daemon / torch.matmul", "ratio", "%.2f")):
            lines.append("  %-34s %18s %18s" % (
                label, cell(p["sync"][key], fmt), cell(p["stream"][key], fmt)))
        lines.append("  target (sync after each, as the issue's reference): "
                     + verdict(p["sync"]["ratio"]["median"],
                               p["sync"]["target_ratio"], True))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--target", required=True,
                        help="the daemon, e.g. unix:/run/matmul/matmul.sock")
    parser.add_argument("--json", default="", help="write the report here")
    parser.add_argument("--repeat", type=int, default=5,
                        help="repetitions of every figure (default 5)")
    parser.add_argument("--processes", type=int, default=8,
                        help="processes of the last part (0 skips it)")
    parser.add_argument("--process_products", type=int, default=1000,
                        help="products per process per repetition")
    parser.add_argument("--only", default="",
                        help="comma-separated parts to run: per_call, "
                        "in_a_row, processes (default all)")
    args = parser.parse_args()
    parts = set(args.only.split(",")) if args.only else {
        "per_call", "in_a_row", "processes"}
    report = {"torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(),
              "matmul_client": client_version(),
              "repeat": args.repeat, "errors": {}}
    failed = []
    for (m, n, k) in SMALL_SHAPES + SEED_SHAPES:
        error = check_result(args.target, m, n, k)
        report["errors"][f"{m}x{n}x{k}"] = error
        if not error < 1e-2:
            failed.append(f"{m}x{n}x{k}: relative error {error:.2e}")
    if "per_call" in parts:
        report["per_call"] = measure_per_call(
            args.target, SMALL_SHAPES + SEED_SHAPES, args.repeat)
    else:
        report["per_call"] = []
    report["in_a_row"] = measure_in_a_row(
        args.target, SEED_SHAPES, args.repeat) if "in_a_row" in parts else []
    if "processes" in parts and args.processes > 0:
        report["processes"] = measure_processes(
            args.target, args.processes, args.repeat, args.process_products)
    print(file=sys.stderr)
    print(table(report))
    for line in failed:
        print("WRONG RESULT " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
