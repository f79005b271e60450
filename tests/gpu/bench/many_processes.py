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

from figures import cell, spread  # noqa: E402

M, N, K, RANK = 16, 4096, 4096, 16
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
    return (torch.randn(*shape, device="cuda", generator=generator)
            * scale).to(torch.bfloat16)


class Worker:
    """One process's operands and its products, both sides."""

    def __init__(self, index, target, handle, ring_spin_us):
        import torch

        import matmul_client
        self.torch, self.mc = torch, matmul_client
        self.client = matmul_client.Client(target, ring_spin_us=ring_spin_us)
        generator = torch.Generator(device="cuda").manual_seed(100 + index)
        self.x = randn(generator, M, K)
        self.own = randn(generator, N, K, scale=K ** -0.5)
        self.a = randn(generator, RANK, K, scale=K ** -0.5)
        self.b = randn(generator, N, RANK, scale=RANK ** -0.5)
        shared_generator = torch.Generator(device="cuda").manual_seed(
            SHARED_SEED)
        self.shared_copy = randn(shared_generator, N, K, scale=K ** -0.5)
        self.shared = matmul_client.SharedWeight.open(handle,
                                                      client=self.client)
        self.out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        self.xa = torch.empty(M, RANK, device="cuda", dtype=torch.bfloat16)
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
        torch.cuda.synchronize()
        start = time.monotonic()  # one clock for all processes
        for i in range(count):
            self.product(mode, side)
            # Stream-ordered: the stream waits for the daemon's product.
            torch.cuda.synchronize()
            if i % check_every == check_every - 1:
                self.check(mode, side)  # rare: its time counts
        end = time.monotonic()
        if side == "daemon":
            self.client.synchronize()  # raises what the daemon refused
        return start, end


def worker_main(index, target, handle, ring_spin_us, warm, plan, barrier,
                results):
    worker = Worker(index, target, handle, ring_spin_us)
    # Warm, every process at once: regions, kernels, and the daemon's
    # choices for the batches that concurrency makes (each batch size is a
    # shape its selector tunes once).
    for mode in MODES:
        for side in SIDES:
            worker.round(mode, side, warm, 10)
    for repeat, mode, processes, side, count, check_every in plan:
        barrier.wait()
        if index < processes:
            start, end = worker.round(mode, side, count, check_every)
            results.put((repeat, mode, processes, side, start, end))
    barrier.wait()
    results.put(("wrong", index, worker.wrong))
    worker.client.close()


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
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    modes = [m for m in args.modes.split(",") if m]

    import torch

    import matmul_client
    owner = matmul_client.Client(args.target)
    generator = torch.Generator(device="cuda").manual_seed(SHARED_SEED)
    weight = randn(generator, N, K, scale=K ** -0.5)
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
    barrier = context.Barrier(most)
    results = context.Queue()
    workers = [context.Process(target=worker_main, args=(
        i, args.target, shared.handle, args.ring_spin_us, args.warm_products,
        plan, barrier, results))
        for i in range(most)]
    for w in workers:
        w.start()
    spans, wrong = {}, []
    expected = sum(p for (_, _, p, _, _, _) in plan) + most
    for _ in range(expected):
        item = results.get(timeout=900)
        if item[0] == "wrong":
            wrong.extend(f"process {item[1]}: {w}" for w in item[2])
            continue
        repeat, mode, processes, side, start, end = item
        spans.setdefault((repeat, mode, processes, side), []).append(
            (start, end))
    for w in workers:
        w.join(timeout=60)
    failed_exit = [w.exitcode for w in workers if w.exitcode != 0]
    shared.close()
    owner.close()

    report = {"gpu": torch.cuda.get_device_name(), "commit": commit(),
              "shape": [M, N, K],
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
            report["cases"].append({
                "mode": mode, "processes": processes,
                "daemon_per_s": spread(rates["daemon"]),
                "local_per_s": spread(rates["local"]),
                "ratio": spread([d / l for d, l in
                                 zip(rates["daemon"], rates["local"])])})
    report["wrong"] = wrong
    print(f"{'case':<10} {'procs':>5}  {'daemon products/s':>24}  "
          f"{'local products/s':>24}  {'daemon/local':>18}")
    for case in report["cases"]:
        print(f"{case['mode']:<10} {case['processes']:>5}  "
              f"{cell(case['daemon_per_s'], '%.0f'):>24}  "
              f"{cell(case['local_per_s'], '%.0f'):>24}  "
              f"{cell(case['ratio'], '%.2f'):>18}")
    for line in wrong:
        print("WRONG " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if wrong or failed_exit else 0


if __name__ == "__main__":
    sys.exit(main())
