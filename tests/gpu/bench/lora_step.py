"""A LoRA training step through the daemon against the same step in torch,
in one process (issue 33's first done-when line): one Qwen-like MLP block
at the seed's shapes (5120 tokens, hidden 2048, intermediate 11008),

    y = down(silu(gate(x)) * up(x)),   proj(x) = x W^T + (x A^T) B^T * scale

each projection a frozen BF16 base weight W [out, in] with trainable rank-16
adapters A [16, in], B [out, 16] (scale = lora_alpha / rank = 32 / 16 = 2,
A as nn.Linear initialises it, B zero, as PEFT does). The adapters are
FP32 master weights, cast to BF16 for the products (what
torch.autocast(bfloat16) does to nn.Linear, and what PEFT's default of
FP32 adapters on a BF16 model comes to under HF's bf16=True), trained by
torch.optim.AdamW (lr 2e-4, weight decay 0: the QLoRA/PEFT recipe) on the
mean squared error, in FP32, against a fixed target: the block's output
with fixed random "teacher" adapters, so that the loss falls as the
adapters learn and follows the gradients closely. One step is zero_grad,
forward, backward, optimizer step, with no synchronize inside (the losses
are read after the run), as a user's loop would do. The sides (--sides,
default all):

  local          torch.nn.functional.linear for every product, the adapter
                 as PEFT adds it (separate products, scale, add);
  daemon         torch.ops.matmul_client.linear for every product, forward
                 and backward: with torch >= 2.4 the op's own autograd (its
                 backward products are torch.ops.matmul_client.matmul
                 calls, on the daemon too); with an older torch, which
                 registers no autograd for the op, a torch.autograd.Function
                 here whose backward makes the same products through
                 torch.ops.matmul_client.matmul (--autograd says which; the
                 report too): a request per product;
  lists          matmul_client.nn.LoraLinear modules: gate and up (which
                 share their input) as one product list forward and one
                 backward (lora_linears_of), down as one each way: 4
                 requests a step, the adapter added in the base GEMM's
                 epilogue (beta = 1);
  local_unsloth  the base GEMM, then the adapter added by one addmm_ into
                 it (y = x W^T; y.addmm_(x A^T, B^T, alpha=scale));
  local_lists    the lists side's very product lists run in this process
                 with torch ops (matmul_client.local_lists.LocalLists:
                 addmm_ into the same outputs, in the same order): the
                 local time of the list algorithm, the lists side's ceiling.

A daemon step is 20 products (gate and up: 3 forward, 3 backward each, the
input needing no gradient; down: 3 forward, 5 backward) in 20 requests on
the daemon side and 4 on the lists side; one untimed step of each counts
the requests the client sends (matmul and matmul_list calls) and fails
unless they are 20 and 4. Two steps of every side from the initial
adapters give their gradients, which must be within 1e-2 (relative norm)
of local's.

All sides start from the same weights, data and target. Each repetition
runs the sides one after the other (the order reversed every other
repetition), each from the initial adapters and a fresh optimizer:
--warmup steps, then --steps steps timed by CUDA events around each step.
Before the first repetition the daemon side steps until the daemon's
per-shape tuning is done (the daemon sides take turns; with --metrics_url:
until matmul_tuning_total has
not moved for --tuning_quiet_s, 10 s, while stepping; without it,
--tuning_steps steps). Per-step time is the mean over the timed steps;
the figures are the median (min..max) over --repeat repetitions, and the
ratios local / side (>= 0.80 is the issue's target for the daemon sides).
The losses of every step of every side must agree with local's within 1%
(relative); the script fails otherwise. The JSON keeps the earlier keys
(daemon_ms, local_ms, ratio = local / daemon) and adds step.sides.<side>
(ms, issue_ms, ratio_local_over, loss_max_relative_difference),
requests_per_step and gradients.

--products also times each of the step's products alone, 100 in a row per
shape (CUDA events around the 100), through the daemon and with torch, so
that a miss can be told apart: kernels, hand-offs, or issuing.

    python3 tests/gpu/bench/lora_step.py --target=unix:/path/matmul.sock \\
        --metrics_url=http://127.0.0.1:9466/metrics --json=$OUT/lora_step.json
    # a CPU daemon, CPU tensors, tiny shapes (a smoke test):
    python3 tests/gpu/bench/lora_step.py --target=unix:/tmp/x.sock \\
        --device=cpu --tokens=64 --hidden=32 --intermediate=64
(tests/gpu/bench/python_bench.sh lora_step starts a daemon from the bundle
and runs this.) Needs a daemon that serves product lists for the lists side
(--sides=local,daemon leaves it out).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import matmul_client  # noqa: E402
import matmul_client.nn as mc_nn  # noqa: E402
import matmul_client.torch_ops as torch_ops  # noqa: E402
from matmul_client.local_lists import LocalLists  # noqa: E402

import daemon_metrics  # noqa: E402
from figures import Clock, cell, client_version, spread  # noqa: E402
from figures import in_a_row_against  # noqa: E402

PROJECTIONS = ("gate", "up", "down")
# Issue 46's targets for the lists side, local / lists: under MPS, and
# without it (where four hand-offs a step cost about 285 us each).
TARGET_RATIO = {"mps": 1.10, "no_mps": 0.70}
LOSS_TOLERANCE = 0.01
GRAD_TOLERANCE = 0.01
PRODUCTS_PER_STEP = 20
# Requests the client sends per step, by daemon side: a product each, or
# four lists (gate and up forward, down forward, down backward, gate and up
# backward).
REQUESTS_PER_STEP = {"daemon": PRODUCTS_PER_STEP, "lists": 4}
SIDES = ("local", "daemon", "lists", "local_unsloth", "local_lists")
DAEMON_SIDES = ("daemon", "lists")
SIDE_DOCS = {
    "local": "local (F.linear, PEFT-style)",
    "daemon": "daemon (a request per product)",
    "lists": "lists (LoraLinear, product lists)",
    "local_unsloth": "local_unsloth (base, addmm_)",
    "local_lists": "local_lists (the lists, torch ops)",
}
IN_A_ROW = 100


# --- the block ---------------------------------------------------------------

class DaemonLinear(torch.autograd.Function):
    """x @ w.T through torch.ops.matmul_client.linear, its gradients through
    torch.ops.matmul_client.matmul: the products torch_ops' own autograd
    makes (torch >= 2.4), for a torch that registers none for the op."""

    @staticmethod
    def forward(ctx, x, w, target):
        ctx.save_for_backward(x, w)
        ctx.target = target
        return torch.ops.matmul_client.linear(x, w, None, None, target)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        op = torch.ops.matmul_client.matmul
        g = grad.to(torch.bfloat16).reshape(-1, grad.shape[-1])
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:  # G @ W: [rows, in]
            grad_x = op(g, w, False, False, 1.0, None,
                        ctx.target).reshape(x.shape)
        if ctx.needs_input_grad[1]:  # G^T @ X: [out, in]
            grad_w = op(g, x.reshape(-1, x.shape[-1]), True, False, 1.0,
                        None, ctx.target)
        return grad_x, grad_w, None


def daemon_linear(target, autograd):
    if autograd == "op":
        def linear(x, w):
            return torch.ops.matmul_client.linear(x, w, None, None, target)
    else:
        def linear(x, w):
            return DaemonLinear.apply(x, w, target)
    return linear


def local_linear(x, w):
    return F.linear(x, w)


def dims(args):
    """{projection: (out, in)}."""
    return {"gate": (args.intermediate, args.hidden),
            "up": (args.intermediate, args.hidden),
            "down": (args.hidden, args.intermediate)}


def initial_state(args, device):
    """The frozen base weights, the input, the adapters' initial values and
    the target, all from one seed."""
    generator = torch.Generator(device="cpu").manual_seed(args.seed)

    def normal(shape, std):
        return (torch.randn(shape, generator=generator) * std).to(device)

    def uniform(shape, bound):
        return ((torch.rand(shape, generator=generator) * 2 - 1) *
                bound).to(device)

    state = {"x": normal((args.tokens, args.hidden), 1.0).to(torch.bfloat16),
             "base": {}, "adapters": {}, "teacher": {}}
    seed_in = {"gate": 2048, "up": 2048, "down": 11008}
    for name, (out, inp) in dims(args).items():
        # Qwen's initializer_range (0.02) at the seed's shapes, scaled with
        # 1/sqrt(in) at others so that activations keep their size; A
        # within nn.Linear's (PEFT's) bound.
        std = 0.02 * math.sqrt(seed_in[name] / inp)
        state["base"][name] = normal((out, inp), std).to(torch.bfloat16)
        state["adapters"][name] = (
            uniform((args.rank, inp), 1 / math.sqrt(inp)),
            torch.zeros(out, args.rank, device=device))
        state["teacher"][name] = (
            uniform((args.rank, inp), 1 / math.sqrt(inp)),
            normal((out, args.rank), args.teacher_std))
    with torch.no_grad():
        state["target"] = forward(local_linear, state["x"], state["base"],
                                  state["teacher"], args.scale).float()
    return state


def lora_projection(linear, x, w, a, b, scale):
    """x W^T + (x A^T) B^T * scale, as PEFT's LoRA Linear computes it; the
    FP32 adapters cast to BF16 for the products as autocast would."""
    lora = linear(linear(x, a.to(torch.bfloat16)), b.to(torch.bfloat16))
    return linear(x, w) + lora * scale


def forward(linear, x, base, adapters, scale):
    g = lora_projection(linear, x, base["gate"], *adapters["gate"], scale)
    u = lora_projection(linear, x, base["up"], *adapters["up"], scale)
    h = F.silu(g) * u
    return lora_projection(linear, h, base["down"], *adapters["down"], scale)


def unsloth_projection(x, w, a, b, scale):
    """x W^T, then the adapter added by one addmm_ into it (Unsloth's
    LoRA forward): y.addmm_(x A^T, B^T, alpha=scale)."""
    y = F.linear(x, w)
    return y.addmm_(F.linear(x, a.to(torch.bfloat16)), b.to(torch.bfloat16).t(),
                    alpha=scale)


def forward_unsloth(x, base, adapters, scale):
    g = unsloth_projection(x, base["gate"], *adapters["gate"], scale)
    u = unsloth_projection(x, base["up"], *adapters["up"], scale)
    h = F.silu(g) * u
    return unsloth_projection(h, base["down"], *adapters["down"], scale)


def lora_modules(state, args, client):
    """{projection: matmul_client.nn.LoraLinear} over the frozen base
    weights (not copied), the adapters set to the initial ones; `client`
    runs their lists (None: the daemon at --target)."""
    modules = {}
    for name, (out, inp) in dims(args).items():
        base = torch.nn.utils.skip_init(
            torch.nn.Linear, inp, out, bias=False,
            device=state["x"].device, dtype=torch.bfloat16)
        base.weight = torch.nn.Parameter(state["base"][name],
                                         requires_grad=False)
        module = mc_nn.LoraLinear(base, args.rank, args.lora_alpha,
                                  target=args.target, client=client)
        with torch.no_grad():
            module.lora_A.copy_(state["adapters"][name][0])
            module.lora_B.copy_(state["adapters"][name][1])
        modules[name] = module
    return modules


class Side:
    """One side's trainable adapters (from the initial values) and its
    AdamW; step() is one training step, returning the loss undetached from
    the device (no synchronize). kind is one of SIDES; linear is the
    product of the "local" and "daemon" sides."""

    def __init__(self, kind, linear, state, args):
        self.kind, self.linear = kind, linear
        self.state, self.scale = state, args.scale
        self.modules = None
        if kind in ("lists", "local_lists"):
            self.modules = lora_modules(
                state, args, LocalLists() if kind == "local_lists" else None)
            self.adapters = {name: (m.lora_A, m.lora_B)
                             for name, m in self.modules.items()}
        else:
            self.adapters = {
                name: tuple(torch.nn.Parameter(t.clone()) for t in pair)
                for name, pair in state["adapters"].items()}
        self.optimizer = torch.optim.AdamW(
            [p for pair in self.adapters.values() for p in pair],
            lr=args.lr, weight_decay=args.weight_decay)

    def forward(self):
        x = self.state["x"]
        if self.modules is not None:
            # gate and up read x: one list each way; down another.
            g, u = mc_nn.lora_linears_of(
                x, (self.modules["gate"], self.modules["up"]))
            return self.modules["down"](F.silu(g) * u)
        if self.kind == "local_unsloth":
            return forward_unsloth(x, self.state["base"], self.adapters,
                                   self.scale)
        return forward(self.linear, x, self.state["base"], self.adapters,
                       self.scale)

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.forward().float(), self.state["target"])
        loss.backward()
        self.optimizer.step()
        return loss.detach()


# --- timing ------------------------------------------------------------------

def run_side(side_name, linear, state, args, clock, target):
    """One run: --warmup then --steps steps from the initial adapters.
    Returns (losses of every step, ms of each timed step, the host's ms to
    issue a step). The host issues the timed steps back to back: where its
    figure is near the step's, the step waits for the host, not the GPU."""
    side = Side(side_name, linear, state, args)
    losses = [side.step() for _ in range(args.warmup)]
    clock.sync()
    marks = [clock.mark()]
    start = time.perf_counter()
    for _ in range(args.steps):
        losses.append(side.step())
        marks.append(clock.mark())
    issue_ms = (time.perf_counter() - start) * 1e3 / args.steps
    step_ms = [clock.ms(a, b) for a, b in zip(marks, marks[1:])]
    if side_name in DAEMON_SIDES:
        matmul_client.default_client(target).synchronize()
    return [loss.item() for loss in losses], step_ms, issue_ms


