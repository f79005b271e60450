#!/usr/bin/python3
"""Regenerates docs/benchmarks.md from the results of one run kept in
docs/bench/ (tests/gpu/bench/ produces them on the GPU machine):

  run_info.json       the commit measured, the GPU, the date, the commands
  matmul_bench.json   matmul-bench --json: the kernel table and the
                      sustained runs
  service_*.json      matmul-cli bench --save: one table per file, in file
                      name order
  *.png               charts drawn from those files (tools/plot_bench.py),
                      shown under the service tables
  dashboard_vs_bench.txt
                      tests/gpu/checks/dashboard_vs_bench.sh's check, and
                      docs/dashboard/*.png (tools/dashboard/pictures.sh)
  lora_step.json, lora_step_mps.json
                      tests/gpu/bench/lora_step.py --json, without MPS
                      and under MPS (tests/gpu/bench/lora_lists_gpu.sh
                      runs both): the LoRA training step's sides
  native_speed.json, native_speed_mps.json
                      tests/gpu/bench/native_speed.py --json, without
                      and under MPS (lora_lists_gpu.sh runs both):
                      per-call p50 and the eight-process products/s
  many_processes.json, many_processes_mps.json
                      tests/gpu/bench/many_processes.py --json, without
                      and under MPS (tests/gpu/bench/python_bench.sh
                      many_processes with MPS=both writes both): 1 to
                      8 processes with distinct weights, one shared
                      weight, and the shared weight with adapters; with
                      the daemon's metrics, where its launches went

Every figure on the page comes from these files; the prose around them
only says how each figure is measured. A part whose files are absent says
so on the page (and on stderr).

Usage:
  python3 tools/benchmarks_page.py            # writes docs/benchmarks.md
  python3 tools/benchmarks_page.py --check    # exit 1 if the page is stale
  python3 tools/benchmarks_page.py --bench-dir DIR --output PAGE.md

Exit status: 0 written (or current), 1 an input is not what its writer
writes (the message names the file and the field) or --check found the
page out of date. Python's standard library only.
"""
import argparse
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INTRO = """\
The kernel and service figures on this page come from one run of
`tests/gpu/bench/benchmarks.sh` on one NVIDIA H200 (sm_90a, 132 SMs) lent
through the project's device tool; the dashboard check at the end is a step of its
own on the same kind of machine, and the PyTorch figures come from a
device call of their own, on the GPU they name. No GB10 (DGX Spark) has been available to this project, so no figure
here is a Spark figure: the "fits the GB10" columns name the project's own
kernels that would fit a GB10's 99 KiB of shared memory per block, timed
on the H200.

Every kernel comparison is against cuBLASLt in the same process on the same
data: the top-k algorithms of cuBLASLt's heuristic are each timed with a
32 MiB workspace and the fastest is kept. Kernel times are medians of many
runs after a warm-up, measured with CUDA events; the inputs are random
non-zero BF16, rotated when they fit in L2. GPU instances differ between
device sessions, so only figures from one run are set side by side. The
kernels' design is in [kernels/mma/README.md](../kernels/mma/README.md),
the selector and cuBLASLt in [kernels/cuda/README.md](../kernels/cuda/README.md).
"""

KERNELS_METHOD = """\
`matmul-bench` tunes each shape and layout as the daemon's selector does
(every own kernel configuration and cuBLASLt's candidates), then re-times
the best of every kernel family interleaved with the selector's pick (what
the daemon runs), so that their ratios compare like with like. The table
gives the pick, the best cuBLASLt candidate, the fastest own kernel (on
the H200 usually the Hopper family, which needs more shared memory than a
GB10 has) and the best own kernel that fits the GB10's. Layout N is
row-major, T transposed; NT is PyTorch's `nn.Linear`. These are burst
figures: each kernel runs for tens of milliseconds between other
candidates.
"""

SUSTAINED_METHOD = """\
Each kernel below ran back to back for {seconds} after as long a warm-up,
over {sets} rotating A and C buffers and one shared B, as a daemon serving
that many clients runs it; the kernels ran one after the other on the same
operands. This is the standalone figure a service run compares with: under
sustained load an H200 runs at its power cap, at a lower SM clock than in
the table's bursts. Besides back to back (and its ratio to the table's
figure and to cuBLASLt's back to back): with a timing event recorded after
each product (as the daemon times its launches), with a timing-disabled
event after each, and round robin over several streams with an event pair
around each product, each as a ratio to back to back.
"""

SERVICE_METHOD = """\
`matmul-cli bench` against `matmul-server --backend=cuda` on the same
machine (client and daemon share its host cores), B transposed
(`nn.Linear`), operands in CUDA IPC regions: every client slot has its own
A and C and all share one B, as clients calling one layer do. Requests go
over unary gRPC, or through shared-memory request rings where the mode
says `rings`. The daemon starts on matmul-bench's tuning cache, so it runs
the kernels timed above. For each concurrency level the client keeps that
many requests in flight and measures in windows until the last three agree
within 10% on throughput and p50 latency; the statistics cover those
windows. Latency is the client's, from sending to the answer; batch is the
mean number of requests per launch; kernel is the server's median kernel
time; e2e - kernel is the end-to-end latency minus that kernel time, what
the service itself costs. By Little's law the mean latency at concurrency
c is c / throughput, so batching (requests of one shape, layout and
operand placement that wait together run as one launch) is what lets
throughput grow with concurrency at a bounded latency. Abseil as Debian
builds it has the mutex deadlock detector on; matmul-server and matmul-cli
turn it off at start-up.
"""

