"""Many processes on one GPU, through the daemon and with torch in each
process (issue 47's cases), every product NT 16x4096x4096 (a decode step's
projection), each call followed by a synchronize:

  distinct  each process its own weight;
  shared    one weight for all: through the daemon, matmul_client.
            SharedWeight (this script's process owns it, the workers open
            it), read in place; locally each process holds a copy;
  adapter   the shared weight plus a rank-16 adapter of each process's own:
            through the daemon one product list (base, x A^T, += (x A^T)
            B^T); locally the base product then addmm_ of the adapter.

for 1, 2, 4 and 8 processes: aggregate products/s of each side and their
ratio (daemon / local), each the median (min..max) of --repeat rounds; the
sides alternate within each round. Every --check_every-th product of each
process is checked against an FP32 torch product of the same operands
(relative norm error < 1e-2); any wrong one fails the script.

    python3 tests/gpu/bench/many_processes.py --target=unix:/path.sock \\
        --json=$OUT/many_processes.json
(MPS=both tests/gpu/bench/python_bench.sh many_processes starts the
daemon, without and with MPS, and keeps its metrics.)

With --metrics_url, the daemon's /metrics are read before and after each
daemon round: each case then reports where its launches' time went (the
worker's hold per launch and each step of it, launch to end, kernel,
answers, queue per request, mean batch, the daemon's CPU, the busy share of
its completion thread), summed over its rounds; and for both sides, the
machine's busy cores and context switches per product (/proc/stat).

--device=cpu runs the distinct case with CPU tensors against a CPU daemon
(a smoke test of the script; SharedWeight is CUDA-only), with --shape to
make it small.
"""

import argparse
import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_env  # noqa: E402  (puts client/python on sys.path)

import daemon_metrics  # noqa: E402
from figures import cell, spread  # noqa: E402

RANK = 16
MODES = ("distinct", "shared", "adapter")
SIDES = ("daemon", "local")
SHARED_SEED = 7


