"""The custom operators under torch.compile(fullgraph=True) with CUDA
tensors: a small MLP of matmul_client.nn.Linear layers compiled with the
default backend (Inductor) gives torch's results, and its graph holds one
matmul_client::linear node per layer (the op stays opaque: no graph
break, nothing traced into it); with mode="reduce-overhead" (CUDA graphs)
every call still computes afresh. Where torch registers gradients
(torch >= 2.4), a compiled training step's gradients match torch's too.

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/checks/python -p 'test_compile*'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402

torch = None
mc_nn = None
torch_ops = None


class CompileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global torch, mc_nn, torch_ops
        torch, cls.target = gpu_env.require_gpu_daemon()
        if not hasattr(torch, "compile"):
            raise unittest.SkipTest(f"torch {torch.__version__} has no "
                                    "torch.compile")
        import matmul_client.nn
        import matmul_client.torch_ops
        mc_nn, torch_ops = matmul_client.nn, matmul_client.torch_ops

    def setUp(self):
        torch.manual_seed(3)
        torch._dynamo.reset()

    def mlp(self):
        """(daemon MLP, the same MLP as plain torch.nn.Linear in FP32)."""
        layers = [torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 256)]
        plain = torch.nn.Sequential(layers[0], torch.nn.ReLU(),
                                    layers[1]).cuda()
        ours = torch.nn.Sequential(
            mc_nn.Linear.from_linear(plain[0], target=self.target),
            torch.nn.ReLU(),
            mc_nn.Linear.from_linear(plain[2], target=self.target))
        with torch.no_grad():  # the reference uses the BF16-rounded weights
            plain[0].weight.copy_(ours[0].weight.float())
            plain[2].weight.copy_(ours[2].weight.float())
            plain[0].bias.copy_(ours[0].bias.float())
            plain[2].bias.copy_(ours[2].bias.float())
        return ours, plain

    def test_inductor_fullgraph(self):
        ours, plain = self.mlp()
        compiled = torch.compile(ours, fullgraph=True)
        x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            got = compiled(x)
            want = plain(x.float())
        torch.cuda.synchronize()
        self.assertEqual((got.shape, got.dtype),
                         (torch.Size([64, 256]), torch.bfloat16))
        self.assertLess(gpu_env.relative_error(got, want), 1e-2)

    def test_one_opaque_node_per_layer(self):
        ours, _ = self.mlp()
        graphs = []

        def recording_backend(graph_module, example_inputs):
            graphs.append(graph_module)
            return graph_module.forward

        compiled = torch.compile(ours, backend=recording_backend,
                                 fullgraph=True)
        with torch.no_grad():
            compiled(torch.randn(8, 512, device="cuda", dtype=torch.bfloat16))
        linear = torch.ops.matmul_client.linear
        targets = [node.target for g in graphs for node in g.graph.nodes
                   if node.op == "call_function"]
        self.assertEqual(len(graphs), 1)
        self.assertEqual(
            sum(1 for t in targets if t in (linear, linear.default)), 2,
            targets)

    def test_cuda_graphs_leave_the_op_out(self):
        # mode="reduce-overhead" captures CUDA graphs, which cannot hold a
        # product run by the daemon: the ops' cudagraph_unsafe tag keeps
        # them out, so every call, replays included, computes afresh.
        if not torch_ops.SUPPORT["cudagraph_unsafe_tag"]:
            self.skipTest(f"torch {torch.__version__} has no "
                          "Tag.cudagraph_unsafe")
        ours, plain = self.mlp()
        compiled = torch.compile(ours, mode="reduce-overhead", fullgraph=True)
        with torch.no_grad():
            for step in range(4):
                with self.subTest(step=step):
                    x = torch.randn(16, 512, device="cuda",
                                    dtype=torch.bfloat16)
                    got = compiled(x).float()  # a copy: replays reuse outputs
                    want = plain(x.float())
                    torch.cuda.synchronize()
                    self.assertLess(gpu_env.relative_error(got, want), 1e-2)

    def test_compiled_training_step(self):
        if not torch_ops.SUPPORT["autograd"]:
            self.skipTest(f"torch {torch.__version__} lacks "
                          "torch.library.register_autograd")
        ours, plain = self.mlp()
        compiled = torch.compile(ours, fullgraph=True)
        x = torch.randn(32, 512, device="cuda", dtype=torch.bfloat16)
        upstream = torch.randn(32, 256, device="cuda")
        (compiled(x).float() * upstream).sum().backward()
        (plain(x.float()) * upstream).sum().backward()
        for mine, theirs in ((ours[0], plain[0]), (ours[2], plain[2])):
            self.assertLess(gpu_env.relative_error(mine.weight.grad,
                                                   theirs.weight.grad), 2e-2)
            self.assertLess(gpu_env.relative_error(mine.bias.grad,
                                                   theirs.bias.grad), 2e-2)


if __name__ == "__main__":
    unittest.main()
