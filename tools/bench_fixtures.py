"""Results in the formats the project's benchmark binaries write, for the
tests of tools/plot_bench.py and tools/benchmarks_page.py. Field names and
nesting follow the writers: client/bench/bench_report.cc (ToJson, what
`matmul-cli bench --save` writes), kernels/cuda/tools/bench_main.cc (what
`matmul-bench --json` writes), tests/gpu/bench/lora_step.py and
tests/gpu/bench/native_speed.py (their --json reports)."""


def cli_bench_run(label, scale, shape="16x4096x4096:NT", mode="ipc",
                  levels=(1, 4, 16)):
    """One `matmul-cli bench --save` file: a sweep over `levels`."""
    out = []
    for c in levels:
        out.append({
            "concurrency": c, "requests": 1000 * c, "errors": 0,
            "windows": 3, "stable": True, "first_error": "",
            "kernel": "cublaslt_algo0", "request_rate": 0.0,
            "seconds": 6.0, "requests_per_second": scale * 1000 * c,
            "tflops": scale * c * 0.5, "latency_mean_s": 1.2e-4 * c,
            "latency_p50_s": 1e-4 * c, "latency_p90_s": 1.5e-4 * c,
            "latency_p95_s": 1.7e-4 * c, "latency_p99_s": 2e-4 * c,
            "server_queue_p50_s": 1e-5, "server_kernel_p50_s": 2e-5,
            "server_total_p50_s": 4e-5, "overhead_p50_s": 6e-5,
            "overhead_p99_s": 9e-5, "mean_batch_size": c / 2.0})
    return {"label": label, "shape": shape, "mode": mode,
            "flops_per_request": 5.4e8, "levels": out}


def _candidate(kernel, family, shared_bytes, tflops, flops):
    seconds = flops / (tflops * 1e12)
    return {"kernel": kernel, "family": family, "shared_bytes": shared_bytes,
            "fits_spark": family != "cublaslt" and shared_bytes <= 101376,
            "ok": True, "median_seconds": seconds,
            "min_seconds": seconds * 0.98, "max_seconds": seconds * 1.05,
            "iterations": 40, "tflops": tflops}


def matmul_bench_entry(shape, layout, pick, lt, spark, sustained=True):
    """One shape and layout of `matmul-bench --json`; pick, lt and spark
    are (kernel, TFLOPS)."""
    m, n, k = (int(d) for d in shape.split("x"))
    flops = 2.0 * m * n * k
    entry = {
        "shape": shape, "layout": layout, "flops": flops,
        "pick": {"kernel": pick[0], "tflops": pick[1]},
        "cublaslt_best": {"kernel": lt[0], "tflops": lt[1]},
        "spark_best": {"kernel": spark[0], "tflops": spark[1]},
        "family_best": [
            {"family": "mma_128x128", "kernel": spark[0], "tflops": spark[1]},
            {"family": "wgmma_128x256", "kernel": "wgmma_128x256x64_s4",
             "tflops": spark[1] * 1.5}],
        "candidates": [
            _candidate(lt[0], "cublaslt", 0, lt[1], flops),
            _candidate(spark[0], "mma_128x128", 98304, spark[1], flops),
            {"kernel": "mma_256x128x64_s4_w4x2", "family": "mma_256x128",
             "shared_bytes": 229376, "fits_spark": False, "ok": False,
             "error": "too much shared memory"}]}
    if sustained:
        entry["sustained"] = []
        for which, (kernel, figure) in (("pick", pick), ("spark", spark),
                                        ("cublaslt", lt)):
            entry["sustained"].append({
                "which": which, "kernel": kernel, "products": 5000,
                "operand_sets": 4, "back_to_back_tflops": figure * 0.9,
                "event_after_each_tflops": figure * 0.88,
                "plain_event_after_each_tflops": figure * 0.9,
                "streams_tflops": figure * 0.89})
    return entry