def profile_daemon_step(side_name, linear, state, args, clock, target):
    """Where a daemon step's time goes: the host's time to issue one step
    (no synchronize) beside the GPU's time for it, the client's fast-path
    hits and misses over the steps, and the Python functions that took
    most of the host's time (cProfile, cumulative)."""
    import cProfile
    import io
    import pstats
    client = matmul_client.default_client(target)
    side = Side(side_name, linear, state, args)
    for _ in range(3):
        side.step()
    clock.sync()
    fast = client._cuda_fast_path
    hits, misses = (fast.hits, fast.misses) if fast else (0, 0)
    issue_ms, gpu_ms = [], []
    profiler = cProfile.Profile()
    for _ in range(args.steps):
        start_event = clock.mark()
        start = time.perf_counter()
        profiler.enable()
        side.step()
        profiler.disable()
        issue_ms.append((time.perf_counter() - start) * 1e3)
        gpu_ms.append(clock.ms(start_event, clock.mark()))
    client.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(
        25)
    report = {"issue_ms": statistics.median(issue_ms),
              "step_ms": statistics.median(gpu_ms),
              "profile": text.getvalue()}
    if fast:
        report["fast_path_hits"] = fast.hits - hits
        report["fast_path_misses"] = fast.misses - misses
    return report


