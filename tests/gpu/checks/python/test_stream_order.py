"""Stream-ordered products from PyTorch, with no synchronize between the
kernels and the call: the product's input is written by a kernel queued
just before the call (behind a GPU sleep, so that it lands well after the
call was made), its output is read by a kernel queued just after, and the
end result is checked against torch. Run on the default stream, on a side
stream made current with torch.cuda.stream(), and with the stream named by
the stream= keyword. Also: the call returns while the GPU is still busy
with the work queued before it (it does not wait for the device); and
several clients of one process, each with its own session and request ring,
sending on one CUDA stream at the same instant, in a tight loop
(MATMUL_STALL_ITERATIONS, default 1000), never stall: their products reach
the daemon in either order, and it must launch them in the order the
process queued them. Client.matmul_async, a future per product: 64 in
flight from one Python thread (one input, 64 weights: a process applying
64 adapters at once), each result checked against torch.
A bad product among good ones fails alone, with a MatmulError: raised by
the next call or synchronize() after matmul, by its future after
matmul_async, and never twice.

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/checks/python -p 'test_stream*'
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402

torch = None
matmul_client = None

M, N, K = 1024, 768, 512
SLEEP_CYCLES = 200_000_000  # about 0.1 s of GPU time at H200 clocks
IN_FLIGHT = 64


class StreamOrderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global torch, matmul_client
        torch, cls.target = gpu_env.require_gpu_daemon()
        import matmul_client as module
        matmul_client = module
        cls.client = matmul_client.Client(cls.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def setUp(self):
        torch.manual_seed(0)

    def ordered_product(self, stream=None, use_keyword=False):
        """source -> (sleep; x = source * 0.5) -> y = x @ w.T on the daemon
        -> z = y * 2 + 1, all queued on `stream` (the current one when None)
        with no synchronize; returns (z, its expected value)."""
        source = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        # x and y start as NaN: a product that reads x before the kernel
        # below wrote it, or a reader of y that runs before the product
        # wrote it, leaves NaNs in z.
        x = torch.full((M, K), float("nan"), device="cuda",
                       dtype=torch.bfloat16)
        y = torch.full((M, N), float("nan"), device="cuda",
                       dtype=torch.bfloat16)
        torch.cuda.synchronize()
        stream = stream or torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SLEEP_CYCLES)
            torch.mul(source, 0.5, out=x)  # the kernel just before the call
            if use_keyword:
                self.client.matmul(x, w, out=y, transpose_b=True,
                                   stream=stream)
            else:
                self.client.matmul(x, w, out=y, transpose_b=True)
            z = y.float() * 2 + 1  # the kernel just after the call
        stream.synchronize()
        want = (source.float() * 0.5).bfloat16().float() @ w.float().T
        return z, want * 2 + 1

    def check(self, z, want):
        self.assertFalse(torch.isnan(z).any().item(),
                         "NaNs: the product ran out of order with the stream")
        self.assertLess(gpu_env.relative_error(z, want), 1e-2)

    def test_on_the_current_stream(self):
        self.check(*self.ordered_product())

    def test_on_a_side_stream_made_current(self):
        side = torch.cuda.Stream()
        self.check(*self.ordered_product(stream=side))

    def test_on_a_stream_named_by_keyword(self):
        side = torch.cuda.Stream()
        self.check(*self.ordered_product(stream=side, use_keyword=True))

    def test_the_call_does_not_wait_for_the_gpu(self):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        self.client.matmul(x, w, transpose_b=True)  # regions registered
        torch.cuda.synchronize()
        busy_until = torch.cuda.Event()
        torch.cuda._sleep(SLEEP_CYCLES * 4)  # about 0.4 s
        busy_until.record()
        start = time.monotonic()
        y = self.client.matmul(x, w, transpose_b=True)
        returned_after = time.monotonic() - start
        still_busy = not busy_until.query()
        torch.cuda.synchronize()
        self.assertTrue(still_busy, "the call returned only after the GPU "
                        f"had drained its queue ({returned_after:.3f} s)")
        self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                        1e-2)

    def bad_product(self, good_weights):
        """(a client of its own, whose errors are its own; x; good weights
        for x @ w.T; one whose inner dimension disagrees with x's)."""
        client = matmul_client.Client(self.target)
        self.addCleanup(client.close)
        x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        good = [torch.randn(96, 128, device="cuda", dtype=torch.bfloat16)
                for _ in range(good_weights)]
        bad = torch.randn(96, 100, device="cuda", dtype=torch.bfloat16)
        return client, x, good, bad

    def test_a_daemon_error_raises_at_a_later_call_and_at_synchronize(self):
        client, x, (w,), bad = self.bad_product(1)
        client.matmul(x, bad, transpose_b=True)  # returns: stream-ordered
        client.matmul(x, bad, transpose_b=True)
        with self.assertRaises(matmul_client.MatmulError) as caught:
            client.synchronize()
        self.assertIn("inner dimensions disagree", str(caught.exception))
        client.synchronize()  # the second counted as reported with it

        client.matmul(x, bad, transpose_b=True)
        deadline = time.monotonic() + 30
        with self.assertRaises(matmul_client.MatmulError) as caught:
            while time.monotonic() < deadline:
                client.matmul(x, w, transpose_b=True)
                torch.cuda.synchronize()
        self.assertIn("inner dimensions disagree", str(caught.exception))
        y = client.matmul(x, w, transpose_b=True)
        client.synchronize()
        self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                        1e-2)

    def test_a_bad_product_fails_alone(self):
        client, x, good, bad = self.bad_product(8)
        futures = [client.matmul_async(x, w, transpose_b=True)
                   for w in good[:4]]
        with self.assertRaises(matmul_client.MatmulError) as caught:
            # Refused at the call or through its future: either way a
            # MatmulError saying why.
            client.matmul_async(x, bad, transpose_b=True).result(timeout=60)
        self.assertIn("inner dimensions disagree", str(caught.exception))
        futures += [client.matmul_async(x, w, transpose_b=True)
                    for w in good[4:]]
        for future, w in zip(futures, good):
            y = future.result(timeout=60)
            torch.cuda.synchronize()
            self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                            1e-2)
        client.synchronize()  # the error was raised already: not again

    def test_64_products_in_flight(self):
        x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
        weights = [torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
                   for _ in range(IN_FLIGHT)]
        outs = [torch.full((256, 512), float("nan"), device="cuda",
                           dtype=torch.bfloat16) for _ in range(IN_FLIGHT)]
        torch.cuda.synchronize()
        futures = [self.client.matmul_async(x, w, out=out, transpose_b=True)
                   for w, out in zip(weights, outs)]
        self.assertEqual(len(futures), IN_FLIGHT)
        pending = sum(1 for f in futures if not f.done())
        for future, out in zip(futures, outs):
            self.assertIs(future.result(timeout=120), out)
        self.client.synchronize()
        torch.cuda.synchronize()
        for i, (w, out) in enumerate(zip(weights, outs)):
            with self.subTest(product=i):
                self.assertFalse(torch.isnan(out).any().item())
                self.assertLess(gpu_env.relative_error(
                    out, x.float() @ w.float().T), 1e-2)
        print(f"\n  {pending} of {IN_FLIGHT} futures were pending after "
              "the last submission")

    def test_a_new_block_at_a_cached_address_is_read_afresh(self):
        if "expandable_segments:True" in os.environ.get(
                "PYTORCH_CUDA_ALLOC_CONF", ""):
            self.skipTest("expandable segments: freed bytes are looked at "
                          "on every product")
        client = matmul_client.Client(self.target)
        self.addCleanup(client.close)
        # Only the buffer id can tell the blocks apart.
        client._FREED_CHECK_SECONDS = 3600.0
        w = torch.randn(N, 2048, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        address = x.data_ptr()
        y = client.matmul(x, w, transpose_b=True)
        client.synchronize()
        self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                        1e-2)
        if client._native.cuda_buffer_id(address) is None:
            self.skipTest("the driver gives no buffer ids")
        del x, y
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the block goes back to the driver
        x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        if x.data_ptr() != address:
            self.skipTest("the new block is elsewhere: nothing cached there")
        y = client.matmul(x, w, transpose_b=True)
        client.synchronize()
        self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                        1e-2, "the product read the freed block")


