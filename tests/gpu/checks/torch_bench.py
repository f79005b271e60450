"""Reference timings beside matmul-bench: torch.matmul (cuBLAS) and, when its
file is present, the seed's Triton kernel, on the same shapes and layouts.

The seed runs twice: as Triton builds it for this GPU (wgmma on Hopper),
and as it would run on a Spark: mma.sync (Triton's DISABLE_MMA_V3, in a
child process, checked in the PTX it wrote) and only the autotune configs
whose buffers fit the GB10's 101,376 bytes. That second column is the
seed's own answer to the question the Spark path's 0.65x target asks.

Random normal BF16 inputs; triton.testing.do_bench median (it clears L2
between runs). The seed is looked up at $SEED_PATH, .seed/sm121a_matmul.py
or shared/seed/sm121a_matmul.py (it is not part of the repository).
"""
import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import torch
import triton
import triton.testing

SHAPES = [(5120, 11008, 2048), (5120, 2048, 11008), (5120, 2048, 2048),
          (5120, 512, 2048), (8192, 8192, 8192), (256, 4096, 4096),
          (16, 4096, 4096)]


def load_seed():
    for path in (os.environ.get("SEED_PATH", ""), ".seed/sm121a_matmul.py",
                 "shared/seed/sm121a_matmul.py"):
        if path and os.path.exists(path):
            spec = importlib.util.spec_from_file_location("seed", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    return None


def seed_call(seed, a, b):
    # The seed's wrapper makes B contiguous (a copy for NT); call its kernel
    # with B's real strides instead, as its signature allows.
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.bfloat16)

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    seed._sm121a_matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1),
                                     b.stride(0), b.stride(1), c.stride(0),
                                     c.stride(1))
    return c


GB10_SHARED_BYTES = 101376


def operands(m, n, k, layout):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if layout == "NN":
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    else:
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return a, b


def time_seed(seed, a, b):
    """The seed's TFLOPS cell: do_bench median, with its error if over 1e-2."""
    m, k = a.shape
    n = b.shape[1]
    ref = torch.matmul(a.float(), b.float())
    out = seed_call(seed, a, b).float()
    err = ((out - ref).norm() / ref.norm()).item()
    ms = triton.testing.do_bench(lambda: seed_call(seed, a, b), warmup=25,
                                 rep=100, return_mode="median")
    cell = "%.0f" % (2.0 * m * n * k / ms * 1e-9)
    return cell if err <= 1e-2 else cell + "(err %.1e)" % err


def spark_seed_cells():
    """Runs this script with --spark_seed in a child (DISABLE_MMA_V3 is read
    when Triton compiles, and is part of its cache key); {shape/ab: cell}."""
    env = dict(os.environ, DISABLE_MMA_V3="1")
    child = subprocess.run([sys.executable, __file__, "--spark_seed"],
                           env=env, capture_output=True, text=True)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        return {}
    return json.loads(child.stdout.strip().splitlines()[-1])


def spark_seed_main(seed):
    """The seed as a Spark runs it: mma.sync, configs within the GB10 limit.
    Prints one JSON line; fails if the PTX Triton wrote holds a wgmma."""
    tuner = seed._sm121a_matmul_kernel
    tuner.configs = [
        c for c in tuner.configs
        if (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_K"] *
        2 * c.num_stages <= GB10_SHARED_BYTES
    ]
    cells = {}
    torch.manual_seed(1)
    for (m, n, k) in SHAPES:
        for layout in ("NN", "NT"):
            a, b = operands(m, n, k, layout)
            cell = time_seed(seed, a, b)
            best = tuner.best_config.kwargs
            cells[f"{m}x{n}x{k}/{layout}"] = "%s %dx%dx%d" % (
                cell, best["BLOCK_M"], best["BLOCK_N"], best["BLOCK_K"])
    ptx = "".join(
        open(p).read() for p in glob.glob(
            os.path.join(os.environ["TRITON_CACHE_DIR"], "**", "*.ptx"),
            recursive=True))
    if "wgmma" in ptx or "mma.sync" not in ptx:
        sys.stderr.write("DISABLE_MMA_V3 did not give mma.sync kernels\n")
        return 1
    print(json.dumps(cells))
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--spark_seed", action="store_true",
                        help="child mode: see spark_seed_main")
    args = parser.parse_args()
    seed = load_seed()
    if args.spark_seed:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TRITON_CACHE_DIR"] = cache
            return spark_seed_main(seed)
    spark = spark_seed_cells() if seed is not None else {}
    lines = ["%-18s %-3s %10s %10s %24s" %
             ("shape", "ab", "torch", "seed", "seed mma.sync <=99KiB")]
    torch.manual_seed(0)
    for (m, n, k) in SHAPES:
        for layout in ("NN", "NT"):
            a, b = operands(m, n, k, layout)
            flops = 2.0 * m * n * k
            ms = triton.testing.do_bench(lambda: torch.matmul(a, b),
                                         warmup=25, rep=100,
                                         return_mode="median")
            torch_tflops = flops / ms * 1e-9
            seed_cell = time_seed(seed, a, b) if seed is not None else "-"
            lines.append("%-18s %-3s %10.0f %10s %24s" % (
                f"{m}x{n}x{k}", layout, torch_tflops, seed_cell,
                spark.get(f"{m}x{n}x{k}/{layout}", "-")))
            print(lines[-1], flush=True)
    text = ("TFLOPS, torch.matmul, the seed Triton kernel, and the seed as a "
            "Spark runs it (mma.sync, configs within 101,376 bytes; the "
            "config it chose) (do_bench median)\n")
    text += "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
