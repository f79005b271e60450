"""The Python-side cost of one stream-ordered CUDA product, without a GPU or
a daemon: Client.matmul against a stand-in torch (tests/fake_torch.py) and a
stand-in request ring that takes the product and returns at once, through
the package's Python path and through the native fast path
(matmul_client._native.CudaFastPath). Both build the same request in C++
(the stand-in ring of the Python path calls product_request, as the real
ring's queue_on_stream does; the fast path serializes its request for the
stand-in). The stand-in torch's methods are Python functions, so the
figures include about as much per tensor attribute as torch's own C
methods take. Prints the median per call, in microseconds, of `--batches`
batches of `--calls` calls each, the variants interleaved batch by batch.

    python3 client/python/bench/call_cost.py      # needs the extension built
    # The Python path of another copy of the package (say, before the fast
    # path), with an extension in it:
    python3 client/python/bench/call_cost.py --package /tmp/old/client/python
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
if "--package" in sys.argv:
    sys.path.insert(0, sys.argv[sys.argv.index("--package") + 1])
elif not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(HERE, ".."))

from fake_torch import FakeStorage, FakeTensor, fake_torch  # noqa: E402

sys.modules["torch"] = fake_torch()

import matmul_client  # noqa: E402
from matmul_client._proto import matmul_pb2 as pb  # noqa: E402


class StandInRing:
    """What the client uses of the ring for stream-ordered products: each
    product is taken and 'answered' at once."""

    name = "ring"

    def __init__(self, native, session_id):
        self._native = native
        self._session_id = session_id
        self.queued = 0

    @property
    def stream_queue(self):
        return self

    def queue_on_stream(self, spec, stream, timeout, number):
        self._native.product_request(spec, self._session_id)
        self.queued += 1
        return self.queued

    def queue_request_on_stream(self, request, stream, timeout, number):
        self.queued += 1
        return self.queued

    def call_on_stream(self, spec, stream, timeout, done):
        raise AssertionError("matmul_async is not measured here")

    def has_stream_failures(self):
        return False

    def stream_failures(self):
        return ()

    def answered_through(self):
        return self.queued + 1

    def wait_stream_calls(self):
        pass

    def close(self):
        pass


def client_with_cached_operands(torch):
    client = matmul_client.Client("unix:/nonexistent/matmul.sock")
    native = client._native
    if native is None:
        sys.exit(f"call_cost.py: no matmul_client._native in "
                 f"{os.path.dirname(matmul_client.__file__)}")
    client._session_id = "session-1"
    client._products = StandInRing(native, client._session_id)
    regions = iter(range(1, 1 << 30))
    client.register_region = lambda request: pb.RegisterRegionResponse(
        region_id=f"region-{next(regions)}")
    # The driver's buffer ids, as a CUDA machine gives them (this one has
    # no driver).
    ids = {}
    client._cuda_buffer_id = lambda address: ids.setdefault(address, 7)

    def tensor(address, shape):
        storage = FakeStorage(torch, address, 2 * shape[0] * shape[1],
                              b"\x02c" + address.to_bytes(8, "big") * 8, 0)
        return FakeTensor(storage, shape=shape)

    x = tensor(0x7100_0000_0000, (16, 4096))
    w = tensor(0x7200_0000_0000, (4096, 4096))
    out = tensor(0x7300_0000_0000, (16, 4096))
    return client, x, w, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--package", help="the directory that holds the "
                        "matmul_client to measure (default: this tree's)")
    args = parser.parse_args()
    torch = sys.modules["torch"]
    client, x, w, out = client_with_cached_operands(torch)
    client._FREED_CHECK_SECONDS = 3600.0  # as between two 0.1-s checks
    new_out_at = torch.next_address

    def with_out():
        client.matmul(x, w, out=out, transpose_b=True)

    def new_out():
        # The caching allocator hands the same block back each time.
        torch.next_address = new_out_at
        client.matmul(x, w, transpose_b=True)

    def module_level():
        torch.next_address = new_out_at
        matmul_client.matmul(x, w, transpose_b=True, target=client.target)

    matmul_client._client._default_clients[client.target] = client
    for call in (with_out, new_out):
        call()  # registers, and makes the fast path
    fast = getattr(client, "_cuda_fast_matmul", False)
    print(f"matmul_client from {os.path.dirname(matmul_client.__file__)}; "
          f"fast path: {'yes' if fast else 'none'}")
    variants = {}
    for name, call in (("Client.matmul(x, w, out=y, transpose_b=True)",
                        with_out),
                       ("Client.matmul(x, w, transpose_b=True)", new_out),
                       ("matmul_client.matmul(x, w, transpose_b=True)",
                        module_level)):
        for path in ("python", "native") if fast else ("python",):
            variants[f"{name:46s} {path}"] = (call, fast if path == "native"
                                              else False)
    times = {name: [] for name in variants}
    for _ in range(args.batches):
        for name, (call, path) in variants.items():
            client._cuda_fast_matmul = path
            start = time.perf_counter_ns()
            for _ in range(args.calls):
                call()
            times[name].append((time.perf_counter_ns() - start) /
                               args.calls / 1e3)
    print(f"us per call, median of {args.batches} batches of {args.calls} "
          "(min, max of the batch means)")
    for name, values in times.items():
        print(f"  {name} {statistics.median(values):7.2f} "
              f"({min(values):.2f}, {max(values):.2f})")
    if fast:
        path = client._cuda_fast_path
        print(f"fast path: {path.hits} products, {path.misses} handed to "
              "the Python path")
    client._cuda_fast_matmul = False
    matmul_client._client._default_clients.clear()
    client.close()


if __name__ == "__main__":
    main()