DASHBOARD_METHOD = """\
`tests/gpu/checks/dashboard_vs_bench.sh`: matmul-bench runs 5120x11008x2048
NT back to back for 20 s and stores its pick; a daemon started on that
tuning cache (batching off, so every launch is one such product) serves
`matmul-cli bench --mode=ipc --concurrency=8` for 60 s while a real
Prometheus scrapes it every second; the dashboard's "Kernel TFLOPS by
shape" expression, evaluated through Prometheus's query API over the
steady part of the load, is compared with the bench's sustained figure
(the check passes within 5%). A 30 s mixed load follows (several shapes
inline, through shm and CUDA IPC, and a shape over `--max_dimension`,
rejected) for the other panels. The panels are drawn by
`tools/dashboard/render_panels.py` from the dashboard's own PromQL (no
Grafana runs here), and Prometheus's own graph page by
`tools/dashboard/pictures.sh`.
"""


class BadInput(Exception):
    """An input that is not what its writer writes."""


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e}") from e


def field(obj, key, kind, where):
    """obj[key], checked to be of `kind` (numbers: int or float, no bool)."""
    if not isinstance(obj, dict) or key not in obj:
        raise BadInput(f"{where}: no \"{key}\"")
    value = obj[key]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise BadInput(f"{where}: \"{key}\" is not a {kind.__name__}")
    return value


def cell(text):
    return str(text).replace("|", "\\|")


def tflops(x):
    if x <= 0:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.3f}"


def ratio(x, y):
    return f"{x / y:.2f}" if x > 0 and y > 0 else "-"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- matmul-bench ---------------------------------------------------------

def check_kernel_entry(entry, where):
    for key in ("shape", "layout"):
        field(entry, key, str, where)
    for key in ("pick", "cublaslt_best", "spark_best"):
        field(entry, key, dict, where)
        field(entry[key], "kernel", str, f"{where} {key}")
        field(entry[key], "tflops", float, f"{where} {key}")
    for i, s in enumerate(entry.get("sustained") or []):
        w = f"{where} sustained[{i}]"
        for key in ("which", "kernel"):
            field(s, key, str, w)
        for key in ("operand_sets", "back_to_back_tflops",
                    "event_after_each_tflops",
                    "plain_event_after_each_tflops", "streams_tflops"):
            field(s, key, float, w)
    field(entry, "candidates", list, where)


def load_kernels(path):
    bench = load_json(path)
    runs = field(bench, "runs", list, path)
    if not runs or not all(isinstance(r, list) and r for r in runs):
        raise BadInput(f"{path}: \"runs\" is not a list of non-empty runs")
    for r, run in enumerate(runs):
        for i, entry in enumerate(run):
            check_kernel_entry(entry, f"{path}: runs[{r}][{i}]")
    return bench


def fastest_own(entry):
    """The fastest own (non-cuBLASLt) family best of a matmul-bench entry,
    as {kernel, tflops}; kernel "" where the entry has none."""
    own = [f for f in entry.get("family_best") or []
           if not f.get("kernel", "").startswith("cublaslt")]
    if not own:
        return {"kernel": "", "tflops": 0.0}
    return max(own, key=lambda f: f["tflops"])


def kernel_section(bench, name):
    runs = bench["runs"]
    last = runs[-1]
    out = [KERNELS_METHOD]
    env = bench.get("environment")
    if env:
        out.append(f"`{name}`; matmul-bench saw: {env}"
                   + (f", shared memory limit {bench['max_shared_bytes']} B"
                      if "max_shared_bytes" in bench else "")
                   + (f"; the table is the last of {len(runs)} runs"
                      if len(runs) > 1 else "") + ".\n")
    rows = []
    for e in last:
        lt = e["cublaslt_best"]["tflops"]
        pick, spark, own = e["pick"], e["spark_best"], fastest_own(e)
        rows.append([e["shape"], e["layout"], f"`{pick['kernel']}`",
                     tflops(pick["tflops"]),
                     f"`{e['cublaslt_best']['kernel']}`" if lt > 0 else "-",
                     tflops(lt), ratio(pick["tflops"], lt),
                     f"`{own['kernel']}`" if own["kernel"] else "-",
                     tflops(own["tflops"]), ratio(own["tflops"], lt),
                     f"`{spark['kernel']}`" if spark["kernel"] else "-",
                     tflops(spark["tflops"]), ratio(spark["tflops"], lt)])
    out.append("TFLOPS:\n")
    out.append(table(["shape", "layout", "pick", "TFLOPS", "cuBLASLt best",
                      "TFLOPS", "pick / cuBLASLt", "fastest own kernel",
                      "TFLOPS", "/ cuBLASLt",
                      "best own kernel that fits the GB10", "TFLOPS",
                      "/ cuBLASLt"], rows))
    if len(runs) > 1:
        out.append(f"\nThe ratios over all {len(runs)} runs, median "
                   "[min, max]:\n")
        rows = []
        for i, e in enumerate(last):
            def spread(key):
                values = sorted(
                    run[i][key]["tflops"] / run[i]["cublaslt_best"]["tflops"]
                    for run in runs if i < len(run)
                    and run[i]["cublaslt_best"]["tflops"] > 0
                    and run[i][key]["tflops"] > 0)
                if not values:
                    return "-"
                return (f"{values[len(values) // 2]:.3f} "
                        f"[{values[0]:.3f}, {values[-1]:.3f}]")
            rows.append([e["shape"], e["layout"], spread("pick"),
                         spread("spark_best")])
        out.append(table(["shape", "layout", "pick / cuBLASLt",
                          "GB10-fitting / cuBLASLt"], rows))
    return "\n".join(out)


