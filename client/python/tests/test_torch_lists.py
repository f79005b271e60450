"""Product lists (Client.matmul_list) and the LoRA layers built on them
(matmul_client.lora, matmul_client.nn.LoraLinear) against a real
matmul-server (CPU backend) on a temporary unix socket, with CPU tensors:
lists of fresh random inputs against an FP64 reference (relative norm
error < 1e-2), lists that read scratch and accumulate (beta=1), tensors
that one product writes and a later one reads, lora_linear's forward and
gradients against FP64, LoraLinear training two steps as a local
PEFT-style module does, and the daemon's errors (a list too long, a read
of a later product's scratch) as MatmulError with its message. Needs torch
(Debian: python3-torch); skips without it unless MATMUL_REQUIRE_TORCH=1.

    MATMUL_SERVER=build/server/matmul-server python3 -m unittest \\
        discover -s client/python/tests -p 'test_torch_lists*'
"""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grpc  # noqa: E402

import matmul_client  # noqa: E402
from cpu_daemon import start_cpu_daemon, stop_cpu_daemon  # noqa: E402
from matmul_client import MatmulError, Product, Scratch  # noqa: E402

torch = None  # set by setUpClass


def relative_error(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def op(t, transpose):
    return t.transpose(-1, -2) if transpose else t


class ProductListTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global torch
        try:
            import torch as torch_module
        except ImportError:
            if os.environ.get("MATMUL_REQUIRE_TORCH") == "1":
                raise
            raise unittest.SkipTest("torch is not installed (Debian: "
                                    "python3-torch)") from None
        torch = torch_module
        start_cpu_daemon(cls)
        cls.client = matmul_client.Client(cls.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop_cpu_daemon(cls)

    def setUp(self):
        self.generator = torch.Generator().manual_seed(4321)

    def rand(self, *shape, dtype=None):
        t = torch.rand(*shape, generator=self.generator) * 2 - 1
        return t.to(dtype or torch.bfloat16)

    def nan(self, *shape, dtype=None):
        return torch.full(shape, float("nan"), dtype=dtype or torch.bfloat16)

    def check(self, got, want, limit=1e-2):
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        self.assertFalse(torch.isnan(got).any().item(), "NaNs left in out")
        self.assertLess(relative_error(got, want), limit)

    # -- lists ----------------------------------------------------------------

    def test_independent_products_agree_with_fp64(self):
        cases = [  # (M, N, K, transpose_a, transpose_b, alpha, out dtype)
            (37, 29, 41, False, False, 1.0, torch.bfloat16),
            (64, 48, 80, False, True, 0.5, torch.float32),
            (48, 64, 16, True, False, -2.0, torch.bfloat16),
            (33, 17, 9, True, True, 1.0, torch.float32),
        ]
        products, wants = [], []
        for m, n, k, ta, tb, alpha, dtype in cases:
            a = self.rand(*((k, m) if ta else (m, k)))
            b = self.rand(*((n, k) if tb else (k, n)))
            out = self.nan(m, n, dtype=dtype)
            products.append(Product(a, b, out, ta, tb, alpha))
            wants.append(alpha * (op(a.double(), ta) @ op(b.double(), tb)))
        self.assertIsNone(self.client.matmul_list(products))
        for product, want in zip(products, wants):
            self.check(product.out, want)
        kernels = self.client.last_response.kernel.split(" + ")
        self.assertEqual(len(kernels), len(cases))

    def test_a_later_product_reads_an_earlier_output_and_accumulates(self):
        # The LoRA forward: xa = x A^T, y = x W^T + bias, y += s xa B^T.
        x, w, a, b = (self.rand(40, 24), self.rand(56, 24), self.rand(4, 24),
                      self.rand(56, 4))
        bias = self.rand(56)
        xa = self.nan(40, 4)
        y = bias.expand(40, 56).clone()
        self.client.matmul_list([
            (x, a, xa, False, True),
            (x, w, y, False, True, 1.0, 1.0),
            (xa, b, y, False, True, 2.0, 1.0),
        ])
        xd = x.double()
        want_xa = xd @ a.double().T
        self.check(xa, want_xa)
        self.check(y, xd @ w.double().T + bias.double() +
                   2.0 * xa.double() @ b.double().T)

    def test_scratch_is_read_and_accumulated_into(self):
        # The LoRA backward: t = dy B in scratch, dA = s t^T x, dx = dy W,
        # dx += s t A; then a scratch accumulated into (beta=1) and read
        # back, and one read through strides (t^T as a view).
        m, n, k, r = 32, 48, 24, 8
        dy, b, x, w, a = (self.rand(m, n), self.rand(n, r), self.rand(m, k),
                          self.rand(n, k), self.rand(r, k))
        da = self.nan(r, k, dtype=torch.float32)
        dx = self.nan(m, k)
        twice = self.nan(m, r, dtype=torch.float32)
        da_again = self.nan(r, k, dtype=torch.float32)
        eye = torch.eye(r).to(torch.bfloat16)
        t = Scratch(0, (m, r))
        self.client.matmul_list([
            (dy, b, Scratch.new((m, r)), False, False),       # 0: t
            (t, x, da, True, False, 2.0),                     # 1: dA
            (dy, w, dx, False, False),                        # 2: dx
            (t, a, dx, False, False, 2.0, 1.0),               # 3: dx += s t A
            (dy, b, Scratch.new((m, r)), False, False),       # 4: t again
            (dy, b, Scratch(4, (m, r)), False, False, 1.0, 1.0),  # 5: 2t
            (Scratch(4, (m, r)), eye, twice, False, False),   # 6
            (Scratch(0, (r, m), strides=(1, r)), x, da_again),  # 7: t^T x
        ])
        td = dy.double() @ b.double()
        t_bf16 = td.to(torch.bfloat16).double()  # scratch t is BF16
        self.check(da, 2.0 * t_bf16.T @ x.double())
        self.check(dx, dy.double() @ w.double() + 2.0 * t_bf16 @ a.double())
        self.check(twice, 2.0 * td)
        self.check(da_again, t_bf16.T @ x.double())

    def test_a_transposed_view_of_an_output_is_the_same_bytes(self):
        # A later product reads an earlier one's out through a view with
        # other strides: the client copies their bytes as one.
        x, w = self.rand(16, 8), self.rand(12, 8)
        h = self.nan(16, 12)
        out = self.nan(12, 12)
        self.client.matmul_list([
            (x, w, h, False, True),
            (h.T, h, out, False, False),
        ])
        hd = (x.double() @ w.double().T).to(torch.bfloat16).double()
        self.check(out, hd.T @ hd)

    def test_shared_tensors_are_used_in_place(self):
        x = self.client.shared_tensor((20, 12))
        x.copy_(self.rand(20, 12))
        w = self.rand(9, 12)
        y = self.client.shared_tensor((20, 9))
        z = self.nan(20, 20, dtype=torch.float32)
        self.client.matmul_list([(x, w, y, False, True),
                                 (y, y, z, False, True)])
        self.check(y, x.double() @ w.double().T)
        self.check(z, y.double() @ y.double().T)

    def test_matmul_list_of_the_default_client(self):
        a, b = self.rand(8, 8), self.rand(8, 8)
        out = self.nan(8, 8)
        matmul_client.matmul_list([(a, b, out)], target=self.target)
        self.check(out, a.double() @ b.double())

    # -- errors ---------------------------------------------------------------

    def test_too_long_a_list_is_refused(self):
        limit = self.client.server_info().limits.max_list_products
        self.assertGreater(limit, 0)
        a = self.rand(4, 4)
        products = [(a, a, self.nan(4, 4)) for _ in range(limit + 1)]
        with self.assertRaises(MatmulError) as caught:
            self.client.matmul_list(products)
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertRegex(caught.exception.details,
                         f"{limit + 1} products; at most {limit}")

    def test_reading_a_later_products_scratch_is_refused(self):
        a = self.rand(4, 4)
        with self.assertRaises(MatmulError) as caught:
            self.client.matmul_list([
                (a, a, self.nan(4, 4)),
                (Scratch(2, (4, 4)), a, self.nan(4, 4)),
                (a, a, Scratch.new((4, 4))),
            ])
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertRegex(caught.exception.details,
                         "^product 1: A: .*scratch of product 2")

    def test_client_side_errors(self):
        a = self.rand(4, 4)
        with self.assertRaisesRegex(ValueError, "at least one product"):
            self.client.matmul_list([])
        with self.assertRaisesRegex(TypeError, "product 0: b: expected a "
                                    "torch tensor, a SharedWeight or a "
                                    "Scratch"):
            self.client.matmul_list([(a, [1.0], self.nan(4, 4))])
        with self.assertRaisesRegex(ValueError, "product 1: a: Scratch.new"):
            self.client.matmul_list([(a, a, self.nan(4, 4)),
                                     (Scratch.new((4, 4)), a,
                                      self.nan(4, 4))])
        with self.assertRaisesRegex(ValueError, "dtype torch.float64"):
            self.client.matmul_list([(a.double(), a, self.nan(4, 4))])


class LoraTest(unittest.TestCase):
    """lora_linear / lora_linears / LoraLinear on the daemon."""

    @classmethod
    def setUpClass(cls):
        ProductListTest.setUpClass.__func__(cls)
        import matmul_client.lora
        import matmul_client.nn
        cls.lora, cls.mc_nn = matmul_client.lora, matmul_client.nn

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop_cpu_daemon(cls)

    def setUp(self):
        torch.manual_seed(99)

    def counting(self):
        """The client, counting its matmul_list calls in self.lists (from
        0 at each call)."""
        self.lists = 0
        if "matmul_list" in vars(self.client):
            return self.client
        real = self.client.matmul_list

        def count(*args, **kwargs):
            self.lists += 1
            return real(*args, **kwargs)

        self.client.matmul_list = count
        self.addCleanup(lambda: delattr(self.client, "matmul_list"))
        return self.client

    def test_lora_linear_forward_and_gradients_agree_with_fp64(self):
        for with_bias in (False, True):
            with self.subTest(bias=with_bias):
                x = (torch.rand(3, 10, 24) * 2 - 1).to(torch.bfloat16)
                x.requires_grad_(True)
                w = ((torch.rand(40, 24) * 2 - 1) * 0.2).to(torch.bfloat16)
                bias = (torch.rand(40) - 0.5).to(torch.bfloat16) \
                    if with_bias else None
                a = torch.nn.Parameter(torch.rand(4, 24) - 0.5)
                b = torch.nn.Parameter(torch.rand(40, 4) - 0.5)
                client = self.counting()
                y = self.lora.lora_linear(x, w, a, b, 2.0, bias=bias,
                                          client=client)
                self.assertEqual(self.lists, 1)
                self.assertEqual(y.dtype, torch.bfloat16)
                grad = torch.rand(3, 10, 40) - 0.5
                y.backward(grad.to(torch.bfloat16))
                self.assertEqual(self.lists, 2)  # one list each way
                self.assertEqual(a.grad.dtype, torch.float32)
                self.assertEqual(b.grad.dtype, torch.float32)
                xd, ad, bd = (x.detach().double().requires_grad_(True),
                              a.detach().double().requires_grad_(True),
                              b.detach().double().requires_grad_(True))
                want = xd @ w.double().T + 2.0 * (xd @ ad.T) @ bd.T
                if bias is not None:
                    want = want + bias.double()
                want.backward(grad.to(torch.bfloat16).double())
                self.assertLess(relative_error(y, want), 1e-2)
                self.assertLess(relative_error(x.grad, xd.grad), 2e-2)
                self.assertLess(relative_error(a.grad, ad.grad), 2e-2)
                self.assertLess(relative_error(b.grad, bd.grad), 2e-2)

    def test_lora_linears_share_one_list_each_way(self):
        x = ((torch.rand(16, 24) * 2 - 1).to(torch.bfloat16)
             .requires_grad_(True))
        params = []
        for _ in range(2):
            params.append((((torch.rand(32, 24) - 0.5) * 0.3).to(
                torch.bfloat16),
                torch.nn.Parameter(torch.rand(4, 24) - 0.5),
                torch.nn.Parameter(torch.rand(32, 4) - 0.5)))
        client = self.counting()
        g, u = self.lora.lora_linears(x, params, [2.0, 0.5], client=client)
        (g.float() * u.float()).sum().backward()
        self.assertEqual(self.lists, 2)
        xd = x.detach().double().requires_grad_(True)
        refs = [(w.double(), a.detach().double().requires_grad_(True),
                 b.detach().double().requires_grad_(True))
                for w, a, b in params]
        outs = [xd @ w.T + s * (xd @ a.T) @ b.T
                for (w, a, b), s in zip(refs, (2.0, 0.5))]
        # the product's gradient, as BF16 outputs give it
        gd, ud = (outs[0].to(torch.bfloat16).double(),
                  outs[1].to(torch.bfloat16).double())
        torch.autograd.backward(outs, [ud, gd])
        self.assertLess(relative_error(g, outs[0]), 1e-2)
        self.assertLess(relative_error(u, outs[1]), 1e-2)
        self.assertLess(relative_error(x.grad, xd.grad), 2e-2)
        for (_, a, b), (_, ad, bd) in zip(params, refs):
            self.assertLess(relative_error(a.grad, ad.grad), 2e-2)
            self.assertLess(relative_error(b.grad, bd.grad), 2e-2)

    def test_lora_linear_module_trains_as_a_peft_style_one(self):
        torch.manual_seed(7)
        base = torch.nn.Linear(24, 32, dtype=torch.bfloat16)
        ours = self.mc_nn.LoraLinear.from_linear(base, r=4, alpha=8,
                                                 target=self.target)
        self.assertFalse(base.weight.requires_grad)
        self.assertEqual(ours.scale, 2.0)
        self.assertEqual(float(ours.lora_B.abs().sum()), 0.0)
        bound = 1 / math.sqrt(24)  # kaiming_uniform_(a=sqrt(5))
        self.assertLessEqual(float(ours.lora_A.abs().max()), bound)
        # the local reference: PEFT's forward, adapters cast as autocast
        a_ref = torch.nn.Parameter(ours.lora_A.detach().clone())
        b_ref = torch.nn.Parameter(ours.lora_B.detach().clone())

        def local(x):
            lora = torch.nn.functional.linear(
                torch.nn.functional.linear(x, a_ref.to(torch.bfloat16)),
                b_ref.to(torch.bfloat16))
            return base(x) + lora * 2.0

        opt_ours = torch.optim.AdamW([ours.lora_A, ours.lora_B], lr=1e-2)
        opt_ref = torch.optim.AdamW([a_ref, b_ref], lr=1e-2)
        x = (torch.rand(20, 24) * 2 - 1).to(torch.bfloat16)
        target = torch.rand(20, 32) - 0.5
        for step in range(2):
            for module, opt in ((ours, opt_ours), (local, opt_ref)):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(module(x).float(), target)
                loss.backward()
                opt.step()
                if module is ours:
                    loss_ours = loss.item()
                else:
                    loss_ref = loss.item()
            with self.subTest(step=step):
                self.assertLess(abs(loss_ours - loss_ref) / loss_ref, 1e-2)
        self.assertLess(relative_error(ours.lora_A.detach(), a_ref.detach()),
                        1e-2)
        self.assertLess(relative_error(ours.lora_B.detach(), b_ref.detach()),
                        1e-2)

    def test_lora_linear_op(self):
        import matmul_client.torch_ops as torch_ops
        x = (torch.rand(2, 6, 16) - 0.5).to(torch.bfloat16)
        w = (torch.rand(24, 16) - 0.5).to(torch.bfloat16)
        a, b = torch.rand(4, 16) - 0.5, torch.rand(24, 4) - 0.5
        bias = (torch.rand(24) - 0.5).to(torch.bfloat16)
        want = (x.double() @ w.double().T + bias.double() +
                1.5 * (x.double() @ a.double().T) @ b.double().T)
        y = torch.ops.matmul_client.lora_linear(x, w, a, b, 1.5, bias,
                                                self.target)
        self.assertLess(relative_error(y, want), 1e-2)
        fake = torch.ops.matmul_client.lora_linear(
            x.to("meta"), w.to("meta"), a.to("meta"), b.to("meta"), 1.5,
            bias.to("meta"), self.target)
        self.assertEqual(fake.shape, y.shape)
        self.assertEqual(fake.dtype, torch.bfloat16)
        # Gradients through the op where torch registers them, else
        # through the autograd.Function (torch_ops.lora_linear picks).
        a_param = torch.nn.Parameter(a.clone())
        b_param = torch.nn.Parameter(b.clone())
        y = torch_ops.lora_linear(x, w, a_param, b_param, 1.5, bias,
                                  self.target)
        y.float().sum().backward()
        ad = a.double().requires_grad_(True)
        bd = b.double().requires_grad_(True)
        (x.double() @ w.double().T + 1.5 * (x.double() @ ad.T) @ bd.T).sum(
        ).backward()
        self.assertLess(relative_error(a_param.grad, ad.grad), 2e-2)
        self.assertLess(relative_error(b_param.grad, bd.grad), 2e-2)

    def test_lora_linears_of_modules(self):
        gate = self.mc_nn.LoraLinear(torch.nn.Linear(
            16, 24, bias=False, dtype=torch.bfloat16), 4, 8,
            target=self.target)
        up = self.mc_nn.LoraLinear(torch.nn.Linear(
            16, 24, bias=False, dtype=torch.bfloat16), 4, 4,
            target=self.target)
        with torch.no_grad():
            gate.lora_B.normal_()
            up.lora_B.normal_()
        x = (torch.rand(8, 16) - 0.5).to(torch.bfloat16)
        group = self.mc_nn.LoraLinearGroup((gate, up))
        g, u = group(x)
        self.assertLess(relative_error(g, gate(x)), 1e-2)
        self.assertLess(relative_error(u, up(x)), 1e-2)
        self.assertEqual(len(list(group.parameters())), 6)


if __name__ == "__main__":
    unittest.main()
