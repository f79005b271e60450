"""The native fast path of stream-ordered CUDA products
(matmul_client._native.CudaFastPath) on torch's own tensors: CPU tensors
stand in for CUDA ones, in a client cache filled by hand, and the request
the fast path queues for views of one storage (storage offsets, strided
and broadcast operands, torch.Size shapes, the storage's address derived
from data_ptr()) is the one the Python path's operands describe.
test_cuda_fast_path.py covers the rest with a stand-in torch.

Needs torch and the extension; skipped without either. torch is imported
in setUpClass, not at import (test_matmul_client.py checks that the
package alone does not import it).

    python3 -m unittest discover -s client/python/tests -p 'test_torch_fast*'
"""

import os
import sys
import unittest
from unittest import mock

if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from test_cuda_fast_path import SESSION, RecordingRing  # noqa: E402

import matmul_client  # noqa: E402
from matmul_client._operands import _Operand  # noqa: E402

real_torch = None  # set by setUpClass


class TorchLayoutTest(unittest.TestCase):
    REGION_OFFSET = 128  # where the storage starts in its region

    @classmethod
    def setUpClass(cls):
        global real_torch
        try:
            import torch
        except ImportError:
            raise unittest.SkipTest("no torch") from None
        real_torch = torch

    def setUp(self):
        self.client = matmul_client.Client("unix:/nonexistent/matmul.sock")
        self.addCleanup(self.client.close)
        native = self.client._native
        if native is None or not hasattr(native, "CudaFastPath"):
            self.skipTest("matmul_client._native (with CudaFastPath) is not "
                          "built")
        self.native = native
        self.ring = RecordingRing(native)
        self.client._session_id = SESSION
        self.client._products = self.ring
        self.client._cuda_buffer_id = lambda address: 7
        self.client._cuda_next_freed_check[0] = float("inf")
        self.bf16 = real_torch.zeros(3 * 64 * 64, dtype=real_torch.bfloat16)
        self.fp32 = real_torch.zeros(3 * 16 * 24, dtype=real_torch.float32)
        for i, base in enumerate((self.bf16, self.fp32)):
            self.client._cuda_storages[self.storage_address(base)] = (
                f"r{i}", self.REGION_OFFSET, 1 << 20, 0, 7)
        path = self.client._new_cuda_fast_path()
        self.client._cuda_fast_path = path
        self.client._cuda_fast_matmul = path.matmul

    @staticmethod
    def storage_address(t):
        storage = getattr(t, "untyped_storage", None) or t.storage
        return storage().data_ptr()

    def expected(self, a, b, out, transpose_a, transpose_b, alpha, beta):
        """The request as the Python path describes these operands."""
        operands = []
        for name, t in (("a", a), ("b", b), ("out", out)):
            op = _Operand(t, name)
            base = self.bf16 if t.dtype == real_torch.bfloat16 else self.fp32
            self.assertEqual(self.storage_address(t),
                             self.storage_address(base))
            operands.append(
                ("r0" if base is self.bf16 else "r1",
                 self.REGION_OFFSET + t.storage_offset() * t.element_size(),
                 op.shape, op.strides, op.dtype))
        spec = tuple(operands) + (transpose_a, transpose_b, alpha, beta,
                                  operands[2][4])
        return self.native.product_request(spec, SESSION)

    def test_views_of_one_storage(self):
        base, side = self.bf16, mock.Mock(cuda_stream=0x5C)
        a = base[64:64 + 16 * 32].view(16, 32)
        b = base[4096:4096 + 32 * 24].view(32, 24).t()  # [24, 32], strided
        c = base[8192:8192 + 16 * 24].view(16, 24)
        a3 = base[:3 * 16 * 32].view(3, 16, 32)
        b3 = base[4096:4096 + 32 * 24].view(32, 24).expand(3, 32, 24)
        c3 = self.fp32.view(3, 16, 24)
        cases = [(a, b, c, False, True, 1.0, 0.0),
                 (a, b, c, False, True, 0.5, 2.0),
                 (a3, b3, c3, False, False, 1.0, 1.0),
                 (a.t(), b.t(), c, True, False, 1.0, 0.0)]
        for a, b, out, transpose_a, transpose_b, alpha, beta in cases:
            with self.subTest(a=a.shape, b=b.shape, strides=b.stride()):
                queued = len(self.ring.queued)
                self.assertIs(self.client.matmul(
                    a, b, out=out, transpose_a=transpose_a,
                    transpose_b=transpose_b, alpha=alpha, beta=beta,
                    stream=side), out)
                self.assertEqual(len(self.ring.queued), queued + 1)
                path, request, stream, timeout, _ = self.ring.queued[-1]
                self.assertEqual((path, stream), ("native", 0x5C))
                self.assertEqual(request, self.expected(
                    a, b, out, transpose_a, transpose_b, alpha, beta))
        self.assertEqual(self.client._cuda_fast_path.misses, 0)


if __name__ == "__main__":
    unittest.main()
