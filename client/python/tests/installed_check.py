"""Checks an installed matmul_client (install_test.sh runs it with a
venv's python, outside the source tree) against a CPU daemon.

    installed_check.py SOCKET native   # built with the extension
    installed_check.py SOCKET grpc     # installed without it

native: the extension was built and is used (products go through the
request ring even with the gRPC Matmul call disabled), host tensors and
torch CPU tensors give the same results as the gRPC path (and as a
reference), matmul_async keeps 64 products in flight, the daemon's
errors read the same through both paths, the extension builds a
stream-ordered product's request as the package's messages say it, and
without a GPU its stream-ordered calls refuse with FAILED_PRECONDITION
(leaving no ticket unanswered). grpc: there is no extension, the client
falls back to gRPC, and products, matmul_async and errors work.
"""

import collections
import importlib.util
import itertools
import os
import random
import subprocess
import sys
import threading
import time
import types
import warnings

import grpc

import matmul_client
from matmul_client import HostTensor, MatmulError
from matmul_client._cuda_product import _CudaProduct
from matmul_client._product_list import list_request
from matmul_client._proto import matmul_pb2 as pb


# A client in an interpreter where matmul_client._native does not import:
# reads A and B's bytes from stdin, writes the product's to stdout.
FALLBACK = """
import ast, sys
sys.modules["matmul_client._native"] = None  # its import raises ImportError
import warnings
warnings.simplefilter("error")  # absent is no cause for a warning
import matmul_client
target, a_shape, b_shape = sys.argv[1], *map(ast.literal_eval, sys.argv[2:])
data = sys.stdin.buffer.read()
a_bytes = 2 * a_shape[0] * a_shape[1]
a = matmul_client.HostTensor(data[:a_bytes], a_shape)
b = matmul_client.HostTensor(data[a_bytes:], b_shape)
with matmul_client.Client(target) as client:
    assert client.transport == "grpc", client.transport
    sys.stdout.buffer.write(bytes(client.matmul(a, b, transpose_b=True).data))
"""


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def random_host(shape, rng):
    count = 1
    for d in shape:
        count *= d
    values = [rng.uniform(-1, 1) for _ in range(count)]
    return HostTensor(matmul_client.bf16_bytes(values), shape)


def reference(a, b, transpose_b):
    """FP64 a @ op(b) of rank-2 HostTensors, row-major floats."""
    av, bv = a.tolist(), b.tolist()
    m, k = a.shape
    n = b.shape[0] if transpose_b else b.shape[1]
    out = []
    for i in range(m):
        for j in range(n):
            out.append(sum(av[i * k + q] *
                           bv[(j * k + q) if transpose_b else (q * n + j)]
                           for q in range(k)))
    return out