def sustained_section(bench, seconds):
    last = bench["runs"][-1]
    if not any(e.get("sustained") for e in last):
        return None
    sets = next(s["operand_sets"] for e in last for s in e.get("sustained")
                or [])
    out = [SUSTAINED_METHOD.format(
        seconds=f"{seconds} s per phase" if seconds else "some seconds",
        sets=sets)]
    rows = []
    for e in last:
        sustained = e.get("sustained") or []
        lt_b2b = next((s["back_to_back_tflops"] for s in sustained
                       if s["which"] == "cublaslt"), 0)
        table_figure = {"pick": e["pick"]["tflops"],
                        "spark": e["spark_best"]["tflops"],
                        "cublaslt": e["cublaslt_best"]["tflops"]}
        for s in sustained:
            b2b = s["back_to_back_tflops"]
            figure = table_figure.get(s["which"])
            if figure is None:  # an own config named by --sustained_kernels
                figure = next((c.get("tflops", 0) for c in e["candidates"]
                               if c.get("kernel") == s["kernel"]), 0)

            def of_b2b(x):
                return f"{tflops(x)} ({ratio(x, b2b)})"
            rows.append([e["shape"], e["layout"], s["which"],
                         f"`{s['kernel']}`", tflops(figure),
                         f"{tflops(b2b)} ({ratio(b2b, figure)})",
                         ratio(b2b, lt_b2b),
                         of_b2b(s["event_after_each_tflops"]),
                         of_b2b(s["plain_event_after_each_tflops"]),
                         of_b2b(s["streams_tflops"])])
    out.append("TFLOPS:\n")
    out.append(table(["shape", "layout", "which", "kernel", "table",
                      "back to back (/ table)", "/ cuBLASLt back to back",
                      "timing event after each", "plain event after each",
                      "streams"], rows))
    return "\n".join(out)


# --- matmul-cli bench -----------------------------------------------------

LEVEL_FIELDS = ("requests_per_second", "tflops", "latency_p50_s",
                "latency_p99_s", "mean_batch_size", "server_kernel_p50_s",
                "overhead_p50_s", "overhead_p99_s")


def load_service(path):
    run = load_json(path)
    if not isinstance(run, dict):
        raise BadInput(f"{path}: not a JSON object")
    for key in ("label", "shape", "mode"):
        field(run, key, str, path)
    levels = field(run, "levels", list, path)
    if not levels:
        raise BadInput(f"{path}: \"levels\" is empty")
    for i, level in enumerate(levels):
        where = f"{path}: levels[{i}]"
        field(level, "concurrency", int, where)
        for key in LEVEL_FIELDS:
            field(level, key, float, where)
    return run


def service_table(run, name):
    rows, notes = [], []
    for lv in run["levels"]:
        rows.append([
            lv["concurrency"], f"{lv['requests_per_second']:,.0f}",
            tflops(lv["tflops"]), f"{lv['latency_p50_s'] * 1e3:.3f}",
            f"{lv['latency_p99_s'] * 1e3:.3f}",
            f"{lv['mean_batch_size']:.1f}",
            f"{lv['server_kernel_p50_s'] * 1e6:.1f}",
            f"{lv['overhead_p50_s'] * 1e6:.1f} / "
            f"{lv['overhead_p99_s'] * 1e6:.1f}",
            f"`{lv['kernel']}`" if lv.get("kernel") else "-"])
        if lv.get("stable") is False:
            notes.append(f"concurrency {lv['concurrency']}: not stable after "
                         f"{lv.get('windows', '?')} windows")
        if lv.get("errors"):
            notes.append(f"concurrency {lv['concurrency']}: {lv['errors']} "
                         f"errors, first: {lv.get('first_error', '')}")
    out = [f"### {run['label']}: {run['shape']}, {run['mode']}\n",
           f"From `{name}`.\n",
           table(["concurrency", "req/s", "TFLOPS", "p50 ms", "p99 ms",
                  "batch", "kernel p50 us", "e2e - kernel p50 / p99 us",
                  "kernel"], rows)]
    if notes:
        out.append("".join(f"- {n}\n" for n in notes))
    return "\n".join(out)


