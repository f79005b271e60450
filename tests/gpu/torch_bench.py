"""Reference timings beside matmul-bench: torch.matmul (cuBLAS) and, when its
file is present, the seed's Triton kernel, on the same shapes and layouts.

Random normal BF16 inputs; triton.testing.do_bench median (it clears L2
between runs). The seed is looked up at $SEED_PATH, .seed/sm121a_matmul.py
or shared/seed/sm121a_matmul.py (it is not part of the repository).
"""
import argparse
import importlib.util
import os
import sys

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    seed = load_seed()
    lines = ["%-18s %-3s %10s %10s" % ("shape", "ab", "torch", "seed")]
    torch.manual_seed(0)
    for (m, n, k) in SHAPES:
        for layout in ("NN", "NT"):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            if layout == "NN":
                b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            else:
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
            flops = 2.0 * m * n * k
            ms = triton.testing.do_bench(lambda: torch.matmul(a, b),
                                         warmup=25, rep=100,
                                         return_mode="median")
            torch_tflops = flops / ms * 1e-9
            seed_cell = "-"
            if seed is not None:
                ref = torch.matmul(a.float(), b.float())
                out = seed_call(seed, a, b).float()
                err = ((out - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench(lambda: seed_call(seed, a, b),
                                             warmup=25, rep=100,
                                             return_mode="median")
                seed_cell = "%.0f" % (flops / ms * 1e-9)
                if err > 1e-2:
                    seed_cell += "(err %.1e)" % err
            lines.append("%-18s %-3s %10.0f %10s" % (f"{m}x{n}x{k}", layout,
                                                     torch_tflops, seed_cell))
            print(lines[-1], flush=True)
    text = "TFLOPS, torch.matmul and the seed Triton kernel (do_bench median)\n"
    text += "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
