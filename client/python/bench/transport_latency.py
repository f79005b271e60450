#!/usr/bin/env python3
"""Per-call time of matmul_client.Client.matmul through the request ring
(the native extension) and over gRPC, host tensors, one product at a time;
p50 and p90 of each, and the products/s of matmul_async with many in
flight. Runs both transports in one process against one daemon.

    transport_latency.py --server build/server/matmul-server
    transport_latency.py --target unix:/run/matmul/matmul.sock

--server starts a CPU daemon on a temporary socket (and stops it);
--target uses a running daemon. The package is imported from the
environment (pip install ./client/python) or, with --source, from this
source tree (gRPC only, unless the extension was built in place).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="matmul-server to start (CPU)")
    where.add_argument("--target", help="a running daemon's unix: target")
    parser.add_argument("--shapes", default="1x1x1,256x256x256",
                        help="MxNxK,... (default %(default)s)")
    parser.add_argument("--calls", type=int, default=1000,
                        help="timed calls per shape and transport")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--in_flight", type=int, default=64,
                        help="matmul_async products at once")
    parser.add_argument("--ring_spin_us", type=float, default=None,
                        help="Client(ring_spin_us=...): how long a ring "
                        "call polls before it sleeps (default: the C++ "
                        "client's)")
    parser.add_argument("--source", action="store_true",
                        help="import the package from this source tree")
    return parser.parse_args()


def start_server(path, directory):
    socket = os.path.join(directory, "matmul.sock")
    server = subprocess.Popen(
        [path, "--backend=cpu", f"--listen=unix:{socket}",
         "--metrics_listen="], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(socket):
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("matmul-server did not start")
        time.sleep(0.05)
    return server, "unix:" + socket


def client_for(matmul_client, target, transport, ring_spin_us):
    os.environ["MATMUL_CLIENT_NATIVE"] = "1" if transport == "ring" else "0"
    client = matmul_client.Client(target, ring_spin_us=ring_spin_us)
    if client.transport != transport:
        raise SystemExit(f"asked for {transport}, got {client.transport} "
                         "(is the native extension installed?)")
    return client


def time_calls(client, a, b, warmup, calls):
    for _ in range(warmup):
        client.matmul(a, b)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        client.matmul(a, b)
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    return (statistics.median(seconds) * 1e6,
            seconds[int(len(seconds) * 0.9)] * 1e6)


def time_async(client, a, b, in_flight, rounds):
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(in_flight):
            client.matmul_async(a, b)
        client.synchronize()
    return rounds * in_flight / (time.perf_counter() - start)


def main():
    args = parse_args()
    if args.source:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import matmul_client
    from matmul_client import HostTensor

    with tempfile.TemporaryDirectory() as directory:
        server, target = (start_server(args.server, directory)
                          if args.server else (None, args.target))
        try:
            for shape in args.shapes.split(","):
                m, n, k = (int(d) for d in shape.split("x"))
                a = HostTensor(bytes(2 * m * k), (m, k))
                b = HostTensor(bytes(2 * k * n), (k, n))
                for transport in ("ring", "grpc"):
                    with client_for(matmul_client, target, transport,
                                    args.ring_spin_us) as c:
                        p50, p90 = time_calls(c, a, b, args.warmup,
                                              args.calls)
                        rate = time_async(c, a, b, args.in_flight,
                                          max(1, args.calls //
                                              args.in_flight))
                    print(f"{shape:>13} {transport:>4}: per call p50 "
                          f"{p50:8.1f} us, p90 {p90:8.1f} us; "
                          f"{args.in_flight} in flight: {rate:8.0f}/s",
                          flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()