# --- PyTorch: lora_step.py and native_speed.py ---------------------------

LORA_METHOD = """\
`tests/gpu/bench/lora_step.py`: one LoRA training step (zero_grad,
forward, backward, AdamW) of a Qwen-like MLP block,
y = down(silu(gate(x)) * up(x)), frozen BF16 weights with trainable FP32
adapters. All sides run in one process on one GPU from the same weights
and data, the daemon sides against one CUDA daemon; local_lists runs the
lists side's own product lists with torch ops, the lists side's ceiling.
A figure is a run's mean step time (CUDA events) over its timed steps
after a warm-up, the median (min..max) of the runs; ratio = local / side
(above 1: faster than local). Every side's losses agree with local's
within 1% and its adapter gradients within 1e-2, or the script fails.
Under MPS a fresh daemon and the script are clients of one MPS server;
`tests/gpu/bench/lora_lists_gpu.sh` makes both files, and
native_speed.py's, in one device call.
"""

NATIVE_METHOD = """\
`tests/gpu/bench/native_speed.py`: NT products (y = x @ w.T) of random
BF16 through the daemon (`matmul_client.matmul`) and with `torch.matmul`
in the same process, the two alternating within each run. Per call: the
p50 wall time of a call followed by `torch.cuda.synchronize()`. Eight
processes: each calls 16x4096x4096 products with its own weights;
products/s of all together, each product waited for before the next
(issue 21's reference) or stream-ordered and waited for at the end.
"""

MANY_METHOD = """\
`tests/gpu/bench/many_processes.py`: 1, 2, 4 and 8 processes each call
NT products, 16x4096x4096 (a decode step's projection), each call followed
by `torch.cuda.synchronize()`, through one daemon and with torch in each
process, the two alternating within each run: `distinct`, each process its
own weight; `shared`, one weight for all (through the daemon a
`matmul_client.SharedWeight` read in place; locally a copy in each
process); `adapter`, the shared weight plus a rank-16 adapter of each
process's own (through the daemon one product list; locally the base
product then `addmm_`). Products/s of all processes together; sampled
products are checked against FP32, and the script fails on a wrong one.
"""

LORA_FILES = ("lora_step.json", "lora_step_mps.json")
MANY_FILES = ("many_processes.json", "many_processes_mps.json")
# A case's daemon_launches figures the page shows (besides stages_us).
MANY_LAUNCH_FIGURES = ("mean_batch", "worker_us", "launch_us",
                       "completion_polling", "completion_completing",
                       "daemon_cores")
NATIVE_FILES = ("native_speed.json", "native_speed_mps.json")
MPS_LABELS = ("without MPS", "under MPS")
# lora_step.py's sides, in the page's order, and what each is.
LORA_SIDES = (
    ("local", "local (F.linear, PEFT-style)"),
    ("local_unsloth", "local_unsloth (base, then addmm_)"),
    ("local_lists", "local_lists (the lists run with torch ops in the "
     "process: the ceiling)"),
    ("daemon", "daemon (a request per product)"),
    ("lists", "lists (LoraLinear, product lists)"),
)
SMALL_SHAPES = ((256, 256, 256), (16, 4096, 4096))
PROCESS_MODES = (("sync", "each product waited for"),
                 ("stream", "stream-ordered, waited for at the end"))


def check_spread(obj, key, where):
    """obj[key] as tests/gpu/bench/figures.py's spread() writes it:
    {median, min, max} numbers."""
    value = field(obj, key, dict, where)
    for k in ("median", "min", "max"):
        field(value, k, float, f"{where} {key}")
    return value


def spread_cell(figure, fmt):
    """median (min..max) of a spread, each number by fmt."""
    return f"{fmt(figure['median'])} ({fmt(figure['min'])}.." \
        f"{fmt(figure['max'])})"


def load_lora(path):
    report = load_json(path)
    if not isinstance(report, dict):
        raise BadInput(f"{path}: not a JSON object")
    for key in ("torch", "device"):
        field(report, key, str, path)
    field(report, "repeat", int, path)
    config = field(report, "config", dict, path)
    for key in ("tokens", "hidden", "intermediate", "rank", "warmup",
                "steps"):
        field(config, key, int, f"{path}: config")
    requests = field(report, "requests_per_step", dict, path)
    for side in requests:
        field(requests, side, int, f"{path}: requests_per_step")
    step = field(report, "step", dict, path)
    field(step, "mps_client", bool, f"{path}: step")
    field(step, "target_ratio", float, f"{path}: step")
    field(step, "loss_max_relative_difference", float, f"{path}: step")
    sides = field(step, "sides", dict, f"{path}: step")
    if "local" not in sides:
        raise BadInput(f"{path}: step sides: no \"local\"")
    for side, entry in sides.items():
        where = f"{path}: step sides {side}"
        check_spread(entry, "ms", where)
        check_spread(entry, "issue_ms", where)
        if side != "local":
            check_spread(entry, "ratio_local_over", where)
    gradients = report.get("gradients") or {}
    if not isinstance(gradients, dict):
        raise BadInput(f"{path}: \"gradients\" is not a dict")
    for side in gradients:
        field(gradients, side, float, f"{path}: gradients")
    return report