def count_requests(side_name, linear, state, args, target):
    """Requests (hand-offs to the daemon) the client sends in one training
    step of a daemon side: its matmul and matmul_list calls."""
    client = matmul_client.default_client(target)
    calls = []

    def counting(method):
        def call(*positional, **keywords):
            calls.append(1)
            return method(*positional, **keywords)
        return call

    client.matmul = counting(client.matmul)
    client.matmul_list = counting(client.matmul_list)
    try:
        Side(side_name, linear, state, args).step()
        client.synchronize()
    finally:
        del client.matmul
        del client.matmul_list
    return len(calls)


def adapter_gradients(side_name, linear, state, args):
    """The adapters' gradients of a side's second step from the initial
    adapters ({projection: (dA, dB)}, on the CPU): B starts at zero, so
    that of the first step has no dA."""
    side = Side(side_name, linear, state, args)
    side.step()
    side.step()
    if side_name in DAEMON_SIDES:
        matmul_client.default_client(args.target).synchronize()
    return {name: tuple(p.grad.detach().double().cpu() for p in pair)
            for name, pair in side.adapters.items()}


def gradient_difference(grads, reference):
    """The largest relative norm difference of one side's adapter gradients
    from the reference's."""
    worst = 0.0
    for name, pair in reference.items():
        for got, want in zip(grads[name], pair):
            norm = want.norm().item()
            diff = (got - want).norm().item()
            worst = max(worst, diff / norm if norm else diff)
    return worst


