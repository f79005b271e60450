"""Results in the formats the project's benchmark binaries write, for the
tests of tools/plot_bench.py and tools/benchmarks_page.py. Field names and
nesting follow the writers: client/bench/bench_report.cc (ToJson, what
`matmul-cli bench --save` writes) and kernels/cuda/tools/bench_main.cc (what
`matmul-bench --json` writes)."""


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