def load_native(path):
    report = load_json(path)
    if not isinstance(report, dict):
        raise BadInput(f"{path}: not a JSON object")
    for key in ("torch", "gpu"):
        field(report, key, str, path)
    field(report, "repeat", int, path)
    for i, row in enumerate(field(report, "per_call", list, path)):
        where = f"{path}: per_call[{i}]"
        shape = field(row, "shape", list, where)
        if len(shape) != 3 or not all(isinstance(d, int) for d in shape):
            raise BadInput(f"{where}: \"shape\" is not [M, N, K]")
        field(row, "calls", int, where)
        check_spread(row, "daemon_us", where)
        check_spread(row, "torch_us", where)
    processes = report.get("processes")
    if processes is not None:
        where = f"{path}: processes"
        field(processes, "shape", list, where)
        field(processes, "processes", int, where)
        field(processes, "products_per_process", int, where)
        for how, _ in PROCESS_MODES:
            field(processes, how, dict, where)
            for key in ("daemon_per_s", "torch_per_s", "ratio"):
                check_spread(processes[how], key, f"{where} {how}")
    return report


def load_many(path):
    report = load_json(path)
    if not isinstance(report, dict):
        raise BadInput(f"{path}: not a JSON object")
    field(report, "gpu", str, path)
    field(report, "repeat", int, path)
    field(report, "products_per_process", int, path)
    shape = field(report, "shape", list, path)
    if len(shape) != 3 or not all(isinstance(d, int) for d in shape):
        raise BadInput(f"{path}: \"shape\" is not [M, N, K]")
    for i, case in enumerate(field(report, "cases", list, path)):
        where = f"{path}: cases[{i}]"
        field(case, "mode", str, where)
        field(case, "processes", int, where)
        for key in ("daemon_per_s", "local_per_s", "ratio"):
            check_spread(case, key, where)
        # Written with --metrics_url (the daemon's /metrics around each
        # round): where its launches' time went.
        if "daemon_launches" in case:
            launches = field(case, "daemon_launches", dict, where)
            for key in MANY_LAUNCH_FIGURES:
                field(launches, key, float, f"{where} daemon_launches")
            for stage, value in field(launches, "stages_us", dict,
                                      f"{where} daemon_launches").items():
                field({stage: value}, stage, float,
                      f"{where} daemon_launches stages_us")
            machine = field(case, "machine", dict, where)
            for side in ("daemon", "local"):
                field(field(machine, side, dict, f"{where} machine"),
                      "cores_busy", float, f"{where} machine {side}")
    return report


def load_pair(bench_dir, names, loader, used):
    """[report or None] for each of names (without and under MPS), the
    ones found added to used."""
    out = []
    for name in names:
        path = os.path.join(bench_dir, name)
        if os.path.exists(path):
            out.append(loader(path))
            used.append(path)
        else:
            out.append(None)
    return out


def absent_note(names, reports):
    """'Not measured in this run (no `x`)' for the files of names that are
    absent, '' where none is."""
    missing = [f"`{n}`" for n, r in zip(names, reports) if r is None]
    if not missing:
        return ""
    which = [label for label, r in zip(MPS_LABELS, reports) if r is None]
    return (("Not measured in this run" if len(missing) == len(names) else
             f"Not measured {' or '.join(which)} in this run")
            + " (no " + ", no ".join(missing) + ").\n")


def per_file(names, reports, describe):
    """describe(report) for each present file: once where they agree,
    else named by file."""
    texts = [(n, describe(r)) for n, r in zip(names, reports) if r]
    if len({t for _, t in texts}) == 1:
        return texts[0][1]
    return "; ".join(f"`{n}`: {t}" for n, t in texts)


def runs(n):
    return f"{n} run" + ("" if n == 1 else "s")


def ms(x):
    return f"{x:.2f}"


def two(x):
    return f"{x:.2f}"


def us(x):
    return f"{x:.1f}"


def per_s(x):
    return f"{x:,.0f}"


def section_head(method, files, reports):
    """A section's method prose, then the files it is drawn from and a
    note of those absent; the second value is False when none is present
    (the section is then only these lines)."""
    out = [method]
    note = absent_note(files, reports)
    present = [n for n, r in zip(files, reports) if r]
    if not present:
        return out + [note], False
    out.append("From " + " and ".join(f"`{n}`" for n in present) + ".\n")
    if note:
        out.append(note)
    return out, True