def tuning_total(url):
    """matmul_tuning_total summed over outcomes, from the daemon's
    /metrics."""
    return daemon_metrics.total(daemon_metrics.scrape(url),
                                "matmul_tuning_total")


def settle_tuning(linears, state, args, clock):
    """Steps the daemon sides (one step of each per round) until the
    daemon's per-shape tuning is done (see the module's doc). Returns what
    it saw."""
    sides = [Side(name, linears.get(name), state, args)
             for name in args.sides if name in DAEMON_SIDES]

    class Rounds:
        def step(self):
            for side in sides:
                side.step()

    side = Rounds()
    start = time.monotonic()
    steps = 0
    if not args.metrics_url:
        for _ in range(args.tuning_steps):
            side.step()
        clock.sync()
        return {"steps": args.tuning_steps, "seconds": time.monotonic() -
                start, "tunings": None, "settled": None}
    last, last_change = tuning_total(args.metrics_url), time.monotonic()
    first = last
    settled = False
    while time.monotonic() - start < args.tuning_wait_s:
        for _ in range(5):
            side.step()
            steps += 1
        clock.sync()
        now = tuning_total(args.metrics_url)
        if now != last:
            last, last_change = now, time.monotonic()
        elif (time.monotonic() - last_change >= args.tuning_quiet_s and
              steps >= args.tuning_steps):
            settled = True
            break
        if steps % 50 == 0:
            print(".", end="", flush=True, file=sys.stderr)
    return {"steps": steps, "seconds": time.monotonic() - start,
            "tunings": last - first, "settled": settled, "total": last}