class ManyClientsOneStreamTest(unittest.TestCase):
    """Three clients (three sessions, three rings) of this process on one
    CUDA stream, each iteration one product from each at once, from three
    threads. Shapes change along the way, so the daemon loads and tunes
    kernels (calls that synchronize its context) while products wait."""

    CLIENTS = 3
    # A product past this is a stall (the requests' deadline ends one).
    STALL_S = 5.0

    @classmethod
    def setUpClass(cls):
        global torch, matmul_client
        torch, cls.target = gpu_env.require_gpu_daemon()
        import matmul_client as module
        matmul_client = module
        cls.clients = [matmul_client.Client(cls.target, timeout=20.0)
                       for _ in range(cls.CLIENTS)]

    @classmethod
    def tearDownClass(cls):
        for client in cls.clients:
            client.close()

    def test_products_of_several_rings_on_one_stream_never_stall(self):
        iterations = int(os.environ.get("MATMUL_STALL_ITERATIONS", "1000"))
        torch.manual_seed(3)
        stream = torch.cuda.Stream()
        # A new shape every 50 iterations for the first 600.
        shapes = [(32 + 32 * i, 256 + 64 * (i % 3), 512) for i in range(12)]
        operands = {}
        for m, n, k in shapes:
            for c in range(self.CLIENTS):
                operands[(m, n, k, c)] = (
                    torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                    torch.randn(n, k, device="cuda", dtype=torch.bfloat16),
                    torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        start_line = threading.Barrier(self.CLIENTS + 1)
        errors = []
        shape_of = [None]

        def send(c):
            try:
                for _ in range(iterations):
                    start_line.wait()
                    x, w, y = operands[shape_of[0] + (c,)]
                    self.clients[c].matmul(x, w, out=y, transpose_b=True,
                                           stream=stream)
                    start_line.wait()
            except BaseException as error:  # noqa: BLE001 (reported below)
                errors.append(error)
                start_line.abort()

        threads = [threading.Thread(target=send, args=(c,))
                   for c in range(self.CLIENTS)]
        for thread in threads:
            thread.start()
        stalls, slowest = [], 0.0
        try:
            for i in range(iterations):
                shape_of[0] = shapes[min(i // 50, len(shapes) - 1)]
                start = time.monotonic()
                start_line.wait()  # go
                start_line.wait()  # every product queued
                stream.synchronize()
                took = time.monotonic() - start
                slowest = max(slowest, took)
                if took > self.STALL_S:
                    stalls.append((i, shape_of[0], round(took, 1)))
        except threading.BrokenBarrierError:
            pass
        for thread in threads:
            thread.join()
        for client in self.clients:
            client.synchronize()
        print(f"\n{iterations} iterations of {self.CLIENTS} products on one "
              f"stream: slowest {slowest * 1e3:.1f} ms, stalls {stalls}")
        self.assertEqual(errors, [])
        self.assertEqual(stalls, [])
        # The last iteration's products are right.
        for c in range(self.CLIENTS):
            x, w, y = operands[shape_of[0] + (c,)]
            self.assertLess(
                gpu_env.relative_error(y, x.float() @ w.float().T), 1e-2)


if __name__ == "__main__":
    unittest.main()
