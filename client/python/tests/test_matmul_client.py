"""matmul_client against a real matmul-server (CPU backend) on a temporary
unix socket, without torch: HostTensor operands through the scratch shm
region and through shared buffers (zero copy), errors, sessions, and CUDA
region requests refused by a daemon without a GPU (test_cuda_regions.py has
the CUDA parts that need no daemon).

    MATMUL_SERVER=build/server/matmul-server python3 -m unittest \\
        discover -s client/python/tests
"""

import array
import concurrent.futures
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

# The source tree's package, unless the test is of the installed one
# (install_test.sh).
if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grpc  # noqa: E402

import matmul_client  # noqa: E402
from matmul_client import HostTensor, MatmulError  # noqa: E402
from matmul_client import _client, _transports  # noqa: E402
from cpu_daemon import start_cpu_daemon, stop_cpu_daemon  # noqa: E402


def random_bf16(count, rng):
    return matmul_client.bf16_bytes([rng.uniform(-1, 1) for _ in range(count)])


def reference(a, b, transpose_a, transpose_b, alpha=1.0, beta=0.0, c=None):
    """FP64 alpha * op(a) @ op(b) + beta * c over HostTensors, row-major."""
    av, bv = a.tolist(), b.tolist()
    batch_a = a.shape[0] if len(a.shape) == 3 else 1
    batch_b = b.shape[0] if len(b.shape) == 3 else 1
    ra, ca = a.shape[-2:]
    rb, cb = b.shape[-2:]
    m, k = (ca, ra) if transpose_a else (ra, ca)
    n = rb if transpose_b else cb
    batch = max(batch_a, batch_b)
    cv = c.tolist() if c is not None else None
    out = []
    for p in range(batch):
        pa = (p if batch_a > 1 else 0) * ra * ca
        pb = (p if batch_b > 1 else 0) * rb * cb
        for i in range(m):
            for j in range(n):
                total = 0.0
                for q in range(k):
                    x = av[pa + (q * ca + i if transpose_a else i * ca + q)]
                    y = bv[pb + (j * cb + q if transpose_b else q * cb + j)]
                    total += x * y
                value = alpha * total
                if cv is not None:
                    value += beta * cv[(p * m + i) * n + j]
                out.append(value)
    return out