def measure_step(linears, state, args, clock):
    """--repeat runs of every side in args.sides (the order reversed every
    other repetition). Each side's per-step ms, the ratios local / side,
    and each side's largest relative loss difference from local's."""
    sides = list(args.sides)
    runs = {side: [] for side in sides}
    for r in range(args.repeat):
        for side_name in (sides if r % 2 == 0 else sides[::-1]):
            losses, step_ms, issue_ms = run_side(
                side_name, linears.get(side_name), state, args, clock,
                args.target)
            runs[side_name].append({"losses": losses, "step_ms": step_ms,
                                    "issue_ms": issue_ms})
            print(".", end="", flush=True, file=sys.stderr)
    mean = {side: [statistics.fmean(run["step_ms"]) for run in runs[side]]
            for side in runs}
    issue = {side: [run["issue_ms"] for run in runs[side]] for side in runs}
    mps = matmul_client.default_client(args.target).server_info().mps_client
    report = {"sides": {}, "mps_client": mps,
              "target_ratio": TARGET_RATIO["mps" if mps else "no_mps"],
              "loss_tolerance": LOSS_TOLERANCE, "runs": runs}
    worst_all = 0.0
    for side in sides:
        entry = {"ms": spread(mean[side]), "issue_ms": spread(issue[side])}
        if side != "local":
            entry["ratio_local_over"] = spread(
                [loc / ms for loc, ms in zip(mean["local"], mean[side])])
            worst = 0.0
            for loc, run in zip(runs["local"], runs[side]):
                for a, b in zip(loc["losses"], run["losses"]):
                    worst = max(worst, abs(b - a) / abs(a) if a else abs(b))
            entry["loss_max_relative_difference"] = worst
            worst_all = max(worst_all, worst)
        report["sides"][side] = entry
        report[side + "_ms"] = entry["ms"]
        report[side + "_issue_ms"] = entry["issue_ms"]
    # The figures earlier reports had: local / daemon, and the worst loss.
    if "daemon" in runs:
        report["ratio"] = report["sides"]["daemon"]["ratio_local_over"]
    if "lists" in runs:
        report["ratio_lists"] = report["sides"]["lists"]["ratio_local_over"]
    report["loss_max_relative_difference"] = worst_all
    return report


# --- the step's products, one shape at a time --------------------------------

def step_products(args):
    """The products of one step as the daemon gets them: (what, count, M,
    N, K, transpose_a, transpose_b)."""
    t, h, i, r = args.tokens, args.hidden, args.intermediate, args.rank
    return [
        ("gate/up base forward", 2, t, i, h, False, True),
        ("gate/up x A^T", 2, t, r, h, False, True),
        ("gate/up (xA^T) B^T", 2, t, i, r, False, True),
        ("down base forward", 1, t, h, i, False, True),
        ("down x A^T", 1, t, r, i, False, True),
        ("down (xA^T) B^T", 1, t, h, r, False, True),
        ("down dB = G^T (xA^T)", 1, h, r, t, True, False),
        ("down d(xA^T) = G B", 1, t, r, h, False, False),
        ("down dA = d(xA^T)^T x", 1, r, i, t, True, False),
        ("down dx via A", 1, t, i, r, False, False),
        ("down dx via W", 1, t, i, h, False, False),
        ("gate/up dB = G^T (xA^T)", 2, i, r, t, True, False),
        ("gate/up d(xA^T) = G B", 2, t, r, i, False, False),
        ("gate/up dA = d(xA^T)^T x", 2, r, h, t, True, False),
    ]