def lora_section(reports):
    out, any_present = section_head(LORA_METHOD, LORA_FILES, reports)
    if not any_present:
        return "\n".join(out)

    def setting(r):
        c = r["config"]
        return (f"{r['device']}, torch {r['torch']}; {c['tokens']} tokens, "
                f"hidden {c['hidden']}, intermediate {c['intermediate']}, "
                f"rank {c['rank']}; median (min..max) of "
                f"{runs(r['repeat'])} of {c['steps']} timed steps after "
                f"{c['warmup']} warm-up steps")

    def requests(r):
        return ", ".join(f"{side} {n}"
                         for side, n in r["requests_per_step"].items()) \
            or "none counted"

    lines = [f"GPU and settings: {per_file(LORA_FILES, reports, setting)}.",
             "Requests (hand-offs) per step: "
             f"{per_file(LORA_FILES, reports, requests)}."]
    sides = [s for s, _ in LORA_SIDES]
    for r in reports:
        for side in (r["step"]["sides"] if r else ()):
            if side not in sides:
                sides.append(side)
    labels = dict(LORA_SIDES)
    rows = []
    for side in sides:
        if not any(r and side in r["step"]["sides"] for r in reports):
            continue
        row = [labels.get(side, side)]
        for r in reports:
            entry = r["step"]["sides"].get(side) if r else None
            if entry is None:
                row += ["-", "-"]
                continue
            ratio_over = entry.get("ratio_local_over")
            row += [spread_cell(entry["ms"], ms),
                    spread_cell(ratio_over, two) if ratio_over else "-"]
        rows.append(row)
    header = ["side"]
    for label in MPS_LABELS:
        header += [f"step ms, {label}", f"local / side, {label}"]
    targets, mps = [], []
    for label, r in zip(MPS_LABELS, reports):
        if r is None:
            continue
        step = r["step"]
        lists = step["sides"].get("lists")
        target = f"{label} >= {step['target_ratio']:.2f}"
        if lists:
            median = lists["ratio_local_over"]["median"]
            target += f" (median {median:.3f}: " + (
                "met" if median >= step["target_ratio"] else "not met") + ")"
        targets.append(target)
        mps.append(f"{label} {'yes' if step['mps_client'] else 'no'}")
    lines.append("Target for local / lists (issue 46): " + "; ".join(targets)
                 + ". Whether the daemon is an MPS client (GetServerInfo, "
                 "which picks the target): " + ", ".join(mps) + ".")
    checks = []
    for label, r in zip(MPS_LABELS, reports):
        if r is None:
            continue
        check = (f"{label}, losses within "
                 f"{r['step']['loss_max_relative_difference']:.1e}")
        grads = r.get("gradients") or {}
        if grads:
            side = max(grads, key=grads.get)
            check += (f", adapter gradients after two steps within "
                      f"{grads[side]:.1e} ({side})")
        checks.append(check)
    lines.append("Largest relative differences from local: "
                 + "; ".join(checks) + ".")
    out.append("".join(f"- {line}\n" for line in lines))
    out.append(table(header, rows))
    return "\n".join(out)


def native_section(reports):
    out, any_present = section_head(NATIVE_METHOD, NATIVE_FILES, reports)
    if not any_present:
        return "\n".join(out)
    out.append("GPU and settings: " + per_file(
        NATIVE_FILES, reports,
        lambda r: f"{r['gpu']}, torch {r['torch']}; median (min..max) of "
        f"{runs(r['repeat'])}") + ".\n")

    def row_of(r, shape):
        return next((row for row in (r["per_call"] if r else ())
                     if tuple(row["shape"]) == shape), None)

    rows = []
    for shape in SMALL_SHAPES:
        found = [row_of(r, shape) for r in reports]
        if not any(found):
            continue
        row = ["x".join(map(str, shape))]
        for f in found:
            row += [spread_cell(f["daemon_us"], us),
                    spread_cell(f["torch_us"], us)] if f else ["-", "-"]
        rows.append(row)
    calls = sorted({row["calls"] for r in reports if r
                    for row in r["per_call"]
                    if tuple(row["shape"]) in SMALL_SHAPES})
    targets = sorted({row["target_us"] for r in reports if r
                      for row in r["per_call"]
                      if tuple(row["shape"]) in SMALL_SHAPES
                      and isinstance(row.get("target_us"), (int, float))})
    if rows:
        header = ["shape NT"]
        for label in MPS_LABELS:
            header += [f"daemon, {label}", f"torch.matmul, {label}"]
        out.append("Per call, p50 of the wall time over "
                   + " or ".join(map(str, calls)) + " calls, us"
                   + (" (issue 21's target for the daemon: <= "
                      + " or ".join(f"{t:g}" for t in targets) + " us)"
                      if targets else "") + ":\n")
        out.append(table(header, rows))
    else:
        out.append("No per-call figures for "
                   + ", ".join("x".join(map(str, s)) for s in SMALL_SHAPES)
                   + " in these files.\n")

    procs = [r.get("processes") if r else None for r in reports]
    if any(procs):
        def setting(r):
            p = r["processes"]
            return (f"{p['processes']} processes, "
                    + "x".join(map(str, p["shape"]))
                    + f" NT, {p['products_per_process']} products each per "
                    "run") if p else "not measured"
        rows = []
        for how, label in PROCESS_MODES:
            row = [label]
            for p in procs:
                row += [spread_cell(p[how]["daemon_per_s"], per_s),
                        spread_cell(p[how]["torch_per_s"], per_s),
                        spread_cell(p[how]["ratio"], two)] if p else \
                    ["-", "-", "-"]
            rows.append(row)
        header = ["calls"]
        for label in MPS_LABELS:
            header += [f"daemon, {label}", f"torch.matmul, {label}",
                       f"daemon / torch, {label}"]
        target = next((p["sync"].get("target_ratio") for p in procs
                       if p and isinstance(p["sync"].get("target_ratio"),
                                           (int, float))), None)
        out.append("Eight processes, products/s in all ("
                   + per_file(NATIVE_FILES, reports, setting) + ")"
                   + (f"; issue 21's target: daemon / torch >= {target:g}, "
                      "each product waited for" if target else "") + ":\n")
        out.append(table(header, rows))
    else:
        out.append("No eight-process figures in these files.\n")
    return "\n".join(out)