def relative_error(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return (num / den) ** 0.5 if den else num ** 0.5


class MatmulClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_cpu_daemon(cls)

    @classmethod
    def tearDownClass(cls):
        stop_cpu_daemon(cls)

    def setUp(self):
        self.rng = random.Random(1234)
        self.client = matmul_client.Client(self.target)
        self.addCleanup(self.client.close)

    def operands(self, m, n, k, batch=0, transpose_a=False,
                 transpose_b=False):
        lead = (batch,) if batch else ()
        a_shape = lead + ((k, m) if transpose_a else (m, k))
        b_shape = lead + ((n, k) if transpose_b else (k, n))
        count = lambda shape: eval("*".join(map(str, shape)))  # noqa: E731
        return (HostTensor(random_bf16(count(a_shape), self.rng), a_shape),
                HostTensor(random_bf16(count(b_shape), self.rng), b_shape))

    def test_products_through_the_scratch_region(self):
        cases = [
            dict(m=5, n=7, k=3),
            dict(m=17, n=9, k=33, transpose_b=True),
            dict(m=8, n=12, k=6, transpose_a=True),
            dict(m=4, n=5, k=6, transpose_a=True, transpose_b=True),
            dict(m=6, n=4, k=10, batch=3, transpose_b=True),
        ]
        for case in cases:
            with self.subTest(**case):
                a, b = self.operands(**case)
                result = self.client.matmul(
                    a, b, transpose_a=case.get("transpose_a", False),
                    transpose_b=case.get("transpose_b", False))
                batch = case.get("batch", 0)
                shape = ((batch,) if batch else ()) + (case["m"], case["n"])
                self.assertEqual(result.shape, shape)
                self.assertEqual(result.dtype, _client.BF16)
                want = reference(a, b, case.get("transpose_a", False),
                                 case.get("transpose_b", False))
                self.assertLess(relative_error(result.tolist(), want), 1e-2)
                # The output travelled in the region, not in the response.
                self.assertFalse(self.client.last_response.HasField("c"))
        # One scratch region served them all.
        regions = self.client.list_regions()
        self.assertEqual(len(regions), 1)
        self.assertEqual(regions[0].kind, "shm")

    def test_out_alpha_beta_fp32_and_strided_out(self):
        a, b = self.operands(6, 5, 9, transpose_b=True)
        # out is FP32 [6, 5] inside a [6, 8] buffer: row stride 8.
        initial = [self.rng.uniform(-1, 1) for _ in range(6 * 8)]
        buffer = array.array("f", initial)
        out = HostTensor(buffer, (6, 5), "fp32", strides=(8, 1))
        c_before = HostTensor(array.array("f", initial), (6, 5), "fp32",
                              strides=(8, 1))
        returned = self.client.matmul(a, b, out=out, transpose_b=True,
                                      alpha=-0.5, beta=2.0)
        self.assertIs(returned, out)
        want = reference(a, b, False, True, alpha=-0.5, beta=2.0, c=c_before)
        self.assertLess(relative_error(out.tolist(), want), 1e-4)
        # The padding columns are untouched.
        original = array.array("f", initial)
        for row in range(6):
            for col in range(5, 8):
                self.assertEqual(buffer[row * 8 + col], original[row * 8 + col])

    def test_shared_buffers_are_used_in_place(self):
        m, n, k = 9, 11, 13
        a, b = self.operands(m, n, k, transpose_b=True)
        memory = self.client.shared_buffer(4096)
        memory[0:len(a.data)] = a.data
        memory[1024:1024 + len(b.data)] = b.data
        shared_a = HostTensor(memory[0:len(a.data)], a.shape)
        shared_b = HostTensor(memory[1024:1024 + len(b.data)], b.shape)
        out = HostTensor(memory[2048:2048 + m * n * 4], (m, n), "fp32")
        self.client.matmul(shared_a, shared_b, out=out, transpose_b=True)
        want = reference(a, b, False, True)
        self.assertLess(relative_error(out.tolist(), want), 1e-4)
        # Nothing went through a scratch region: only the shared one exists.
        self.assertEqual(len(self.client.list_regions()), 1)

    def test_module_level_matmul_uses_a_default_client(self):
        a, b = self.operands(3, 4, 5)
        result = matmul_client.matmul(a, b, target=self.target)
        self.assertLess(
            relative_error(result.tolist(), reference(a, b, False, False)),
            1e-2)
        self.assertIs(matmul_client.default_client(self.target),
                      matmul_client.default_client(self.target))

    def test_daemon_errors_become_matmul_errors(self):
        a, b = self.operands(4, 5, 6)
        with self.assertRaises(MatmulError) as caught:
            self.client.matmul(a, b, transpose_b=True)  # K 6 vs 5
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("inner dimensions disagree", caught.exception.details)
        with self.assertRaises(ValueError):
            self.client.matmul(a, b, beta=1.0)  # beta without out
        with self.assertRaises(ValueError):
            HostTensor(b"\x00" * 10, (4, 4))  # too few bytes
        with self.assertRaises(TypeError):
            self.client.matmul([1.0], b)

    def test_cuda_ipc_regions_are_refused_by_a_cpu_daemon(self):
        request = _client.pb.RegisterRegionRequest(
            cuda_ipc=_client.pb.CudaIpcRegion(handle=b"\x01" * 64,
                                              size_bytes=1 << 20))
        with self.assertRaises(MatmulError) as caught:
            self.client.register_region(request)
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.FAILED_PRECONDITION)

    def test_cuda_vmm_regions_are_checked_then_refused_by_a_cpu_daemon(self):
        def vmm(**fields):
            return _client.pb.RegisterRegionRequest(
                cuda_vmm=_client.pb.CudaVmmRegion(pid=os.getpid(), **fields))
        # Malformed whatever the backend: INVALID_ARGUMENT, saying why.
        with self.assertRaises(MatmulError) as caught:
            self.client.register_region(vmm(chunk_fds=[3, 4],
                                            chunk_bytes=2 << 20,
                                            size_bytes=5 << 20))
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("expected more than 2097152 and at most 4194304",
                      caught.exception.details)
        # Well-formed (what the client sends for an expandable segment):
        # this daemon has no GPU.
        with self.assertRaises(MatmulError) as caught:
            self.client.register_region(vmm(chunk_fds=[3, 4],
                                            chunk_bytes=2 << 20,
                                            size_bytes=4 << 20))
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("CUDA backend", caught.exception.details)

    def test_closing_ends_the_session(self):
        client = matmul_client.Client(self.target)
        session = client.session_id
        a, b = self.operands(2, 3, 4)
        client.matmul(a, b)
        observer = matmul_client.Client(self.target)
        self.addCleanup(observer.close)
        stub = observer._stub
        listed = stub.ListRegions(
            _client.pb.ListRegionsRequest(session_id=session), timeout=10)
        self.assertEqual(len(listed.regions), 1)
        client.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                stub.ListRegions(
                    _client.pb.ListRegionsRequest(session_id=session),
                    timeout=10)
            except grpc.RpcError as error:
                self.assertEqual(error.code(), grpc.StatusCode.NOT_FOUND)
                break
            self.assertLess(time.monotonic(), deadline, "session still open")
            time.sleep(0.02)
        # No shm objects of ours are left behind.
        leftovers = [n for n in os.listdir("/dev/shm")
                     if n.startswith(f"matmul-py{os.getpid()}-")]
        self.assertEqual(leftovers, [])

    def test_products_take_the_expected_transport(self):
        # install_test.sh runs this suite with the native extension.
        expected = os.environ.get("MATMUL_CLIENT_TEST_TRANSPORT")
        if not expected:
            self.skipTest("MATMUL_CLIENT_TEST_TRANSPORT not set")
        self.assertEqual(self.client.transport, expected)

    def test_matmul_async_keeps_many_products_in_flight(self):
        cases = [self.operands(9, 7, 11) for _ in range(24)]
        futures = [self.client.matmul_async(a, b, out_dtype="fp32")
                   for a, b in cases]
        self.client.synchronize()
        self.assertTrue(all(f.done() for f in futures))
        for future, (a, b) in zip(futures, cases):
            self.assertEqual(
                bytes(future.result().data),
                bytes(self.client.matmul(a, b, out_dtype="fp32").data))
        # Each product had its own scratch region; they are kept for reuse.
        self.assertGreater(len(self.client._scratch._idle), 1)
        # out= is filled in when the future is done.
        a, b = cases[0]
        out = HostTensor(bytearray(9 * 7 * 4), (9, 7), "fp32")
        self.assertIs(self.client.matmul_async(a, b, out=out).result(), out)
        self.assertEqual(bytes(out.data), bytes(futures[0].result().data))

    def test_synchronize_raises_the_first_error_not_raised_yet(self):
        a, b = self.operands(4, 5, 6)
        ok = self.client.matmul_async(a, b)
        first = self.client.matmul_async(a, a)  # K 6 vs 4
        second = self.client.matmul_async(b, b)  # K 5 vs 6
        with self.assertRaises(MatmulError) as caught:
            self.client.synchronize()
        self.assertIs(caught.exception, first.exception())
        self.assertIn("inner dimensions disagree", caught.exception.details)
        self.client.synchronize()  # reported already
        self.assertIsNotNone(ok.result())
        self.assertIsNotNone(second.exception())
        # An error the caller already got from its future is not raised.
        failed = self.client.matmul_async(a, a)
        with self.assertRaises(MatmulError):
            failed.result()
        self.client.synchronize()

    def test_async_products_cannot_be_cancelled_and_need_no_timeout(self):
        client = matmul_client.Client(self.target, timeout=None)
        self.addCleanup(client.close)
        a, b = self.operands(3, 4, 5)
        future = client.matmul_async(a, b)
        self.assertFalse(future.cancel())
        self.assertEqual(bytes(future.result().data),
                         bytes(client.matmul(a, b).data))

    def test_products_from_several_threads(self):
        cases = [self.operands(5, 6, 7) for _ in range(8)]
        want = [bytes(self.client.matmul(a, b).data) for a, b in cases]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(
                lambda ab: bytes(self.client.matmul(*ab).data), cases * 4))
        self.assertEqual(got, want * 4)

    def test_torch_is_imported_lazily(self):
        self.assertNotIn("torch", sys.modules)

    def test_bf16_round_trip(self):
        values = [0.0, 1.0, -2.5, 3.140625, 1e-3]
        back = matmul_client.floats_from_bf16(matmul_client.bf16_bytes(values))
        for v, w in zip(values, back):
            self.assertAlmostEqual(v, w, delta=abs(v) * 2 ** -8)