def commit():
    """The commit measured: the bundle's (tests/gpu/bundle.sh writes it),
    else the checkout's."""
    try:
        with open(os.path.join(gpu_env.REPO, "bundle", "COMMIT")) as f:
            return f.readline().strip()[:12]
    except OSError:
        import subprocess
        return subprocess.run(["git", "-C", gpu_env.REPO, "rev-parse",
                               "--short=12", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "unknown"


def randn(generator, *shape, scale=1.0):
    import torch
    return (torch.randn(*shape, device=generator.device, generator=generator)
            * scale).to(torch.bfloat16)


def synchronize(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


class Worker:
    """One process's operands and its products, both sides."""

    def __init__(self, index, target, handle, ring_spin_us, device, shape):
        import torch

        import matmul_client
        m, n, k = shape
        self.torch, self.mc, self.device = torch, matmul_client, device
        self.client = matmul_client.Client(target, ring_spin_us=ring_spin_us)
        generator = torch.Generator(device=device).manual_seed(100 + index)
        self.x = randn(generator, m, k)
        self.own = randn(generator, n, k, scale=k ** -0.5)
        self.a = randn(generator, RANK, k, scale=k ** -0.5)
        self.b = randn(generator, n, RANK, scale=RANK ** -0.5)
        shared_generator = torch.Generator(device=device).manual_seed(
            SHARED_SEED)
        self.shared_copy = randn(shared_generator, n, k, scale=k ** -0.5)
        self.shared = (matmul_client.SharedWeight.open(handle,
                                                       client=self.client)
                       if handle else None)
        self.out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
        self.xa = torch.empty(m, RANK, device=device, dtype=torch.bfloat16)
        self.wrong = []

    def product(self, mode, side):
        torch, out = self.torch, self.out
        if side == "local":
            if mode == "distinct":
                torch.matmul(self.x, self.own.T, out=out)
            else:
                torch.matmul(self.x, self.shared_copy.T, out=out)
            if mode == "adapter":
                torch.matmul(self.x, self.a.T, out=self.xa)
                out.addmm_(self.xa, self.b.T)
            return
        if mode == "adapter":
            P = self.mc.Product
            self.client.matmul_list([
                P(self.x, self.shared, out, transpose_b=True),
                P(self.x, self.a, self.xa, transpose_b=True),
                P(self.xa, self.b, out, transpose_b=True, beta=1.0)])
        else:
            weight = self.own if mode == "distinct" else self.shared
            self.client.matmul(self.x, weight, out=out, transpose_b=True)

    def check(self, mode, side):
        torch = self.torch
        weight = self.own if mode == "distinct" else self.shared_copy
        want = self.x.float() @ weight.float().T
        if mode == "adapter":
            xa = (self.x.float() @ self.a.float().T).to(torch.bfloat16)
            want += xa.float() @ self.b.float().T
        error = ((self.out.float() - want).norm() / want.norm()).item()
        if not error < 1e-2:
            self.wrong.append(f"{mode} {side}: relative error {error:.2e}")

    def round(self, mode, side, count, check_every):
        torch = self.torch
        self.out.fill_(float("nan"))
        synchronize(torch, self.device)
        start = time.monotonic()  # one clock for all processes
        for i in range(count):
            self.product(mode, side)
            # Stream-ordered: the stream waits for the daemon's product.
            synchronize(torch, self.device)
            if i % check_every == check_every - 1:
                self.check(mode, side)  # rare: its time counts
        end = time.monotonic()
        if side == "daemon":
            self.client.synchronize()  # raises what the daemon refused
        return start, end


def worker_main(index, target, handle, ring_spin_us, device, shape, modes,
                warm, plan, barrier, results):
    worker = Worker(index, target, handle, ring_spin_us, device, shape)
    # Warm, every process at once: regions, kernels, and the daemon's
    # choices for the batches that concurrency makes (each batch size is a
    # shape its selector tunes once).
    for mode in modes:
        for side in SIDES:
            worker.round(mode, side, warm, 10)
    # The main process waits at the barrier too: it reads the daemon's
    # metrics and the machine's CPU between rounds.
    for repeat, mode, processes, side, count, check_every in plan:
        barrier.wait()
        if index < processes:
            start, end = worker.round(mode, side, count, check_every)
            results.put((repeat, mode, processes, side, start, end))
    barrier.wait()
    results.put(("wrong", index, worker.wrong))
    worker.client.close()


def parse_shape(text):
    shape = [int(v) for v in text.split(",")]
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--shape {text}: expected M,N,K")
    return shape


def run_plan(args, plan, barrier, results, most):
    """Waits at the barrier with the workers before each round, reading the
    machine's CPU (and the daemon's metrics, for a daemon round) on both
    sides of it. Returns each round's spans, the metrics and CPU figures
    by (repeat, mode, processes, side), and what the workers found wrong."""
    spans, breakdowns, loads, wrong = {}, {}, {}, []
    for repeat, mode, processes, side, count, _ in plan:
        key = (repeat, mode, processes, side)
        watch = args.metrics_url and side == "daemon"
        before = daemon_metrics.scrape(args.metrics_url) if watch else None
        cpu_before = daemon_metrics.cpu_times()
        opened = time.monotonic()
        barrier.wait(timeout=900)
        for _ in range(processes):
            item = results.get(timeout=900)
            spans.setdefault(item[:4], []).append(item[4:])
        cpu_after = daemon_metrics.cpu_times()
        # The CPU figures cover this span, a little more than the round.
        span = time.monotonic() - opened
        loads[key] = daemon_metrics.machine_load(cpu_before, cpu_after, span,
                                                 processes * count)
        if watch:
            breakdowns[key] = daemon_metrics.launch_breakdown(
                before, daemon_metrics.scrape(args.metrics_url), span)
    barrier.wait(timeout=900)
    for _ in range(most):
        _, index, found = results.get(timeout=900)
        wrong.extend(f"process {index}: {w}" for w in found)
    return spans, breakdowns, loads, wrong


def merged(figures):
    """Several rounds' breakdowns as one: launch-weighted means."""
    figures = [f for f in figures if f.get("launches")]
    if not figures:
        return None
    launches = sum(f["launches"] for f in figures)

    def mean(get):
        return sum(get(f) * f["launches"] for f in figures) / launches

    out = {"launches": launches,
           "requests": sum(f["requests"] for f in figures)}
    out["mean_batch"] = out["requests"] / launches
    for name in ("worker_us", "launch_us", "kernel_us", "answer_us",
                 "queue_us", "daemon_cores", "completion_polling",
                 "completion_completing"):
        out[name] = mean(lambda f: f[name])
    stages = sorted({stage for f in figures for stage in f["stages_us"]})
    out["stages_us"] = {stage: mean(lambda f: f["stages_us"].get(stage, 0.0))
                        for stage in stages}
    return out


def print_breakdowns(report):
    print(f"\nthe machine ({report['cpus']} CPUs), median of the rounds:")
    print(f"{'case':<10} {'procs':>5}  {'daemon: cores busy':>19} "
          f"{'switches/product':>17}  {'local: cores busy':>18} "
          f"{'switches/product':>17}")
    for c in report["cases"]:
        d, l = c["machine"]["daemon"], c["machine"]["local"]
        print(f"{c['mode']:<10} {c['processes']:>5}  "
              f"{d['cores_busy']:>19.1f} {d['switches_per_product']:>17.1f}  "
              f"{l['cores_busy']:>18.1f} {l['switches_per_product']:>17.1f}")
    rows = [c for c in report["cases"] if c.get("daemon_launches")]
    if not rows:
        return
    stages = sorted({s for c in rows for s in c["daemon_launches"]
                     ["stages_us"]})
    print("\nthe daemon's launches (us per launch; queue: per request):")
    print(f"{'case':<10} {'procs':>5} {'batch':>6} {'worker':>7} "
          + " ".join(f"{s[:10]:>10}" for s in stages)
          + f" {'to end':>7} {'kernel':>7} {'answer':>7} {'queue':>7}"
          f" {'cores':>6} {'poller: polling':>15} {'completing':>10}")
    for c in rows:
        b = c["daemon_launches"]
        print(f"{c['mode']:<10} {c['processes']:>5} {b['mean_batch']:>6.2f} "
              f"{b['worker_us']:>7.1f} "
              + " ".join(f"{b['stages_us'].get(s, 0.0):>10.1f}"
                         for s in stages)
              + f" {b['launch_us']:>7.1f} {b['kernel_us']:>7.1f}"
              f" {b['answer_us']:>7.1f} {b['queue_us']:>7.1f}"
              f" {b['daemon_cores']:>6.2f} {b['completion_polling']:>15.2f}"
              f" {b['completion_completing']:>10.2f}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--json", default="")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--processes", default="1,2,4,8",
                        help="process counts (default 1,2,4,8)")
    parser.add_argument("--products", type=int, default=1000,
                        help="products per process per round")
    parser.add_argument("--warm_products", type=int, default=300,
                        help="products per process per mode and side "
                        "before the rounds, all processes at once")
    parser.add_argument("--check_every", type=int, default=50)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--ring_spin_us", type=float, default=None,
                        help="the clients' ring spin (default: the "
                        "client's own)")
    parser.add_argument("--metrics_url", default="",
                        help="the daemon's /metrics: read around each "
                        "daemon round (empty: not read)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="where the tensors live (cpu: distinct only)")
    parser.add_argument("--shape", type=parse_shape, default=[16, 4096, 4096],
                        help="M,N,K of every product (default 16,4096,4096)")
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; expected of "
                     f"{','.join(MODES)}")
    needs_shared = any(m != "distinct" for m in modes)
    if needs_shared and args.device != "cuda":
        parser.error("--device=cpu runs --modes=distinct only "
                     "(SharedWeight is CUDA-only)")
    m, n, k = args.shape

    import torch

    import matmul_client
    owner, shared = None, None
    if needs_shared:
        owner = matmul_client.Client(args.target)
        generator = torch.Generator(device="cuda").manual_seed(SHARED_SEED)
        weight = randn(generator, n, k, scale=k ** -0.5)
        shared = matmul_client.SharedWeight(weight, client=owner)

    plan = []
    for repeat in range(args.repeat):
        for mode in modes:
            for processes in counts:
                for side in SIDES:
                    plan.append((repeat, mode, processes, side,
                                 args.products, args.check_every))
    context = multiprocessing.get_context("spawn")
    most = max(counts)
    barrier = context.Barrier(most + 1)  # and this process
    results = context.Queue()
    workers = [context.Process(target=worker_main, args=(
        i, args.target, shared.handle if shared else "", args.ring_spin_us,
        args.device, args.shape, modes, args.warm_products, plan, barrier,
        results))
        for i in range(most)]
    for w in workers:
        w.start()
    spans, breakdowns, loads, wrong = run_plan(args, plan, barrier, results,
                                               most)
    for w in workers:
        w.join(timeout=60)
    failed_exit = [w.exitcode for w in workers if w.exitcode != 0]
    if shared:
        shared.close()
        owner.close()

    report = {"gpu": (torch.cuda.get_device_name() if args.device == "cuda"
                      else "cpu"),
              "commit": commit(), "shape": [m, n, k], "cpus": os.cpu_count(),
              "rank": RANK, "products_per_process": args.products,
              "repeat": args.repeat, "cases": []}
    for mode in modes:
        for processes in counts:
            rates = {side: [] for side in SIDES}
            for repeat in range(args.repeat):
                for side in SIDES:
                    s = spans[(repeat, mode, processes, side)]
                    wall = max(e for _, e in s) - min(b for b, _ in s)
                    rates[side].append(processes * args.products / wall)
            case = {
                "mode": mode, "processes": processes,
                "daemon_per_s": spread(rates["daemon"]),
                "local_per_s": spread(rates["local"]),
                "ratio": spread([d / l for d, l in
                                 zip(rates["daemon"], rates["local"])])}
            case["machine"] = {side: {
                name: spread([loads[(r, mode, processes, side)][name]
                              for r in range(args.repeat)])["median"]
                for name in ("cores_busy", "switches_per_product")}
                for side in SIDES}
            launches = merged([breakdowns[(r, mode, processes, "daemon")]
                               for r in range(args.repeat)
                               if (r, mode, processes, "daemon")
                               in breakdowns])
            if launches:
                case["daemon_launches"] = launches
            report["cases"].append(case)
    # A daemon round the metrics saw no launch of: they miscount.
    for key, figures in sorted(breakdowns.items()):
        if not figures.get("launches"):
            wrong.append(f"the daemon's metrics counted no launch in round "
                         f"{key}")
    report["wrong"] = wrong
    print(f"{'case':<10} {'procs':>5}  {'daemon products/s':>24}  "
          f"{'local products/s':>24}  {'daemon/local':>18}")
    for case in report["cases"]:
        print(f"{case['mode']:<10} {case['processes']:>5}  "
              f"{cell(case['daemon_per_s'], '%.0f'):>24}  "
              f"{cell(case['local_per_s'], '%.0f'):>24}  "
              f"{cell(case['ratio'], '%.2f'):>18}")
    print_breakdowns(report)
    for line in wrong:
        print("WRONG " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if wrong or failed_exit else 0


if __name__ == "__main__":
    sys.exit(main())