def many_section(reports):
    out, any_present = section_head(MANY_METHOD, MANY_FILES, reports)
    if not any_present:
        return "\n".join(out)
    out.append("GPU and settings: " + per_file(
        MANY_FILES, reports,
        lambda r: f"{r['gpu']}"
        + (f" at {r['commit']}" if r.get("commit") else "") + "; "
        + "x".join(map(str, r["shape"]))
        + f" NT, {r['products_per_process']} products per process per "
        f"run; median (min..max) of {runs(r['repeat'])}") + ".\n")
    keys = []
    for r in reports:
        for case in (r["cases"] if r else ()):
            if (case["mode"], case["processes"]) not in keys:
                keys.append((case["mode"], case["processes"]))
    rows = []
    for mode, processes in keys:
        row = [mode, str(processes)]
        for r in reports:
            case = next((c for c in (r["cases"] if r else ())
                         if (c["mode"], c["processes"]) == (mode, processes)),
                        None)
            row += [spread_cell(case["daemon_per_s"], per_s),
                    spread_cell(case["local_per_s"], per_s),
                    spread_cell(case["ratio"], two)] if case else \
                ["-", "-", "-"]
        rows.append(row)
    header = ["weights", "processes"]
    for label in MPS_LABELS:
        header += [f"daemon, {label}", f"local, {label}",
                   f"daemon / local, {label}"]
    out.append("Products/s of all processes together:\n")
    out.append(table(header, rows))
    launch_rows = []
    for label, r in zip(MPS_LABELS, reports):
        cases = [c for c in (r["cases"] if r else ()) if "daemon_launches" in c]
        for case in cases:
            if case["processes"] != max(c["processes"] for c in cases):
                continue
            b = case["daemon_launches"]
            steps = sorted(b["stages_us"].items(), key=lambda kv: -kv[1])[:3]
            launch_rows.append([
                label, case["mode"], str(case["processes"]),
                two(b["mean_batch"]), us(b["worker_us"]),
                ", ".join(f"{name} {us(value)}" for name, value in steps)
                or "-",
                us(b["launch_us"]),
                two(b["completion_polling"] + b["completion_completing"]),
                two(b["daemon_cores"]),
                f"{case['machine']['daemon']['cores_busy']:.1f} / "
                f"{case['machine']['local']['cores_busy']:.1f}"])
    if launch_rows:
        out.append("\nWhere the daemon's launches went, at the most "
                   "processes (the daemon's /metrics around each round, "
                   "all rounds together; microseconds per launch): a "
                   "launch's hold on its worker and its three longest "
                   "steps in it, launch to end noticed, the completion "
                   "thread's busy share, the daemon's CPU in cores, and "
                   "the machine's busy cores on each side:\n")
        out.append(table(
            ["setting", "weights", "processes", "mean batch",
             "worker hold", "longest steps", "launch to end",
             "completion thread busy", "daemon cores",
             "machine cores busy, daemon / local"], launch_rows))
    return "\n".join(out)


# --- the page -------------------------------------------------------------

def warn(text):
    print(f"benchmarks_page: {text}", file=sys.stderr)