def relative_error(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return (num / den) ** 0.5 if den else num ** 0.5


def new_client(target, native):
    """A Client with the native path on or off (read at construction)."""
    os.environ["MATMUL_CLIENT_NATIVE"] = "1" if native else "0"
    try:
        return matmul_client.Client(target)
    finally:
        del os.environ["MATMUL_CLIENT_NATIVE"]


def disable_grpc_products(client):
    """Any product that goes over gRPC from now on fails loudly."""
    def refuse(*args, **kwargs):
        raise AssertionError("a product went over gRPC")
    refuse.future = refuse
    client._stub.Matmul = refuse


def host_cases(rng):
    """(a, b, transpose_b, out_dtype) of a few shapes."""
    cases = []
    for m, n, k, transpose_b, out_dtype in ((1, 1, 1, False, "bf16"),
                                            (7, 5, 9, False, "fp32"),
                                            (16, 24, 32, True, "fp32"),
                                            (64, 48, 80, True, "bf16")):
        a = random_host((m, k), rng)
        b = random_host((n, k) if transpose_b else (k, n), rng)
        cases.append((a, b, transpose_b, out_dtype))
    return cases


def daemon_errors(client):
    """(code, details) of products the daemon refuses, sync and async."""
    rng = random.Random(7)
    bad = [
        dict(a=random_host((4, 6), rng), b=random_host((5, 5), rng)),  # K
        dict(a=random_host((4, 6), rng), b=random_host((6, 5), rng),
             out=HostTensor(bytearray(3 * 5 * 4), (3, 5), "fp32")),  # C
        dict(a=random_host((2, 3, 4), rng),
             b=random_host((3, 4, 5), rng)),  # batch
        dict(a=HostTensor(bytearray(4 * 6 * 4), (4, 6), "fp32"),
             b=random_host((6, 5), rng)),  # dtype
    ]
    errors = []
    for kwargs in bad:
        try:
            client.matmul(**kwargs)
        except MatmulError as error:
            errors.append((error.code, error.details))
        else:
            raise AssertionError(f"the daemon accepted {kwargs}")
        future = client.matmul_async(**kwargs)
        error = future.exception(timeout=60)
        check(isinstance(error, MatmulError), f"async: {error!r}")
        errors.append((error.code, error.details))
    return errors


def check_native(target):
    import torch  # Debian's python3-torch: CPU tensors

    check(importlib.util.find_spec("matmul_client._native") is not None,
          "matmul_client._native was not built")
    from matmul_client import _native
    check("/venv/" in _native.__file__, f"_native from {_native.__file__}")
    rng = random.Random(1)
    ring = new_client(target, native=True)
    grpc_client = new_client(target, native=False)
    check(ring.transport == "ring", f"transport {ring.transport}")
    check(grpc_client.transport == "grpc", grpc_client.transport)
    disable_grpc_products(ring)

    # Host tensors: right, and bit for bit what the gRPC path gives.
    for a, b, transpose_b, out_dtype in host_cases(rng):
        got = ring.matmul(a, b, transpose_b=transpose_b, out_dtype=out_dtype)
        want = grpc_client.matmul(a, b, transpose_b=transpose_b,
                                  out_dtype=out_dtype)
        check(bytes(got.data) == bytes(want.data),
              f"{a.shape}x{b.shape}: ring and gRPC results differ")
        error = relative_error(got.tolist(), reference(a, b, transpose_b))
        check(error < 1e-2, f"{a.shape}x{b.shape}: relative error {error}")

    # torch CPU tensors: new outputs, out= with beta, shared tensors.
    x = torch.randn(33, 65, dtype=torch.bfloat16)
    w = torch.randn(17, 65, dtype=torch.bfloat16)
    y = ring.matmul(x, w, transpose_b=True, out_dtype="fp32")
    check(isinstance(y, torch.Tensor) and y.dtype == torch.float32, y)
    check(torch.equal(y, grpc_client.matmul(x, w, transpose_b=True,
                                            out_dtype="fp32")),
          "torch: ring and gRPC results differ")
    torch.testing.assert_close(y, x.float() @ w.float().T, rtol=1e-2,
                               atol=1e-2)
    out = torch.ones(33, 17, dtype=torch.float32)
    ring.matmul(x, w, out=out, transpose_b=True, alpha=2.0, beta=0.5)
    torch.testing.assert_close(out, 2.0 * (x.float() @ w.float().T) + 0.5,
                               rtol=1e-2, atol=2e-2)
    shared_x = ring.shared_tensor((33, 65))
    shared_x.copy_(x)
    torch.testing.assert_close(ring.matmul(shared_x, w, transpose_b=True),
                               (x.float() @ w.float().T).bfloat16(),
                               rtol=2e-2, atol=5e-2)

    # The GIL is free while a product waits in the ring: a thread that
    # needs it runs during the call, although the switch interval would not
    # hand it over in that time.
    a, b = random_host((512, 512), rng), random_host((512, 512), rng)
    request = ring._prepare(a, b, None, False, False, 1.0, 0.0, None)
    ran = threading.Event()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        go = threading.Event()
        thread = threading.Thread(target=lambda: (go.wait(), ran.set()))
        thread.start()
        time.sleep(0.05)  # lets it reach go.wait()
        go.set()  # it now waits for the GIL, which this thread holds
        ring._products._ring.call(request.request.SerializeToString(), 60.0)
        released = ran.is_set()
    finally:
        sys.setswitchinterval(interval)
        request.release()
    thread.join()
    check(released, "the GIL was held while the product waited")

    # 64 products in flight from this thread, host and torch tensors:
    # matmul_async returns before the answer. Counted as each call returns
    # (the daemon cannot have answered a product that was just published),
    # not after the last: on a loaded machine the daemon may keep up with
    # a sender that prepares torch tensors.
    operands = [(random_host((128, 128), rng), random_host((128, 128), rng))
                for _ in range(32)]
    tensors = [(torch.randn(128, 256, dtype=torch.bfloat16),
                torch.randn(256, 128, dtype=torch.bfloat16))
               for _ in range(32)]
    futures = []
    pending_at_return = 0
    for a, b in operands:
        futures.append(ring.matmul_async(a, b, out_dtype="fp32"))
        pending_at_return += not futures[-1].done()
    for a, b in tensors:
        futures.append(ring.matmul_async(a, b))
        pending_at_return += not futures[-1].done()
    check(pending_at_return >= 32, f"{pending_at_return} of 64 products "
          "were pending when matmul_async returned")
    ring.synchronize()
    check(all(f.done() for f in futures), "synchronize() returned early")
    for future, (a, b) in zip(futures, operands):
        check(bytes(future.result().data) ==
              bytes(grpc_client.matmul(a, b, out_dtype="fp32").data),
              "an async product differs from the synchronous one")
    for future, (a, b) in zip(futures[32:], tensors):
        check(torch.equal(future.result(), grpc_client.matmul(a, b)),
              "an async torch product differs from the synchronous one")

    # synchronize() raises the first failure not raised yet, once.
    a, b = random_host((8, 16), rng), random_host((16, 4), rng)
    good = ring.matmul_async(a, b)
    bad = ring.matmul_async(a, a)  # [8, 16] @ [8, 16]
    try:
        ring.synchronize()
    except MatmulError as error:
        check(error.code == grpc.StatusCode.INVALID_ARGUMENT, error)
    else:
        raise AssertionError("synchronize() raised nothing")
    check(good.result() is not None and bad.exception() is not None, "")
    ring.synchronize()  # raised already: nothing more

    # The daemon's errors: the same code and message through both paths.
    ring_errors, grpc_errors = daemon_errors(ring), daemon_errors(grpc_client)
    check(ring_errors == grpc_errors,
          f"ring errors {ring_errors} != gRPC errors {grpc_errors}")
    check(all(code == grpc.StatusCode.INVALID_ARGUMENT
              for code, _ in ring_errors), ring_errors)

    check_stream_calls_without_a_gpu(ring)

    # Where the extension does not import, the client falls back to gRPC
    # with the same results (a fresh interpreter that cannot import it).
    a, b, transpose_b, _ = host_cases(rng)[2]
    want = ring.matmul(a, b, transpose_b=transpose_b)
    fallback = subprocess.run(
        [sys.executable, "-c", FALLBACK, target, repr(a.shape),
         repr(b.shape)], input=bytes(a.data) + bytes(b.data),
        capture_output=True, check=True)
    check(fallback.stdout == bytes(want.data),
          f"fallback and ring results differ: {fallback.stderr!r}")
    ring.close()
    grpc_client.close()
    print(f"native: {len(host_cases(rng))} host shapes and torch CPU "
          f"tensors, 64 products sent at once ({pending_at_return} pending "
          f"as matmul_async returned), {len(ring_errors)} errors equal through the "
          "ring and gRPC, stream-ordered requests built in C++, the gRPC "
          "fallback")


def check_stream_calls_without_a_gpu(client):
    """The C++ request of a stream-ordered product is the package's message
    for it; with no GPU the ring refuses such products before sending,
    and their tickets count as answered."""
    from matmul_client import _native
    bf16, fp32 = pb.DTYPE_BF16, pb.DTYPE_FP32
    products = [
        (("ra", 64, (16, 32), (32, 1), bf16),
         ("rb", 0, (24, 32), (32, 1), bf16),
         ("rc", 128, (16, 24), (24, 1), bf16), False, True, 1.0, 0.0, bf16),
        # Strided a and c, a batch, beta and fp32 out.
        (("ra", 0, (2, 32, 16), (1024, 1, 32), bf16),
         ("rb", 4096, (2, 32, 24), (0, 24, 1), bf16),
         ("rc", 0, (2, 16, 24), (800, 48, 1), fp32), True, False, 0.5,
         2.0, fp32),
    ]
    for spec in products:
        want = _CudaProduct("session-7", spec, None, [], None).request
        got = pb.MatmulRequest.FromString(
            _native.product_request(spec, "session-7"))
        check(got == want, f"C++ request {got} != Python's {want}")
    # A product list: a Python list of products, an int region id naming
    # the scratch of that product.
    listed = list(products) + [
        (("ra", 64, (16, 32), (32, 1), bf16),
         ("rb", 0, (24, 32), (32, 1), bf16),
         (2, 0, (16, 24), (24, 1), bf16), False, True, 1.0, 0.0, bf16),
        ((2, 96, (24, 8), (1, 24), bf16),
         ("rb", 0, (8, 32), (32, 1), bf16),
         ("rc", 0, (24, 32), (32, 1), fp32), False, False, 2.0, 1.0, fp32),
    ]
    want = list_request("session-7", listed)
    got = pb.MatmulRequest.FromString(
        _native.product_request(listed, "session-7"))
    check(got == want, f"C++ list request {got} != Python's {want}")
    check(got.products[3].a.scratch.offset_bytes == 96 and
          got.products[2].c.HasField("scratch"),
          f"scratch operands lost: {got}")
    for bad in (products[0][:7], products[0][:2] + (("rc", 0),) +
                products[0][3:], [products[0], products[0][:7]]):
        try:
            _native.product_request(bad, "s")
        except (TypeError, ValueError):
            pass
        else:
            raise AssertionError(f"product_request took {bad}")
    check(_native.cuda_buffer_id(0x1000) is None,
          "a buffer id for an address that is no CUDA allocation")
    import torch
    if torch.cuda.is_available():
        return  # the products would be sent (to a CPU daemon)
    ring = client._products._ring
    for _ in range(2):
        try:
            ring.queue_on_stream(products[0], 0, 5.0, 41)
        except MatmulError as error:
            check(error.code == grpc.StatusCode.FAILED_PRECONDITION, error)
        else:
            raise AssertionError("a stream-ordered call without a GPU")
    check(ring.answered_through() == 3,
          f"answered through {ring.answered_through()}, expected 3")
    check(ring.wait_stream_calls(0.0), "unsent products are waited for")
    check(ring.take_stream_failures() == [], "unsent products failed")
    check(not ring.has_stream_failures(), "has_stream_failures")
    # The CUDA fast path over this ring (CPU tensors stand in for CUDA ones
    # in a cache filled by hand): its product reaches
    # Ring.queue_request_on_stream, which refuses it as queue_on_stream
    # does, after one product number.
    a, b, c = (torch.zeros(shape, dtype=torch.bfloat16)
               for shape in ((16, 32), (24, 32), (16, 24)))
    state = types.SimpleNamespace(
        _closed=False, _retired=[], timeout=5.0,
        _cuda_storages={t.data_ptr(): (f"r{i}", 0, 1 << 20, 0, 7)
                        for i, t in enumerate((a, b, c))},
        _cuda_unidentified=set(), _cuda_next_freed_check={0: float("inf")})
    numbers = itertools.count(42)
    fast = _native.CudaFastPath(
        ring, client.session_id, threading.RLock(), numbers,
        collections.deque(), collections.deque(), lambda device: 0,
        torch.empty, {torch.bfloat16: bf16, torch.float32: fp32},
        lambda address: 7)
    try:
        fast.matmul(state, a, b, c, True, False, 1.0, 0.0, None, None, None)
    except MatmulError as error:
        check(error.code == grpc.StatusCode.FAILED_PRECONDITION, error)
    else:
        raise AssertionError("a fast stream-ordered call without a GPU")
    check(next(numbers) == 43, "the fast path took no product number")
    check((fast.hits, fast.misses) == (0, 0), (fast.hits, fast.misses))
    check(ring.answered_through() == 4,
          f"answered through {ring.answered_through()}, expected 4")


def check_without_extension(target):
    check(importlib.util.find_spec("matmul_client._native") is None,
          "matmul_client._native exists")
    rng = random.Random(2)
    with warnings.catch_warnings():
        # An extension that is absent is no cause for a warning.
        warnings.simplefilter("error")
        client = matmul_client.Client(target)
    check(client.transport == "grpc", client.transport)
    for a, b, transpose_b, out_dtype in host_cases(rng):
        got = client.matmul(a, b, transpose_b=transpose_b, out_dtype=out_dtype)
        error = relative_error(got.tolist(), reference(a, b, transpose_b))
        check(error < 1e-2, f"{a.shape}x{b.shape}: relative error {error}")
    operands = [(random_host((8, 16), rng), random_host((16, 12), rng))
                for _ in range(64)]
    futures = [client.matmul_async(a, b) for a, b in operands]
    client.synchronize()
    for future, (a, b) in zip(futures, operands):
        check(bytes(future.result().data) == bytes(client.matmul(a, b).data),
              "an async product differs from the synchronous one")
    errors = daemon_errors(client)
    check(all(code == grpc.StatusCode.INVALID_ARGUMENT for code, _ in errors),
          errors)
    client.close()
    print("without the extension: products, 64 in flight and errors over "
          "gRPC")


def main():
    socket, mode = sys.argv[1], sys.argv[2]
    target = "unix:" + socket
    if mode == "native":
        check_native(target)
    elif mode == "grpc":
        check_without_extension(target)
    else:
        raise SystemExit(f"unknown mode {mode}; expected native or grpc")


if __name__ == "__main__":
    main()
