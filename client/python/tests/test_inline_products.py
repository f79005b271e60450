"""matmul_client given a TCP target (a daemon elsewhere, or several behind
one name): host products go inline, with the results of the region path
(strides, beta with out, FP32 out, torch tensors), while a shared buffer,
which is a region, goes to the daemon on this host with a warning.

    MATMUL_SERVER=build/server/matmul-server python3 -m unittest \\
        discover -s client/python/tests -p test_inline_products.py
"""

import importlib.util
import os
import random
import subprocess
import sys
import unittest
import warnings

if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import matmul_client  # noqa: E402
from matmul_client import HostTensor  # noqa: E402

from cpu_daemon import start_cpu_daemon, stop_cpu_daemon  # noqa: E402
from test_matmul_client import random_bf16, reference, relative_error  # noqa: E402


# torch CPU tensors over a TCP target: a torch result, and out with beta.
TORCH_PRODUCTS = """
import sys
import torch
import matmul_client
remote, local = sys.argv[1:3]
with matmul_client.Client(remote, local_target=local) as client:
    assert client.transport == "inline", client.transport
    a = torch.randn(12, 20).bfloat16()
    b = torch.randn(16, 20).bfloat16()
    y = client.matmul(a, b, transpose_b=True)
    assert isinstance(y, torch.Tensor), type(y)
    want = a.float() @ b.float().T
    assert ((y.float() - want).norm() / want.norm()).item() < 1e-2
    out = torch.ones(12, 16, dtype=torch.float32)
    client.matmul(a, b, out=out, transpose_b=True, beta=1.0)
    assert ((out - (want + 1)).norm() / want.norm()).item() < 1e-4
"""


class InlineProductsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_cpu_daemon(cls, tcp=True)
        cls.local = cls.target

    @classmethod
    def tearDownClass(cls):
        stop_cpu_daemon(cls)

    def setUp(self):
        self.rng = random.Random(7)
        self.client = matmul_client.Client(self.remote, local_target=self.local)
        self.addCleanup(self.client.close)

    def test_targets_and_transport(self):
        self.assertEqual(self.client.inline_target, self.remote)
        self.assertEqual(self.client.target, self.local)
        self.assertEqual(self.client.transport, "inline")

    def test_host_tensors_inline(self):
        m, n, k = 9, 11, 13
        a = HostTensor(random_bf16(m * k, self.rng), (m, k))
        b = HostTensor(random_bf16(n * k, self.rng), (n, k))
        out = self.client.matmul(a, b, transpose_b=True, out_dtype="fp32")
        self.assertEqual(out.shape, (m, n))
        self.assertLess(relative_error(out.tolist(),
                                       reference(a, b, False, True)), 1e-5)

    def test_strided_out_with_beta(self):
        m, n, k = 5, 6, 7
        a = HostTensor(random_bf16(m * k, self.rng), (m, k))
        b = HostTensor(random_bf16(k * n, self.rng), (k, n))
        # out's rows are 8 elements apart: the two after each row stay.
        data = bytearray(random_bf16(m * 8, self.rng))
        out = HostTensor(data, (m, n), strides=(8, 1))
        before = bytes(data)
        c = HostTensor(before, (m, n), strides=(8, 1))
        want = reference(a, b, False, False, alpha=0.5, beta=2.0, c=c)
        self.client.matmul(a, b, out=out, alpha=0.5, beta=2.0)
        self.assertLess(relative_error(out.tolist(), want), 1e-2)
        for row in range(m):
            gap = slice((row * 8 + n) * 2, (row + 1) * 8 * 2)
            self.assertEqual(data[gap], before[gap], row)

    def test_torch_tensors_inline(self):
        # In a child process: test_matmul_client checks that the package
        # alone never imports torch into this one.
        if importlib.util.find_spec("torch") is None:
            self.skipTest("no torch")
        env = dict(os.environ)
        if not env.get("MATMUL_CLIENT_TEST_INSTALLED"):
            env["PYTHONPATH"] = os.path.join(os.path.dirname(__file__), "..")
        result = subprocess.run(
            [sys.executable, "-c", TORCH_PRODUCTS, self.remote, self.local],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_shared_buffer_goes_to_the_local_daemon(self):
        m, n, k = 4, 3, 8
        b = HostTensor(random_bf16(k * n, self.rng), (k, n))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shared = self.client.shared_buffer(2 * m * k)
        said = [str(w.message) for w in caught]
        self.assertTrue(any("regions stay on their host" in s and self.local in s
                            for s in said), said)
        shared[:] = random_bf16(m * k, self.rng)
        a = HostTensor(shared, (m, k))
        out = self.client.matmul(a, b, out_dtype="fp32")
        self.assertLess(relative_error(out.tolist(),
                                       reference(a, b, False, False)), 1e-5)


if __name__ == "__main__":
    unittest.main()