def build_page(bench_dir, dashboard_dir, page_dir):
    """The page's text, and the files it was made from."""
    def rel(path):
        return os.path.relpath(path, page_dir)

    used = []
    info_path = os.path.join(bench_dir, "run_info.json")
    info = {}
    if os.path.exists(info_path):
        info = load_json(info_path)
        if not isinstance(info, dict):
            raise BadInput(f"{info_path}: not a JSON object")
        used.append(info_path)
    else:
        warn(f"no {info_path}: the commit measured is not recorded")

    kernels_path = os.path.join(bench_dir, "matmul_bench.json")
    bench = load_kernels(kernels_path) if os.path.exists(kernels_path) \
        else None
    if bench is not None:
        used.append(kernels_path)
    else:
        warn(f"no {kernels_path}: no kernel table")

    service_paths = sorted(glob.glob(os.path.join(bench_dir,
                                                  "service_*.json")))
    services = [(p, load_service(p)) for p in service_paths]
    used += service_paths
    if not services:
        warn(f"no {bench_dir}/service_*.json: no service tables")
    charts = sorted(glob.glob(os.path.join(bench_dir, "*.png")))
    used += charts
    check_path = os.path.join(bench_dir, "dashboard_vs_bench.txt")
    check = None
    if os.path.exists(check_path):
        with open(check_path, encoding="utf-8") as f:
            check = f.read()
        used.append(check_path)
    lora = load_pair(bench_dir, LORA_FILES, load_lora, used)
    native = load_pair(bench_dir, NATIVE_FILES, load_native, used)
    many = load_pair(bench_dir, MANY_FILES, load_many, used)
    for name, report in zip(LORA_FILES + NATIVE_FILES + MANY_FILES,
                            lora + native + many):
        if report is None:
            warn(f"no {os.path.join(bench_dir, name)}: not on the PyTorch "
                 "section")
    pictures = sorted(glob.glob(os.path.join(dashboard_dir, "*.png")))
    used += pictures

    known = set(used) | {kernels_path, info_path, check_path,
                         os.path.join(bench_dir, "README.md")}
    for path in sorted(glob.glob(os.path.join(bench_dir, "*"))):
        if path not in known:
            warn(f"{path} is not part of the page (left over from another "
                 "run?)")

    page = ["# Benchmarks\n",
            "<!-- Generated by tools/benchmarks_page.py from "
            f"{rel(bench_dir)}/; edit the generator, not this page. -->\n",
            INTRO]
    source = [f"Generated by `tools/benchmarks_page.py` from "
              f"`{rel(bench_dir)}/`"]
    commit = info.get("commit")
    source.append(f"; measured at commit `{commit}`" if commit else
                  "; the commit measured is not recorded")
    if info.get("date"):
        source.append(f" on {info['date']}")
    if info.get("gpu"):
        source.append(f" (GPU: {info['gpu']}"
                      + (f", {info['host_cpus']} host CPUs"
                         if info.get("host_cpus") else "") + ")")
    source.append(". Files: " + ", ".join(
        f"[`{os.path.basename(p)}`]({rel(p)})" for p in used) + ".\n"
        if used else ". No result files were found.\n")
    page.append("".join(source))
    if info.get("commands"):
        page.append("The commands that produced them:\n\n```\n"
                    + "\n".join(info["commands"]) + "\n```\n")

    page.append("## Kernels\n")
    if bench is not None:
        page.append(kernel_section(bench, os.path.basename(kernels_path)))
        seconds = None
        for c in info.get("commands", []):
            for word in c.split():
                if word.startswith("--sustained_s="):
                    seconds = word.split("=", 1)[1]
        sustained = sustained_section(bench, seconds)
        if sustained:
            page.append("## Sustained runs\n")
            page.append(sustained)
    else:
        page.append("Not measured in this run (no `matmul_bench.json`).\n")

    page.append("## The service under load\n")
    page.append(SERVICE_METHOD)
    if services:
        for path, run in services:
            page.append(service_table(run, os.path.basename(path)))
        for chart in charts:
            page.append(f"![{os.path.basename(chart)}]({rel(chart)})\n")
    else:
        page.append("Not measured in this run (no `service_*.json`).\n")

    page.append("## PyTorch: the LoRA step, per call and eight processes, "
                "with and without MPS\n")
    page.append("### The LoRA step\n")
    page.append(lora_section(lora))
    page.append("### Per call and eight processes\n")
    page.append(native_section(native))
    page.append("### Many processes, distinct and shared weights\n")
    page.append(many_section(many))

    page.append("## The dashboard against matmul-bench\n")
    page.append(DASHBOARD_METHOD)
    if check is not None:
        page.append(f"From `{os.path.basename(check_path)}`:\n")
        page.append(check_text(check))
    else:
        page.append("The check's result is not part of this run (no "
                    "`dashboard_vs_bench.txt`).\n")
    for picture in pictures:
        page.append(f"![{os.path.splitext(os.path.basename(picture))[0]}]"
                    f"({rel(picture)})\n")
    return "\n".join(page), used


def check_text(text):
    """dashboard_vs_bench.txt as markdown: its table rows together, every
    other line a paragraph of its own."""
    blocks, rows = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
            continue
        if rows:
            blocks.append("\n".join(rows))
            rows = []
        if line.strip():
            blocks.append(line.strip())
    if rows:
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(
        description="Regenerates docs/benchmarks.md from one run's JSON in "
        "docs/bench/ (tests/gpu/bench/benchmarks.sh).")
    parser.add_argument("--bench-dir", default=os.path.join(REPO, "docs",
                                                            "bench"))
    parser.add_argument("--dashboard-dir",
                        default=os.path.join(REPO, "docs", "dashboard"))
    parser.add_argument("-o", "--output",
                        default=os.path.join(REPO, "docs", "benchmarks.md"))
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the page differs "
                        "from what the files give")
    args = parser.parse_args(argv)
    output = os.path.abspath(args.output)
    try:
        page, _ = build_page(os.path.abspath(args.bench_dir),
                             os.path.abspath(args.dashboard_dir),
                             os.path.dirname(output))
    except BadInput as e:
        print(f"benchmarks_page: {e}", file=sys.stderr)
        return 1
    if args.check:
        try:
            with open(output, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != page:
            print(f"benchmarks_page: {output} is not what "
                  f"{args.bench_dir} gives; run tools/benchmarks_page.py",
                  file=sys.stderr)
            return 1
        return 0
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