class RefusedRingTest(unittest.TestCase):
    """A daemon that attaches no more rings (--max_rings=1): the second
    client keeps its session and sends its products over gRPC."""

    def setUp(self):
        server = os.environ.get("MATMUL_SERVER")
        if not server:
            self.skipTest("set MATMUL_SERVER to a matmul-server")
        if _transports._load_native("unix:", secure=False) is None:
            # install_test.sh runs this with the extension: there it fails.
            self.assertNotEqual(
                os.environ.get("MATMUL_CLIENT_TEST_TRANSPORT"), "ring",
                "the native extension does not load")
            self.skipTest("the native extension is not built (or "
                          "MATMUL_CLIENT_NATIVE=0)")
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        socket = os.path.join(directory.name, "matmul.sock")
        self.target = "unix:" + socket
        log = open(os.path.join(directory.name, "server.log"), "w")
        self.addCleanup(log.close)
        daemon = subprocess.Popen(
            [server, "--backend=cpu", "--listen=" + self.target,
             "--metrics_listen=", "--max_rings=1"], stdout=log,
            stderr=subprocess.STDOUT)
        self.addCleanup(daemon.wait, timeout=60)
        self.addCleanup(daemon.terminate)
        deadline = time.monotonic() + 60
        while not os.path.exists(socket):
            self.assertIsNone(daemon.poll(), "matmul-server exited")
            self.assertLess(time.monotonic(), deadline, "no matmul-server")
            time.sleep(0.05)

    def test_products_go_over_grpc_when_no_ring_is_attached(self):
        first = matmul_client.Client(self.target)
        self.addCleanup(first.close)
        self.assertEqual(first.transport, "ring")
        second = matmul_client.Client(self.target)
        self.addCleanup(second.close)
        with self.assertWarnsRegex(RuntimeWarning, "RESOURCE_EXHAUSTED"):
            self.assertEqual(second.transport, "grpc")
        rng = random.Random(5)
        a = HostTensor(random_bf16(6 * 4, rng), (6, 4))
        b = HostTensor(random_bf16(4 * 3, rng), (4, 3))
        self.assertEqual(bytes(first.matmul(a, b).data),
                         bytes(second.matmul(a, b).data))
        self.assertEqual(len(second.list_regions()), 1)  # its scratch


if __name__ == "__main__":
    unittest.main()
