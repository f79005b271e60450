"""matmul_client.SharedWeight against a CUDA daemon: a weight this process
shares, read by products of another process (spawned) through the
daemon, each checked against FP64 torch; that process may not write to it;
two processes' products over it in one list with their own adapters; and
once the owner closes it, the other process's next product raises
MatmulError NOT_FOUND. Outputs start as NaN, so a product that did not
write them fails.

    MATMUL_TARGET=unix:/path/matmul.sock python3 -m unittest \\
        discover -s tests/gpu/checks/python -p 'test_shared_weight*'
"""

import multiprocessing
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402


def _error(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def _reader(target, handle, commands, results):
    """Another process: opens the shared weight and runs what it is told."""
    import torch

    import matmul_client
    client = matmul_client.Client(target)
    weight = matmul_client.SharedWeight.open(handle, client=client)
    generator = torch.Generator(device="cuda").manual_seed(os.getpid())
    for command in iter(commands.get, None):
        try:
            if command == "product":
                x = torch.randn(37, weight.shape[1], device="cuda",
                                generator=generator).to(torch.bfloat16)
                out = torch.full((37, weight.shape[0]), float("nan"),
                                 device="cuda", dtype=torch.bfloat16)
                client.matmul(x, weight, out=out, transpose_b=True)
                client.synchronize()  # raises what the daemon refused
                torch.cuda.synchronize()
                results.put(("product", x.cpu(), out.cpu()))
            elif command == "lora":
                # The shared base and this process's own adapter, in one
                # list: out = x W^T + (x A^T) B^T.
                r = 8
                x = torch.randn(29, weight.shape[1], device="cuda",
                                generator=generator).to(torch.bfloat16)
                a = torch.randn(r, weight.shape[1], device="cuda",
                                generator=generator).to(torch.bfloat16)
                b = torch.randn(weight.shape[0], r, device="cuda",
                                generator=generator).to(torch.bfloat16)
                xa = torch.full((29, r), float("nan"), device="cuda",
                                dtype=torch.bfloat16)
                out = torch.full((29, weight.shape[0]), float("nan"),
                                 device="cuda", dtype=torch.bfloat16)
                P = matmul_client.Product
                client.matmul_list([
                    P(x, weight, out, transpose_b=True),
                    P(x, a, xa, transpose_b=True),
                    P(xa, b, out, transpose_b=True, beta=1.0)])
                client.synchronize()
                torch.cuda.synchronize()
                results.put(("lora", x.cpu(), a.cpu(), b.cpu(), out.cpu()))
            elif command == "write":
                x = torch.randn(4, weight.shape[0], device="cuda",
                                generator=generator).to(torch.bfloat16)
                try:
                    client.matmul_list([matmul_client.Product(
                        x, x, weight, transpose_b=True)])
                    results.put(("write", "accepted"))
                except (matmul_client.MatmulError, ValueError) as error:
                    results.put(("write", type(error).__name__))
        except matmul_client.MatmulError as error:
            results.put(("error", error.code.name))
    client.close()


class SharedWeightTest(unittest.TestCase):
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

    def test_another_process_reads_the_weight_until_the_owner_closes_it(self):
        w = torch.randn(96, 160, device="cuda").to(torch.bfloat16)
        shared = matmul_client.SharedWeight(w, client=self.client)
        self.assertTrue(shared.owner)
        context = multiprocessing.get_context("spawn")
        commands, results = context.Queue(), context.Queue()
        reader = context.Process(target=_reader, args=(
            self.target, shared.handle, commands, results))
        reader.start()
        try:
            reference = w.double().cpu()
            for _ in range(3):
                commands.put("product")
                kind, x, out = results.get(timeout=120)
                self.assertEqual(kind, "product")
                self.assertLess(_error(out, x.double() @ reference.T), 1e-2)
            commands.put("lora")
            kind, x, a, b, out = results.get(timeout=120)
            self.assertEqual(kind, "lora")
            want = x.double() @ reference.T + \
                (x.double() @ a.double().T).to(torch.bfloat16).double() @ \
                b.double().T
            self.assertLess(_error(out, want), 1e-2)
            commands.put("write")
            self.assertEqual(results.get(timeout=120), ("write", "ValueError"))

            shared.close()
            commands.put("product")
            self.assertEqual(results.get(timeout=120), ("error", "NOT_FOUND"))
        finally:
            commands.put(None)
            reader.join(timeout=60)
        self.assertEqual(reader.exitcode, 0)

    def test_bad_use_is_refused_here(self):
        with self.assertRaises(ValueError):
            matmul_client.SharedWeight(torch.zeros(4, 4), client=self.client)
        w = torch.randn(8, 8, device="cuda").to(torch.bfloat16)
        with self.assertRaises(ValueError):
            matmul_client.SharedWeight(w, access="world", client=self.client)
        with matmul_client.SharedWeight(w, client=self.client) as shared:
            other = matmul_client.Client(self.target)
            try:
                with self.assertRaises(ValueError):  # not this client's
                    other.matmul(w, shared)
            finally:
                other.close()
            with self.assertRaises(ValueError):  # read as b only
                self.client.matmul(shared, w)
        with self.assertRaises(ValueError):  # closed
            self.client.matmul(w, shared)


if __name__ == "__main__":
    unittest.main()
