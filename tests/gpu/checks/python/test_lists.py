"""Product lists (Client.matmul_list) and the LoRA layers built on them
(matmul_client.lora_linear / lora_linears) with CUDA tensors against a
CUDA daemon: chained lists of random shapes (scratch written then read, a
client tensor accumulated into with beta=1, transposes, FP32 outputs)
against FP64 torch on the GPU; a list stream-ordered between the local
kernels that make its input and read its output, with no synchronize;
lora_linear's forward and gradients at a moderately large shape against
FP64 autograd; lora_linears of gate and up as two lora_linear calls, in 2
requests; a bad list as MatmulError INVALID_ARGUMENT with the daemon's
message. Outputs start as NaN, so a product that did not write them fails.

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/checks/python -p 'test_lists*'
"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402

torch = None
matmul_client = None

SLEEP_CYCLES = 200_000_000  # about 0.1 s of GPU time at H200 clocks


def randn(*shape, scale=1.0, dtype=None):
    t = torch.randn(*shape, device="cuda") * scale
    return t.to(dtype or torch.bfloat16)


def nan(*shape, dtype=None):
    return torch.full(shape, float("nan"), device="cuda",
                      dtype=dtype or torch.bfloat16)


def bf16(t):
    """t as the daemon stores it in a BF16 buffer (scratch, a BF16 out)."""
    return t.to(torch.bfloat16).double()


class ProductListTest(unittest.TestCase):
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

    def check(self, got, want, what=""):
        self.assertEqual(tuple(got.shape), tuple(want.shape), what)
        self.assertFalse(torch.isnan(got).any().item(),
                         f"{what}: NaNs left: not written, or read too early")
        self.assertLess(gpu_env.relative_error(got, want), 1e-2, what)

    def counting(self):
        """self.client, counting its matmul_list calls in self.lists."""
        self.lists = 0
        real = self.client.matmul_list

        def count(*args, **kwargs):
            self.lists += 1
            return real(*args, **kwargs)

        self.client.matmul_list = count
        self.addCleanup(lambda: delattr(self.client, "matmul_list"))
        return self.client

    def test_chained_lists_of_random_shapes_agree_with_fp64(self):
        Product, Scratch = matmul_client.Product, matmul_client.Scratch
        rng = random.Random(1234)
        # (m, n, k, r, p): ones and odd sizes first, then random ones.
        shapes = [(1, 697, 333, 5, 1), (701, 1, 64, 1, 129),
                  (255, 513, 1, 17, 7)]
        shapes += [tuple(rng.randint(1, 700) for _ in range(3)) +
                   (rng.randint(1, 64), rng.randint(1, 700))
                   for _ in range(4)]
        for m, n, k, r, p in shapes:
            with self.subTest(m=m, n=n, k=k, r=r, p=p):
                # Scaled so that every term is about N(0, 1): an
                # accumulation that went wrong cannot hide under the other.
                x, w1 = randn(m, k, scale=k ** -0.5), randn(r, k)
                w2, v = randn(r, n, scale=r ** -0.5), randn(k, n)
                c, d = randn(p, m, scale=p ** -0.5), randn(p, n)
                y, f = nan(m, n), nan(m, k, dtype=torch.float32)
                acc0 = randn(r, k, scale=(m / k) ** 0.5, dtype=torch.float32)
                acc = acc0.clone()  # beta=1 onto values already there
                h = Scratch(0, (m, r))
                self.client.matmul_list([
                    # 0: h = x w1^T in a new scratch buffer
                    Product(x, w1, Scratch.new((m, r)), transpose_b=True),
                    Product(h, w2, y),  # 1: y = h w2, reading the scratch
                    # 2: y += -0.75 c^T d, into the tensor product 1 wrote
                    Product(c, d, y, transpose_a=True, alpha=-0.75,
                            beta=1.0),
                    # 3: f = 0.5 y v^T, FP32, reading y as product 2 left it
                    Product(y, v, f, transpose_b=True, alpha=0.5),
                    # 4: acc += 1.5 h^T x, FP32, the scratch read transposed
                    Product(h, x, acc, transpose_a=True, alpha=1.5,
                            beta=1.0),
                ])
                torch.cuda.synchronize()
                self.client.synchronize()
                xd = x.double()
                # The reference rounds where the daemon stores BF16 (h, y
                # after product 1), so that only the products' error counts.
                hd = bf16(xd @ w1.double().T)
                want_y = bf16(hd @ w2.double()) - \
                    0.75 * c.double().T @ d.double()
                self.check(y, want_y, "y")
                self.check(f, 0.5 * y.double() @ v.double().T, "f")
                self.check(acc, acc0.double() + 1.5 * hd.T @ xd, "acc")

    def test_a_list_is_ordered_with_the_local_work_around_it(self):
        Scratch = matmul_client.Scratch
        m, n, k, r = 1024, 768, 512, 16
        for name in ("current stream", "side stream", "stream keyword"):
            with self.subTest(name):
                source, w = randn(m, k), randn(r, k)
                u, v = randn(r, n), randn(n, k)
                # x and y start as NaN: a list that reads x before the
                # kernel below wrote it, or a reader of y that runs before
                # the list wrote it, leaves NaNs in z.
                x, y = nan(m, k), nan(m, n)
                torch.cuda.synchronize()
                stream = torch.cuda.current_stream() \
                    if name == "current stream" else torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    # Behind a GPU sleep the input lands well after the
                    # call was made: only stream order makes the list wait.
                    torch.cuda._sleep(SLEEP_CYCLES)
                    torch.mul(source, 2, out=x)  # x = source * 2
                    self.client.matmul_list([
                        (x, w, Scratch.new((m, r)), False, True),
                        (Scratch(0, (m, r)), u, y),
                        (x, v, y, False, True, 0.5, 1.0),
                    ], stream=stream if name == "stream keyword" else None)
                    z = y.float() * 2 + 1  # reads the list's output
                    x.fill_(float("nan"))  # a list still reading x sees it
                stream.synchronize()
                self.client.synchronize()
                xd = source.double() * 2
                want = bf16(xd @ w.double().T) @ u.double() + \
                    0.5 * xd @ v.double().T
                self.check(z, want * 2 + 1, "z")

    def test_lora_linear_forward_and_gradients_agree_with_fp64(self):
        batch, tokens, d_in, d_out, r, scale = 2, 256, 1024, 2048, 16, 2.0
        x = randn(batch, tokens, d_in).requires_grad_(True)
        w = randn(d_out, d_in, scale=d_in ** -0.5)  # frozen BF16 base
        # FP32 adapters, sized so that the adapter's term is as large as
        # the base's: a wrong adapter product cannot hide under it.
        a = torch.nn.Parameter(randn(r, d_in, scale=d_in ** -0.5,
                                     dtype=torch.float32))
        b = torch.nn.Parameter(randn(d_out, r, scale=r ** -0.5,
                                     dtype=torch.float32))
        dy = randn(batch, tokens, d_out)
        client = self.counting()
        y = matmul_client.lora_linear(x, w, a, b, scale, client=client)
        y.backward(dy)
        torch.cuda.synchronize()
        self.client.synchronize()
        self.assertEqual(self.lists, 2)  # one list each way
        self.assertEqual((y.dtype, a.grad.dtype, b.grad.dtype),
                         (torch.bfloat16, torch.float32, torch.float32))
        xd, ad, bd = (t.detach().double().requires_grad_(True)
                      for t in (x, a, b))
        want = xd @ w.double().T + scale * (xd @ ad.T) @ bd.T
        want.backward(dy.double())
        self.check(y, want, "y")
        self.check(x.grad, xd.grad, "dx")
        self.check(a.grad, ad.grad, "dA")
        self.check(b.grad, bd.grad, "dB")

    def test_lora_linears_are_two_lora_linears_in_two_requests(self):
        tokens, d_in, d_out, r, scales = 384, 512, 1024, 16, (2.0, 0.5)
        x = randn(tokens, d_in)
        params = [(randn(d_out, d_in, scale=d_in ** -0.5),
                   torch.nn.Parameter(randn(r, d_in, scale=d_in ** -0.5,
                                            dtype=torch.float32)),
                   torch.nn.Parameter(randn(d_out, r, scale=r ** -0.5,
                                            dtype=torch.float32)))
                  for _ in range(2)]
        bias = randn(d_out)  # on gate only: y made onto it with beta=1
        grads = [randn(tokens, d_out) for _ in range(2)]
        client = self.counting()

        x_list = x.clone().requires_grad_(True)
        outs = matmul_client.lora_linears(
            x_list, [params[0] + (bias,), params[1]], scales, client=client)
        self.assertEqual(self.lists, 1)
        torch.autograd.backward(outs, grads)
        self.assertEqual(self.lists, 2)  # gate and up: one list each way
        list_grads = []
        for _, a, b in params:
            list_grads.append((a.grad, b.grad))
            a.grad = b.grad = None

        self.lists = 0
        x_one = x.clone().requires_grad_(True)
        ones = [matmul_client.lora_linear(x_one, w, a, b, s, bias=bi,
                                          client=client)
                for (w, a, b), s, bi in zip(params, scales, (bias, None))]
        torch.autograd.backward(ones, grads)
        self.assertEqual(self.lists, 4)  # one each way per projection
        torch.cuda.synchronize()
        self.client.synchronize()
        for name, got, want in (("gate", outs[0], ones[0]),
                                ("up", outs[1], ones[1]),
                                ("dx", x_list.grad, x_one.grad)):
            self.check(got, want.double(), name)
        for j, (_, a, b) in enumerate(params):
            self.check(list_grads[j][0], a.grad.double(), f"dA {j}")
            self.check(list_grads[j][1], b.grad.double(), f"dB {j}")

    def test_a_bad_list_raises_invalid_argument_with_the_daemon_message(self):
        Scratch = matmul_client.Scratch
        limit = self.client.server_info().limits.max_list_products
        self.assertGreater(limit, 0)
        a = randn(4, 4)
        cases = [
            ("too long", [(a, a, nan(4, 4)) for _ in range(limit + 1)],
             f"the list has {limit + 1} products; at most {limit}"),
            ("later scratch", [(a, a, nan(4, 4)),
                               (Scratch(2, (4, 4)), a, nan(4, 4)),
                               (a, a, Scratch.new((4, 4)))],
             "product 1: A: reads the scratch of product 2"),
        ]
        for name, products, message in cases:
            with self.subTest(name):
                client = matmul_client.Client(self.target)  # its own errors
                self.addCleanup(client.close)
                with self.assertRaises(matmul_client.MatmulError) as caught:
                    client.matmul_list(products)
                    # Stream-ordered, the call returns before the daemon
                    # looked at the list: the error raises here.
                    client.synchronize()
                self.assertEqual(caught.exception.code.name,
                                 "INVALID_ARGUMENT")
                self.assertIn(message, caught.exception.details)
                # The stream and the client go on: a good list after it.
                out = nan(4, 4)
                client.matmul_list([(a, a, out)])
                torch.cuda.synchronize()
                client.synchronize()
                self.check(out, a.double() @ a.double(), "after the error")


if __name__ == "__main__":
    unittest.main()