def product_operands(m, n, k, transpose_a, transpose_b, device, seed=0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn((k, m) if transpose_a else (m, k), generator=generator)
    b = torch.randn((n, k) if transpose_b else (k, n), generator=generator)
    return a.to(device, torch.bfloat16), b.to(device, torch.bfloat16)


def measure_products(args, device, clock):
    rows = []
    for (what, count, m, n, k, ta, tb) in step_products(args):
        a, b = product_operands(m, n, k, ta, tb, device)

        def ours(a, b, ta=ta, tb=tb):
            return torch.ops.matmul_client.matmul(a, b, ta, tb, 1.0, None,
                                                  args.target)

        def theirs(a, b, ta=ta, tb=tb):
            return torch.matmul(a.T if ta else a, b.T if tb else b)

        daemon_ms, local_ms = in_a_row_against(ours, theirs, a, b, IN_A_ROW,
                                               args.repeat, clock)
        daemon_us = [ms * 1e3 / IN_A_ROW for ms in daemon_ms]
        local_us = [ms * 1e3 / IN_A_ROW for ms in local_ms]
        matmul_client.default_client(args.target).synchronize()
        rows.append({"what": what, "count": count, "shape": [m, n, k],
                     "layout": ("T" if ta else "N") + ("T" if tb else "N"),
                     "daemon_us": spread(daemon_us),
                     "local_us": spread(local_us),
                     "ratio": spread([loc / dae for loc, dae in
                                      zip(local_us, daemon_us)])})
        print(".", end="", flush=True, file=sys.stderr)
    total = {side: [sum(row["count"] * row[side + "_us"]["runs"][r]
                        for row in rows) / 1e3 for r in range(args.repeat)]
             for side in ("daemon", "local")}
    return {"in_a_row": IN_A_ROW, "rows": rows,
            "step_daemon_ms": spread(total["daemon"]),
            "step_local_ms": spread(total["local"])}


# --- report ------------------------------------------------------------------

def table(report):
    c = report["config"]
    s = report["step"]
    lines = [f"lora_step: torch {report['torch']}, {report['device']}, "
             f"matmul_client {report['matmul_client']}; daemon backward by "
             f"{report['autograd_doc']}; median (min..max) of "
             f"{report['repeat']} repetitions",
             f"block {c['tokens']} tokens, hidden {c['hidden']}, "
             f"intermediate {c['intermediate']}, rank {c['rank']}, scale "
             f"{c['scale']:g}; AdamW lr {c['lr']:g} on FP32 adapters; "
             f"{c['warmup']} warm-up + {c['steps']} timed steps per run",
             "requests (hand-offs) per step: " + ", ".join(
                 f"{side} {n}" for side, n in
                 report["requests_per_step"].items()),
             "tuning warm-up: " + tuning_line(report["tuning"]),
             "the daemon is " + ("" if s["mps_client"] else "not ") +
             "an MPS client", "",
             "training step, ms (mean over the timed steps of a run); "
             "ratio = local / side",
             "%-34s %24s %24s %20s" % ("side", "step ms", "host issues, ms",
                                       "ratio")]
    for side in s["sides"]:
        entry = s["sides"][side]
        ratio = entry.get("ratio_local_over")
        lines.append("%-34s %24s %24s %20s%s" % (
            SIDE_DOCS[side], cell(entry["ms"], "%.3f"),
            cell(entry["issue_ms"], "%.3f"),
            cell(ratio, "%.3f") if ratio else "",
            ("  " + verdict(ratio["median"], s["target_ratio"]))
            if ratio and side == "lists" else ""))
    grads = report.get("gradients")
    if grads:
        lines += ["", "adapter gradients after two steps, largest relative "
                  "difference from local's (tolerance %g): " % GRAD_TOLERANCE
                  + ", ".join(f"{side} {worst:.2e}"
                              for side, worst in grads.items())]
    others = [side for side in s["sides"] if side != "local"]
    lines += ["", "losses, first repetition (relative difference from local; "
              "max over all runs %.2e, tolerance %g)" % (
                  s["loss_max_relative_difference"], s["loss_tolerance"]),
              "%6s %14s" % ("step", "local") + "".join(
                  " %14s %10s" % (side[:14], "rel diff") for side in others)]
    local = s["runs"]["local"][0]["losses"]
    for i, a in enumerate(local):
        label = ("w%d" % (i + 1)) if i < c["warmup"] else \
            str(i + 1 - c["warmup"])
        line = "%6s %14.6g" % (label, a)
        for side in others:
            b = s["runs"][side][0]["losses"][i]
            line += " %14.6g %10.2e" % (b, abs(b - a) / abs(a) if a
                                        else abs(b))
        lines.append(line)
    p = report.get("products")
    if p:
        lines += ["", f"the step's products one shape at a time, "
                  f"{p['in_a_row']} in a row (us per product; ratio = "
                  "local / daemon)",
                  "%-24s %2s %-17s %2s %24s %24s %18s" % (
                      "product", "n", "M x N x K", "op", "daemon", "local",
                      "ratio")]
        for row in p["rows"]:
            lines.append("%-24s %2d %-17s %2s %24s %24s %18s" % (
                row["what"], row["count"], "x".join(map(str, row["shape"])),
                row["layout"], cell(row["daemon_us"]),
                cell(row["local_us"]), cell(row["ratio"], "%.2f")))
        lines.append("sum over the step's %d products, ms: daemon %s, local "
                     "%s" % (sum(row["count"] for row in p["rows"]),
                             cell(p["step_daemon_ms"], "%.3f"),
                             cell(p["step_local_ms"], "%.3f")))
    return "\n".join(lines)


def tuning_line(tuning):
    if tuning["tunings"] is None:
        return f"{tuning['steps']} steps, {tuning['seconds']:.1f} s (no " \
            "--metrics_url: tuning not watched)"
    return f"{tuning['steps']} steps, {tuning['seconds']:.1f} s, " \
        f"{tuning['tunings']:.0f} tunings, " + (
            "settled" if tuning["settled"] else
            "NOT settled (--tuning_wait_s reached)") + \
        f"; {tuning.get('during_runs', 0):.0f} more during the timed runs"


def verdict(value, target):
    return ("met" if value >= target else "NOT met") + " (>= %g)" % target


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--target", required=True,
                        help="the daemon, e.g. unix:/run/matmul/matmul.sock")
    parser.add_argument("--json", default="", help="write the report here")
    parser.add_argument("--repeat", type=int, default=3,
                        help="repetitions of every figure (default 3)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="untimed steps at the start of each run "
                        "(default 10)")
    parser.add_argument("--steps", type=int, default=30,
                        help="timed steps of each run (default 30)")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default) or cpu (a CPU daemon)")
    parser.add_argument("--tokens", type=int, default=5120,
                        help="rows of x (default 5120, the seed's)")
    parser.add_argument("--hidden", type=int, default=2048,
                        help="the block's width (default 2048)")
    parser.add_argument("--intermediate", type=int, default=11008,
                        help="gate's and up's outputs (default 11008)")
    parser.add_argument("--rank", type=int, default=16,
                        help="the adapters' rank (default 16)")
    parser.add_argument("--lora_alpha", type=float, default=32.0,
                        help="scale = lora_alpha / rank (default 32: 2)")
    parser.add_argument("--lr", type=float, default=2e-4,
                        help="AdamW's learning rate (default 2e-4)")
    parser.add_argument("--weight_decay", type=float, default=0.0,
                        help="AdamW's weight decay (default 0)")
    parser.add_argument("--teacher_std", type=float, default=0.01,
                        help="std of the target's B adapters (default 0.01)")
    parser.add_argument("--seed", type=int, default=0,
                        help="of the weights, data and target (default 0)")
    parser.add_argument("--autograd", default="auto",
                        choices=("auto", "op", "function"),
                        help="the daemon side's backward: op = the custom "
                        "op's own autograd (torch >= 2.4), function = this "
                        "script's autograd.Function calling the op; auto = "
                        "op where torch registers it (default)")
    parser.add_argument("--metrics_url", default="",
                        help="the daemon's /metrics, to wait for its tuning "
                        "(e.g. http://127.0.0.1:9466/metrics)")
    parser.add_argument("--tuning_steps", type=int, default=10,
                        help="daemon steps before the repetitions, at least "
                        "(default 10)")
    parser.add_argument("--tuning_quiet_s", type=float, default=10.0,
                        help="tuning is done when matmul_tuning_total has "
                        "not moved for this long (default 10)")
    parser.add_argument("--tuning_wait_s", type=float, default=300.0,
                        help="at most this long for the tuning (default 300)")
    parser.add_argument("--products", action="store_true",
                        help="also time the step's products one shape at a "
                        "time, 100 in a row each")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the daemon side's steps: host "
                        "time to issue a step against its GPU time, the "
                        "client's fast-path hits and misses, cProfile's top "
                        "functions (each daemon side)")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="the sides to run, comma-separated (default "
                        "all: " + ",".join(SIDES) + "); local always runs")
    args = parser.parse_args()
    args.sides = [side for side in args.sides.split(",") if side]
    unknown = sorted(set(args.sides) - set(SIDES))
    if unknown:
        parser.error(f"unknown sides {unknown}; expected some of {SIDES}")
    if "local" not in args.sides:
        args.sides.insert(0, "local")
    args.scale = args.lora_alpha / args.rank
    device = torch.device(args.device)
    if args.autograd == "auto":
        args.autograd = "op" if torch_ops.SUPPORT["autograd"] else "function"
    if args.autograd == "op" and not torch_ops.SUPPORT["autograd"]:
        parser.error(f"torch {torch.__version__} registers no autograd for "
                     "the op (torch >= 2.4 does): use --autograd=function")
    clock = Clock(device)
    state = initial_state(args, device)
    linears = {"local": local_linear,
               "daemon": daemon_linear(args.target, args.autograd)}
    transport = matmul_client.default_client(args.target).transport
    report = {
        "torch": torch.__version__,
        "device": (torch.cuda.get_device_name(device)
                   if device.type == "cuda" else "cpu"),
        "matmul_client": f"{client_version()}, transport {transport}",
        "autograd": args.autograd,
        "autograd_doc": ("the op's own autograd" if args.autograd == "op"
                         else "this script's autograd.Function"),
        "repeat": args.repeat,
        "config": {key: getattr(args, key) for key in (
            "tokens", "hidden", "intermediate", "rank", "lora_alpha",
            "scale", "lr", "weight_decay", "teacher_std", "seed", "warmup",
            "steps")}}
    report["config"].update(optimizer="torch.optim.AdamW",
                            adapters="FP32, cast to BF16 for the products",
                            loss="MSE in FP32 against a teacher's output")
    failed = []
    report["requests_per_step"] = {}
    for side in args.sides:
        if side not in DAEMON_SIDES:
            continue
        count = count_requests(side, linears.get(side), state, args,
                               args.target)
        report["requests_per_step"][side] = count
        if count != REQUESTS_PER_STEP[side]:
            failed.append(f"{side}: {count} requests per step, expected "
                          f"{REQUESTS_PER_STEP[side]}")
    if "daemon" in report["requests_per_step"]:
        report["products_per_step"] = report["requests_per_step"]["daemon"]
    report["tuning"] = settle_tuning(linears, state, args, clock)
    reference = adapter_gradients("local", linears["local"], state, args)
    report["gradients"] = {
        side: gradient_difference(adapter_gradients(
            side, linears.get(side), state, args), reference)
        for side in args.sides if side != "local"}
    for side, worst in report["gradients"].items():
        if not worst <= GRAD_TOLERANCE:
            failed.append(f"{side}: adapter gradients after two steps differ "
                          f"from local's by up to {worst:.2e} (relative), "
                          f"more than {GRAD_TOLERANCE:g}")
    report["step"] = measure_step(linears, state, args, clock)
    if args.metrics_url:  # a key met late (another batch) was tuned then
        report["tuning"]["during_runs"] = tuning_total(
            args.metrics_url) - report["tuning"]["total"]
    for side, entry in report["step"]["sides"].items():
        worst = entry.get("loss_max_relative_difference", 0.0)
        if not worst <= LOSS_TOLERANCE:
            failed.append(f"{side}: losses differ from local's by up to "
                          f"{worst:.2e} (relative), more than "
                          f"{LOSS_TOLERANCE:g}")
    if args.products:
        report["products"] = measure_products(args, device, clock)
    print(file=sys.stderr)
    print(table(report))
    if args.profile:
        report["profile"] = {}
        for side in args.sides:
            if side not in DAEMON_SIDES:
                continue
            profile = profile_daemon_step(side, linears.get(side), state,
                                          args, clock, args.target)
            report["profile"][side] = profile
            print(f"\nprofile of {args.steps} {side} steps: host issues a "
                  f"step in {profile['issue_ms']:.3f} ms, the step takes "
                  f"{profile['step_ms']:.3f} ms; fast path hits "
                  f"{profile.get('fast_path_hits')}, misses "
                  f"{profile.get('fast_path_misses')}")
            print(profile["profile"])
    for line in failed:
        print("FAILED " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
