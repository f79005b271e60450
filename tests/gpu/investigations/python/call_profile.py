"""Where the time of one stream-ordered CUDA product from Python goes: the
whole Client.matmul call against its pieces (preparing the product, the
stale-region checks: buffer id and freed bytes, the current stream, the
request built in C++, the native queue_on_stream alone with a product
prepared once, and for comparison call_on_stream, whose answer runs a Python
callback), each with and without a torch.cuda.synchronize() after it, and a
cProfile of the calls without one.

    python3 tests/gpu/investigations/python/call_profile.py \\
        --target=unix:/path/matmul.sock
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)

import torch  # noqa: E402

import matmul_client  # noqa: E402
from matmul_client import _native  # noqa: E402
from matmul_client._client import _current_stream  # noqa: E402
from matmul_client._cuda_regions import _freed_bytes  # noqa: E402


def p50_us(fn, calls, sync):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def mean_us(fn, calls):
    """Back to back, one synchronize at the end."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    mid = time.perf_counter()
    torch.cuda.synchronize()
    return (mid - start) / calls * 1e6


def profile_shape(client, m, n, k, calls):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def full():
        client.matmul(x, w, transpose_b=True)

    def full_out():
        client.matmul(x, w, out=out, transpose_b=True)

    def torch_mm():
        torch.matmul(x, w.T)

    for _ in range(50):
        full()
        full_out()
        torch_mm()
    torch.cuda.synchronize()
    product = client._prepare(x, w, out, True, False, 1.0, 0.0, None)
    spec = product.spec
    ring = client._products._ring
    raw_stream = torch.cuda.current_stream().cuda_stream

    errors = []

    def noop(_, error):
        if error is not None:
            errors.append(error)

    def raw_queue_on_stream():
        ring.queue_on_stream(spec, raw_stream, 60.0, 0)

    def raw_call_on_stream():
        ring.call_on_stream(spec, raw_stream, 60.0, True, noop)

    data = product.request.SerializeToString()

    def raw_ring_call():
        ring.call(data, 60.0)

    def future_start_finish():
        client._in_flight.finish(client._in_flight.start(), None, None)

    pieces = {
        "prepare": lambda: client._prepare(x, w, out, True, False, 1.0, 0.0,
                                           None),
        "torch.empty": lambda: torch.empty(m, n, device="cuda",
                                           dtype=torch.bfloat16),
        "untyped_storage": lambda: x.untyped_storage(),
        "cuda_buffer_id": lambda: _native.cuda_buffer_id(x.data_ptr()),
        "freed_bytes (memory_stats)": lambda: _freed_bytes(0),
        "current_stream (Stream)": lambda: torch.cuda.current_stream(
            x.device),
        "current_stream (raw)": lambda: _current_stream(0),
        "product_request (C++)": lambda: _native.product_request(
            spec, "session"),
        "request message (pb)": lambda: product.request.SerializeToString(),
        "take_stream_failures": ring.take_stream_failures,
        "future start+finish (async)": future_start_finish,
    }
    row = {"shape": [m, n, k]}
    # The bare calls first, while the regions of `spec` are registered.
    for name, fn in (("queue_on_stream only", raw_queue_on_stream),
                     ("call_on_stream only (callback)", raw_call_on_stream),
                     ("ring.call (not ordered)", raw_ring_call),
                     ("matmul", full), ("matmul out=", full_out),
                     ("torch.matmul", torch_mm)):
        row[name + " +sync p50"] = p50_us(fn, calls, True)
        row[name + " no sync mean"] = mean_us(fn, calls)
        ring.wait_stream_calls()
        errors.extend(error for _, _, error in ring.take_stream_failures())
    for name, fn in pieces.items():
        row[name] = mean_us(fn, calls)
    # Whether buffer ids work here (else memory_stats runs on every product).
    print(f"cuda_buffer_id(x): {_native.cuda_buffer_id(x.data_ptr())}; "
          f"devices looked at every product: {client._cuda_unidentified}")
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(calls):
        full()
    profiler.disable()
    torch.cuda.synchronize()
    if errors:
        print(f"{len(errors)} bare calls failed, the first: {errors[0]}")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return row, text.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="unix:/run/matmul/matmul.sock")
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    client = matmul_client.Client(args.target)
    print("transport:", client.transport)
    for m, n, k in ((256, 256, 256), (16, 4096, 4096)):
        row, profile = profile_shape(client, m, n, k, args.calls)
        print(f"\n== {m}x{n}x{k} NT, us")
        for name, value in row.items():
            if name != "shape":
                print(f"  {name:34s} {value:8.1f}")
        print(profile)
    client.close()


if __name__ == "__main__":
    main()
