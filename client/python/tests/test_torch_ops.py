"""The custom operators (matmul_client.torch_ops) and matmul_client.nn.Linear
against a real matmul-server (CPU backend) on a temporary unix socket, with
CPU tensors: results against torch's own (FP32 reference, relative norm
error < 1e-2, outputs poisoned with NaN first), the fake implementations,
gradients or the clear refusal of them, torch.compile where this torch has
it, and the errors. Needs torch (Debian: python3-torch); skips without it
unless MATMUL_REQUIRE_TORCH=1 (ctest matmul_python_torch_test).

    MATMUL_SERVER=build/server/matmul-server python3 -m unittest \\
        discover -s client/python/tests -p 'test_torch*'

torch is imported in setUpClass, not at import: test_matmul_client.py
checks that the package alone does not import it.
"""

import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import matmul_client  # noqa: E402
from cpu_daemon import start_cpu_daemon, stop_cpu_daemon  # noqa: E402

torch = None  # set by setUpClass
torch_ops = None
mc_nn = None


def relative_error(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


class PoisonedOutputs:
    """While active, every torch.empty returns NaNs, so a result element the
    daemon did not write cannot pass for a right one (it would otherwise
    often hold the previous, equal result freed just before)."""

    def __enter__(self):
        real_empty = torch.empty

        def poisoned(*args, **kwargs):
            t = real_empty(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t

        self._patch = mock.patch.object(torch, "empty", poisoned)
        self._patch.start()
        return self

    def __exit__(self, *exc):
        self._patch.stop()


class TorchOpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global torch, torch_ops, mc_nn
        try:
            import torch as torch_module
        except ImportError:
            if os.environ.get("MATMUL_REQUIRE_TORCH") == "1":
                raise  # the ctest that exists for these tests
            raise unittest.SkipTest("torch is not installed (Debian: "
                                    "python3-torch)") from None
        torch = torch_module
        import matmul_client.nn
        import matmul_client.torch_ops
        torch_ops, mc_nn = matmul_client.torch_ops, matmul_client.nn
        start_cpu_daemon(cls)

    @classmethod
    def tearDownClass(cls):
        stop_cpu_daemon(cls)

    def setUp(self):
        self.generator = torch.Generator().manual_seed(1234)

    def rand(self, *shape, dtype=None):
        t = torch.rand(*shape, generator=self.generator) * 2 - 1
        return t.to(dtype or torch.bfloat16)

    def check(self, got, want, limit=1e-2):
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        self.assertFalse(torch.isnan(got).any().item(), "NaNs left in out")
        self.assertLess(relative_error(got, want), limit)

    # -- the ops ------------------------------------------------------------

    def test_matmul_op_agrees_with_torch(self):
        cases = [  # (a shape, b shape, transpose_a, transpose_b, alpha)
            ((37, 29), (29, 41), False, False, 1.0),
            ((64, 48), (80, 48), False, True, 1.0),  # x @ W.T
            ((48, 64), (48, 80), True, False, -0.5),
            ((33, 17), (9, 33), True, True, 2.0),
            ((3, 12, 20), (3, 20, 7), False, False, 1.0),
            ((3, 12, 20), (11, 20), False, True, 1.0),  # b broadcast
        ]
        for a_shape, b_shape, ta, tb, alpha in cases:
            with self.subTest(a=a_shape, b=b_shape, ta=ta, tb=tb):
                a, b = self.rand(*a_shape), self.rand(*b_shape)
                with PoisonedOutputs():
                    got = torch.ops.matmul_client.matmul(
                        a, b, ta, tb, alpha, None, self.target)
                af = a.float().transpose(-1, -2) if ta else a.float()
                bf = b.float().transpose(-1, -2) if tb else b.float()
                self.assertEqual(got.dtype, torch.bfloat16)
                self.check(got, alpha * (af @ bf))

    def test_matmul_op_fp32_result_and_strided_inputs(self):
        base = self.rand(40, 70)
        a = base[3:35, 5:65]  # a view: row stride 70, offset
        b = self.rand(60, 90)[:, ::2]  # column stride 2
        with PoisonedOutputs():
            got = torch_ops.matmul(a, b, out_dtype=torch.float32,
                                   target=self.target)
        self.assertEqual(got.dtype, torch.float32)
        self.check(got, a.float() @ b.float(), limit=1e-4)

    def test_linear_op_with_and_without_bias(self):
        weight, bias = self.rand(24, 40), self.rand(24)
        for x_shape in ((16, 40), (2, 5, 40), (40,)):
            for b in (None, bias):
                with self.subTest(x=x_shape, bias=b is not None):
                    x = self.rand(*x_shape)
                    with PoisonedOutputs():
                        got = torch_ops.linear(x, weight, b,
                                               target=self.target)
                    want = torch.nn.functional.linear(
                        x.float(), weight.float(),
                        None if b is None else b.float())
                    self.check(got, want)

    def test_linear_op_adds_the_bias_before_rounding(self):
        # FP32 out: the bias is in the daemon's FP32 sum, not added after a
        # BF16 rounding, so the error is FP32-sized.
        x, weight, bias = self.rand(8, 64), self.rand(16, 64), self.rand(16)
        got = torch_ops.linear(x, weight, bias, out_dtype=torch.float32,
                               target=self.target)
        want = torch.nn.functional.linear(x.float(), weight.float(),
                                          bias.float())
        self.check(got, want, limit=1e-5)

    def test_empty_products_need_no_daemon(self):
        # K = 0 is a sum of nothing: zeros (plus the bias), not a call to a
        # daemon (there is none at this target).
        nowhere = "unix:/nonexistent/matmul.sock"
        with PoisonedOutputs():
            got = torch_ops.matmul(self.rand(4, 0), self.rand(0, 3),
                                   target=nowhere)
        self.assertTrue(torch.equal(got, torch.zeros(4, 3,
                                                     dtype=torch.bfloat16)))
        bias = self.rand(5)
        with PoisonedOutputs():
            got = torch_ops.linear(self.rand(2, 0), self.rand(5, 0), bias,
                                   target=nowhere)
        self.assertTrue(torch.equal(got, bias.expand(2, 5)))
        got = torch_ops.linear(self.rand(0, 7), self.rand(5, 7),
                               target=nowhere)
        self.assertEqual(tuple(got.shape), (0, 5))

    def test_fake_implementations_need_no_daemon(self):
        meta = dict(device="meta", dtype=torch.bfloat16)
        a = torch.empty(7, 3, 5, **meta)
        b = torch.empty(9, 5, **meta)
        out = torch.ops.matmul_client.matmul(a, b, False, True, 1.0,
                                             torch.float32, "unix:/nowhere")
        self.assertEqual((out.device.type, tuple(out.shape), out.dtype),
                         ("meta", (7, 3, 9), torch.float32))
        x, w = torch.empty(2, 4, 6, **meta), torch.empty(10, 6, **meta)
        out = torch.ops.matmul_client.linear(x, w, None, None, "unix:/nowhere")
        self.assertEqual((tuple(out.shape), out.dtype),
                         ((2, 4, 10), torch.bfloat16))

    def test_ops_are_tagged_unsafe_for_cuda_graphs(self):
        unsafe = getattr(getattr(torch, "Tag", None), "cudagraph_unsafe",
                         None)
        if unsafe is None:
            self.skipTest(f"torch {torch.__version__} has no "
                          "Tag.cudagraph_unsafe")
        self.assertTrue(torch_ops.SUPPORT["cudagraph_unsafe_tag"])
        for op in (torch.ops.matmul_client.matmul,
                   torch.ops.matmul_client.linear):
            self.assertIn(unsafe, op.default.tags)

    def test_errors_are_clear(self):
        a, b = self.rand(4, 6), self.rand(5, 6)
        with self.assertRaisesRegex(Exception, "BF16 inputs"):
            torch_ops.matmul(a.float(), b, transpose_b=True,
                             target=self.target)
        with self.assertRaisesRegex(Exception, "inner dimensions disagree"):
            torch_ops.matmul(a, b, target=self.target)
        with self.assertRaisesRegex(Exception, "batch sizes 2 and 3 differ"):
            torch_ops.matmul(self.rand(2, 4, 6), self.rand(3, 6, 5),
                             target=self.target)
        with self.assertRaisesRegex(Exception, "expected 6 input features"):
            torch_ops.linear(self.rand(3, 7), b, target=self.target)
        with self.assertRaisesRegex(Exception, "bias is \\[4\\]"):
            torch_ops.linear(a, b, self.rand(4), target=self.target)
        with self.assertRaisesRegex(Exception, "out_dtype torch.float16"):
            torch_ops.matmul(a, b, transpose_b=True, out_dtype=torch.float16,
                             target=self.target)
        with self.assertRaisesRegex(TypeError, "BF16 weights"):
            mc_nn.Linear(4, 4, dtype=torch.float16, target=self.target)
        with self.assertRaisesRegex(TypeError, "takes a torch.nn.Linear"):
            mc_nn.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))

    def test_gradients_or_a_clear_refusal(self):
        x = self.rand(6, 10).requires_grad_()
        weight = self.rand(12, 10).requires_grad_()
        bias = self.rand(12).requires_grad_()
        if not torch_ops.SUPPORT["autograd"]:
            with self.assertRaisesRegex(RuntimeError, "has no backward"):
                torch_ops.linear(x, weight, bias, target=self.target)
            with torch.no_grad():  # inference needs no backward
                torch_ops.linear(x, weight, bias, target=self.target)
            return
        y = torch_ops.linear(x, weight, bias, target=self.target)
        upstream = self.rand(6, 12)
        (y.float() * upstream.float()).sum().backward()
        xf, wf = x.detach().float(), weight.detach().float()
        self.check(x.grad, upstream.float() @ wf)
        self.check(weight.grad, upstream.float().T @ xf)
        self.check(bias.grad, upstream.float().sum(0))
        # The general op, every transpose combination.
        for ta in (False, True):
            for tb in (False, True):
                with self.subTest(ta=ta, tb=tb):
                    a = self.rand(*((9, 5) if ta else (5, 9)))
                    b = self.rand(*((7, 9) if tb else (9, 7)))
                    a.requires_grad_()
                    b.requires_grad_()
                    out = torch_ops.matmul(a, b, ta, tb, 0.5,
                                           target=self.target)
                    g = self.rand(5, 7)
                    (out.float() * g.float()).sum().backward()
                    af = a.detach().float().requires_grad_()
                    bf = b.detach().float().requires_grad_()
                    ref = 0.5 * ((af.T if ta else af) @ (bf.T if tb else bf))
                    (ref * g.float()).sum().backward()
                    self.check(a.grad, af.grad)
                    self.check(b.grad, bf.grad)

    def test_compile_keeps_one_opaque_op(self):
        if not torch_ops.SUPPORT["compile"]:
            self.skipTest(f"torch {torch.__version__} has no torch.compile")
        graphs = []

        def recording_backend(graph_module, example_inputs):
            graphs.append(graph_module)
            return graph_module.forward

        layer = mc_nn.Linear(32, 16, target=self.target)

        def forward(x):
            return torch.relu(layer(x)) * 2

        compiled = torch.compile(forward, backend=recording_backend,
                                 fullgraph=True)
        x = self.rand(8, 32)
        with torch.no_grad():
            got = compiled(x)
            want = forward(x)
        self.check(got, want.float())
        ops = [node.target for graph in graphs for node in graph.graph.nodes
               if node.op == "call_function"]
        linear = torch.ops.matmul_client.linear
        self.assertEqual(
            sum(1 for t in ops if t in (linear, linear.default)), 1, ops)

    # -- nn.Linear ----------------------------------------------------------

    def test_linear_module_agrees_with_torch_nn_linear(self):
        layer = mc_nn.Linear(40, 24, target=self.target)
        self.assertEqual(layer.weight.dtype, torch.bfloat16)
        self.assertIn("target=", repr(layer))
        reference = torch.nn.Linear(40, 24, dtype=torch.float32)
        with torch.no_grad():
            reference.weight.copy_(layer.weight.float())
            reference.bias.copy_(layer.bias.float())
            for dtype in (torch.bfloat16, torch.float32):
                with self.subTest(dtype=dtype):
                    x = self.rand(3, 7, 40, dtype=dtype)
                    with PoisonedOutputs():
                        got = layer(x)
                    self.assertEqual(got.dtype, dtype)
                    self.check(got, reference(x.float()))

    def test_from_linear_replaces_a_layer(self):
        original = torch.nn.Linear(48, 20, bias=False)
        original.weight.requires_grad_(False)
        wrapped = mc_nn.Linear.from_linear(original, target=self.target)
        self.assertIsNone(wrapped.bias)
        self.assertFalse(wrapped.weight.requires_grad)
        self.assertEqual((wrapped.in_features, wrapped.out_features),
                         (48, 20))
        x = self.rand(5, 48, dtype=torch.float32)
        with torch.no_grad():
            self.check(wrapped(x), original(x))
        # The state_dict is torch.nn.Linear's (loads into one).
        plain = torch.nn.Linear(48, 20, bias=False, dtype=torch.bfloat16)
        plain.load_state_dict(wrapped.state_dict())
        self.assertTrue(torch.equal(plain.weight, wrapped.weight))

    def test_submodules_load_lazily_by_attribute(self):
        self.assertIs(matmul_client.nn, mc_nn)
        self.assertIs(matmul_client.torch_ops, torch_ops)
        with self.assertRaises(AttributeError):
            matmul_client.no_such_thing  # noqa: B018


if __name__ == "__main__":
    unittest.main()
