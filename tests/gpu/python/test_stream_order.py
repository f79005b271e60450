"""Stream-ordered products from PyTorch, with no synchronize between the
kernels and the call: the product's input is written by a kernel queued
just before the call (behind a GPU sleep, so that it lands well after the
call was made), its output is read by a kernel queued just after, and the
end result is checked against torch. Run on the default stream, on a side
stream made current with torch.cuda.stream(), and with the stream named by
the stream= keyword. Also: the call returns while the GPU is still busy
with the work queued before it (it does not wait for the device).

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/python -p 'test_stream*'
"""

import time
import unittest

import gpu_env

torch = None
matmul_client = None

M, N, K = 1024, 768, 512
SLEEP_CYCLES = 200_000_000  # about 0.1 s of GPU time at H200 clocks


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


if __name__ == "__main__":
    unittest.main()
