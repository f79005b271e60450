"""Product lists run in this process with torch ops, for comparison with
the daemon: LocalLists().matmul_list(products) runs the same products, in
the same order and with the same scratch, as Client.matmul_list would, each
one torch.addmm into its out (BF16 products; an FP32 out gets the BF16
product added in FP32). Passed as `client=` to matmul_client.lora's
functions it gives the local time of the list algorithm (a benchmark's
ceiling) and a reference for tests. Imports torch.
"""

import torch

from ._product_list import Product, Scratch


def _operand(value, scratch):
    if isinstance(value, Scratch):
        buffer = scratch[value.product]
        element = buffer.element_size()
        if value.offset_bytes % element:
            raise ValueError(f"scratch offset {value.offset_bytes} is not a "
                             "multiple of the element size")
        return buffer.as_strided(value.shape, value.strides,
                                 buffer.storage_offset() +
                                 value.offset_bytes // element)
    return value


class LocalLists:
    """A stand-in for Client in matmul_list calls: runs lists locally."""

    _DTYPES = {1: torch.bfloat16, 2: torch.float32}  # DType numbers

    def __init__(self):
        self.lists = 0  # lists run, for counting

    def synchronize(self):
        """Nothing in flight: each list ran when it was called."""

    def close(self):
        pass

    def matmul_list(self, products, stream=None, timeout=None):
        self.lists += 1
        scratch = {}
        for index, product in enumerate(products):
            if len(product) != 7:
                product = Product(*product)
            a, b, out, transpose_a, transpose_b, alpha, beta = product
            if isinstance(out, Scratch) and out.product in (None, index):
                out = scratch[index] = torch.empty(
                    out.shape, dtype=self._DTYPES[out.dtype],
                    device=_device_of(product))
            else:
                out = _operand(out, scratch)
            a, b = _operand(a, scratch), _operand(b, scratch)
            if transpose_a:
                a = a.transpose(-2, -1)
            if transpose_b:
                b = b.transpose(-2, -1)
            if out.dtype == a.dtype and out.dim() == 2:
                out.addmm_(a, b, beta=beta, alpha=alpha)
            else:
                result = torch.matmul(a, b)
                if beta == 0.0:
                    out.copy_(result)
                    if alpha != 1.0:
                        out.mul_(alpha)
                else:
                    if beta != 1.0:
                        out.mul_(beta)
                    out.add_(result, alpha=alpha)


def _device_of(product):
    for value in product[:3]:
        if not isinstance(value, Scratch):
            return value.device
    return None
