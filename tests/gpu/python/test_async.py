"""Client.matmul_async with 64 products in flight from one Python thread
(one input, 64 weights: a process applying 64 adapters at once), each
result checked against torch; Client.synchronize; a bad product among
good ones fails alone, with a MatmulError.

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/python -p 'test_async*'
"""

import unittest

import gpu_env

torch = None
matmul_client = None

IN_FLIGHT = 64


class AsyncTest(unittest.TestCase):
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

    def test_64_products_in_flight(self):
        torch.manual_seed(1)
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

    def test_a_bad_product_fails_alone(self):
        torch.manual_seed(2)
        x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        good = [torch.randn(96, 128, device="cuda", dtype=torch.bfloat16)
                for _ in range(8)]
        bad = torch.randn(96, 100, device="cuda", dtype=torch.bfloat16)
        futures = [self.client.matmul_async(x, w, transpose_b=True)
                   for w in good[:4]]
        with self.assertRaises(matmul_client.MatmulError) as caught:
            # Refused at the call or through its future: either way a
            # MatmulError saying why.
            self.client.matmul_async(x, bad, transpose_b=True).result(
                timeout=60)
        self.assertIn("inner dimensions disagree", str(caught.exception))
        futures += [self.client.matmul_async(x, w, transpose_b=True)
                    for w in good[4:]]
        for future, w in zip(futures, good):
            y = future.result(timeout=60)
            torch.cuda.synchronize()
            self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                            1e-2)
        self.client.synchronize()  # the error was raised already: not again


if __name__ == "__main__":
    unittest.main()