def matmul_bench(runs=1, sustained=True):
    """A whole `matmul-bench --json` file: two shapes, NN and NT."""
    out = {"environment": "NVIDIA H200 (sm_90, 132 SMs), CUDA 13.0",
           "max_shared_bytes": 232448, "runs": []}
    for r in range(runs):
        run = []
        for shape in ("5120x11008x2048", "5120x512x2048"):
            for layout in ("NN", "NT"):
                run.append(matmul_bench_entry(
                    shape, layout, ("cublaslt_algo0", 700.0 + r),
                    ("cublaslt_algo0", 700.0 + r),
                    ("mma_128x128x64_s2_w2x2_tma", 400.0 + 10 * r),
                    sustained=sustained and r == runs - 1))
        out["runs"].append(run)
    return out


def _spread(values):
    """tests/gpu/bench/figures.py's spread()."""
    values = list(values)
    return {"median": sorted(values)[len(values) // 2], "min": min(values),
            "max": max(values), "runs": values}


LORA_SIDES = ("local", "daemon", "lists", "local_unsloth", "local_lists")


def lora_step(mps_client=False, side_ms=None, device="NVIDIA H100 80GB HBM3"):
    """One `tests/gpu/bench/lora_step.py --json` report (keys as its
    main() and measure_step() write them), 3 runs at the seed's shapes.
    side_ms: {side: the median step ms}; each side's runs are the median
    and 1% either side, local's in the same order, so that every ratio's
    runs are equal."""
    side_ms = side_ms or {"local": 20.0, "daemon": 40.0, "lists": 25.0,
                          "local_unsloth": 19.0, "local_lists": 18.0}
    spreads = [0.99, 1.0, 1.01]
    config = {"tokens": 5120, "hidden": 2048, "intermediate": 11008,
              "rank": 16, "lora_alpha": 32.0, "scale": 2.0, "lr": 2e-4,
              "weight_decay": 0.0, "teacher_std": 0.01, "seed": 0,
              "warmup": 10, "steps": 30, "optimizer": "torch.optim.AdamW",
              "adapters": "FP32, cast to BF16 for the products",
              "loss": "MSE in FP32 against a teacher's output"}
    losses = [1.0 - 0.01 * i for i in range(config["warmup"] +
                                             config["steps"])]
    step = {"sides": {}, "mps_client": mps_client,
            "target_ratio": 1.10 if mps_client else 0.70,
            "loss_tolerance": 0.01, "runs": {}}
    local = [side_ms["local"] * f for f in spreads]
    for side, median in side_ms.items():
        ms = [median * f for f in spreads]
        entry = {"ms": _spread(ms), "issue_ms": _spread(m * 0.5 for m in ms)}
        if side != "local":
            entry["ratio_local_over"] = _spread(
                loc / m for loc, m in zip(local, ms))
            entry["loss_max_relative_difference"] = 1e-3
        step["sides"][side] = entry
        step[side + "_ms"] = entry["ms"]
        step[side + "_issue_ms"] = entry["issue_ms"]
        step["runs"][side] = [{"losses": losses, "step_ms": [m] * 30,
                               "issue_ms": m * 0.5} for m in ms]
    if "daemon" in side_ms:
        step["ratio"] = step["sides"]["daemon"]["ratio_local_over"]
    if "lists" in side_ms:
        step["ratio_lists"] = step["sides"]["lists"]["ratio_local_over"]
    step["loss_max_relative_difference"] = 1e-3
    requests = {side: n for side, n in (("daemon", 20), ("lists", 4))
                if side in side_ms}
    report = {
        "torch": "2.5.1+cu124", "device": device,
        "matmul_client": "0.1.0+source, extension present, transport rings",
        "autograd": "op", "autograd_doc": "the op's own autograd",
        "repeat": len(spreads), "config": config,
        "requests_per_step": requests,
        "tuning": {"steps": 20, "seconds": 12.0, "tunings": 14.0,
                   "settled": True, "total": 14.0, "during_runs": 0.0},
        "gradients": {side: 4e-3 for side in side_ms if side != "local"},
        "step": step}
    if "daemon" in requests:
        report["products_per_step"] = requests["daemon"]
    return report


def native_speed(scale=1.0, processes=True, gpu="NVIDIA H100 80GB HBM3"):
    """One `tests/gpu/bench/native_speed.py --json` report as
    lora_lists_gpu.sh runs it (--only=per_call,processes --repeat=3):
    per-call p50 of the small and the seed's shapes (daemon 30 us * scale,
    torch 20 us for the small ones), and the eight processes (daemon
    20,000 * scale products/s, torch 8,000)."""
    spreads = [0.9, 1.0, 1.1]
    shapes = [(256, 256, 256), (16, 4096, 4096), (5120, 11008, 2048),
              (5120, 2048, 11008), (5120, 2048, 2048), (5120, 512, 2048)]
    per_call = []
    for i, (m, n, k) in enumerate(shapes):
        small = i < 2
        daemon = (30.0 + i) * scale if small else 800.0
        torch_us = 20.0 + i if small else 780.0
        per_call.append({
            "shape": [m, n, k], "calls": 200 if small else 40,
            "daemon_us": _spread(daemon * f for f in spreads),
            "torch_us": _spread(torch_us * f for f in spreads),
            "target_us": 50.0 if small else None})
    report = {"torch": "2.5.1+cu124", "gpu": gpu,
              "matmul_client": "0.1.0+source, extension present",
              "repeat": len(spreads),
              "errors": {"x".join(map(str, s)): 3e-3 for s in shapes},
              "per_call": per_call, "in_a_row": []}
    if processes:
        report["processes"] = {"shape": [16, 4096, 4096], "processes": 8,
                               "products_per_process": 1000}
        for how, daemon, local in (("sync", 20000.0, 8000.0),
                                   ("stream", 30000.0, 12000.0)):
            d = [daemon * scale * f for f in spreads]
            t = [local * f for f in spreads]
            report["processes"][how] = {
                "daemon_per_s": _spread(d), "torch_per_s": _spread(t),
                "torch_one_process_per_s": _spread(x * 3 for x in t),
                "ratio": _spread(a / b for a, b in zip(d, t)),
                "target_ratio": 3.0 if how == "sync" else None}
    return report


def many_processes(scale=1.0, gpu="NVIDIA H100 80GB HBM3", launches=False):
    """One `tests/gpu/bench/many_processes.py --json` report: each mode at
    1 and 8 processes, the daemon at 10,000 * processes * scale products/s
    and local at 5,000 * processes; with `launches`, each case's daemon
    metrics as --metrics_url adds them (a worker hold of 100 us per
    process)."""
    spreads = [0.9, 1.0, 1.1]
    cases = []
    for mode in ("distinct", "shared", "adapter"):
        for processes in (1, 8):
            d = [10000.0 * processes * scale * f for f in spreads]
            t = [5000.0 * processes * f for f in spreads]
            cases.append({"mode": mode, "processes": processes,
                          "daemon_per_s": _spread(d),
                          "local_per_s": _spread(t),
                          "ratio": _spread(a / b for a, b in zip(d, t))})
            if launches:
                cases[-1]["daemon_launches"] = {
                    "launches": 1000.0, "requests": 1500.0,
                    "mean_batch": 1.5, "worker_us": 100.0 * processes,
                    "stages_us": {"slot": 60.0 * processes, "kernel": 25.0,
                                  "signal": 5.0, "validate": 1.0},
                    "launch_us": 400.0, "kernel_us": 40.0,
                    "answer_us": 10.0, "queue_us": 30.0,
                    "daemon_cores": 4.5, "completion_polling": 0.5,
                    "completion_completing": 0.25}
                cases[-1]["machine"] = {
                    "daemon": {"cores_busy": 15.5,
                               "switches_per_product": 3.0},
                    "local": {"cores_busy": 8.0,
                              "switches_per_product": 0.5}}
    return {"gpu": gpu, "shape": [16, 4096, 4096], "rank": 16,
            "products_per_process": 300, "repeat": len(spreads),
            "cases": cases, "wrong": []}
