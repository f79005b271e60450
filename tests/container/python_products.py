"""The Python client against the containerised daemon (container_test.sh
runs it as a host user in the socket's group, with the package installed
with its native extension).

    python_products.py TARGET METRICS_URL
        products of torch CPU tensors through the request ring, each
        checked against an FP32 reference; the daemon shows the ring
        attached while the client lives.
    python_products.py TARGET METRICS_URL --drain=FILE
        puts products in flight with matmul_async, writes FILE once the
        daemon has accepted every one of them (its metrics say so; the
        caller then stops the daemon), and checks that each is answered
        and right.
"""

import os
import re
import sys
import time
import urllib.request

import torch

import matmul_client


def metric_sum(url, name):
    """The sum of every series of `name` in the daemon's scrape."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    pattern = re.compile(r"^" + name + r"(\{[^}]*\})? (\S+)$", re.M)
    return sum(float(value) for _, value in pattern.findall(text))


def check_product(out, a, b):
    reference = a.float() @ b.float().T
    error = (out.float() - reference).abs().max().item()
    # BF16 output: a relative rounding of 2^-8 of the largest entry.
    bound = reference.abs().max().item() * 2 ** -7 + 1e-3
    if error > bound:
        raise AssertionError(f"max error {error} > {bound}")


def plain(target, url):
    torch.manual_seed(1)
    with matmul_client.Client(target, client_name="container_test") as client:
        if client.transport != "ring":
            raise AssertionError(f"transport {client.transport}, not ring")
        rings = metric_sum(url, "matmul_rings_attached")
        if rings < 1:
            raise AssertionError(f"the daemon shows {rings} rings attached")
        for m, n, k in ((64, 128, 96), (7, 33, 5), (256, 256, 256)):
            a = torch.randn(m, k).bfloat16()
            b = torch.randn(n, k).bfloat16()
            check_product(client.matmul(a, b, transpose_b=True), a, b)
        futures = []
        for _ in range(16):
            a = torch.randn(48, 40).bfloat16()
            b = torch.randn(24, 40).bfloat16()
            futures.append((client.matmul_async(a, b, transpose_b=True), a, b))
        for future, a, b in futures:
            check_product(future.result(timeout=60), a, b)
    print(f"python: 19 products through the ring checked, {rings:.0f} ring(s) "
          "attached at the daemon")


def drain(target, url, ready_file):
    torch.manual_seed(2)
    count, size = 16, 768
    with matmul_client.Client(target, client_name="container_test") as client:
        if client.transport != "ring":
            raise AssertionError(f"transport {client.transport}, not ring")
        # Warm up the daemon's path for the shape.
        a = torch.randn(size, size).bfloat16()
        b = torch.randn(size, size).bfloat16()
        check_product(client.matmul(a, b, transpose_b=True), a, b)
        finished_before = metric_sum(url, "matmul_requests_total")
        # Operands made first, then sent back to back: made between the
        # sends, the first products could be answered before the last is
        # sent, and the stop would find nothing in flight.
        operands = [(torch.randn(size, size).bfloat16(),
                     torch.randn(size, size).bfloat16()) for _ in range(count)]
        futures = [(client.matmul_async(a, b, transpose_b=True), a, b)
                   for a, b in operands]
        deadline = time.monotonic() + 60
        while True:
            in_flight = metric_sum(url, "matmul_requests_in_flight")
            finished = metric_sum(url, "matmul_requests_total") - finished_before
            if finished + in_flight >= count:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon accepted {finished + in_flight}"
                                     f" of {count} products")
            time.sleep(0.01)
        with open(ready_file + ".tmp", "w") as f:
            f.write(f"{in_flight:.0f} of {count} products in flight, "
                    f"{finished:.0f} answered\n")
        os.rename(ready_file + ".tmp", ready_file)
        if in_flight < 1:
            raise AssertionError("every product was answered before the stop: "
                                 "the drain was not exercised")
        for future, a, b in futures:
            check_product(future.result(timeout=120), a, b)
    print(f"python: {count} products in flight at the stop, each answered and "
          "checked")


def main():
    target, url = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3].startswith("--drain="):
        drain(target, url, sys.argv[3][len("--drain="):])
    else:
        plain(target, url)


if __name__ == "__main__":
    main()
