"""A product of host operands sent inline (their bytes in the request, C's
in the response): how a Client whose target names daemons elsewhere, or
several of them, sends products, since regions never leave their host."""

import ctypes

from ._proto import matmul_pb2 as pb
from ._tensors import _ELEMENT_BYTES, BF16, HostTensor, _contiguous_strides


def _inline_tensor(operand):
    """The pb.Tensor carrying `operand`'s bytes (its strided extent)."""
    if operand.torch:
        data = ctypes.string_at(operand.address(), operand.nbytes)
    else:
        data = bytes(memoryview(operand.value.data).cast("B")[:operand.nbytes])
    t = pb.Tensor(dtype=operand.dtype, shape=operand.shape, inline_data=data)
    if tuple(operand.strides) != _contiguous_strides(operand.shape):
        t.strides.extend(operand.strides)
    return t


class _InlineProduct:
    """The request of one inline product; finish() turns the answer into
    the caller's result, as _HostProduct does for region products."""

    def __init__(self, a_op, b_op, out_op, shape, options, torch_result):
        transpose_a, transpose_b, alpha, beta, dtype = options
        self.request = pb.MatmulRequest(transpose_a=transpose_a,
                                        transpose_b=transpose_b, alpha=alpha,
                                        beta=beta, out_dtype=dtype,
                                        a=_inline_tensor(a_op),
                                        b=_inline_tensor(b_op))
        if out_op is not None and beta != 0.0:
            self.request.c.CopyFrom(_inline_tensor(out_op))
        self._out_op = out_op
        self._shape = shape
        self._dtype = dtype
        self._torch_result = torch_result

    def synchronize_inputs(self):
        """Nothing to wait for: the bytes are in the request."""

    def finish(self, response):
        """out: the caller's, filled in, or a new tensor (torch for torch
        inputs, else a HostTensor)."""
        data = response.c.inline_data
        out_op = self._out_op
        if out_op is None:
            if not self._torch_result:
                return HostTensor(bytearray(data), self._shape, self._dtype)
            import torch
            return torch.frombuffer(
                bytearray(data), dtype=torch.bfloat16 if self._dtype == BF16
                else torch.float32).view(self._shape)
        if out_op.torch:
            import torch
            out_op.value.copy_(torch.frombuffer(
                bytearray(data), dtype=out_op.value.dtype).view(self._shape))
            return out_op.value
        raw = memoryview(out_op.value.data).cast("B")
        size = _ELEMENT_BYTES[self._dtype]
        if tuple(out_op.strides) == _contiguous_strides(self._shape):
            raw[:len(data)] = data
            return out_op.value
        # A strided HostTensor: each element where its strides say.
        dense = _contiguous_strides(self._shape)
        for index in range(len(data) // size):
            offset, rest = 0, index
            for extent_stride, stride in zip(dense, out_op.strides):
                offset += (rest // extent_stride) * stride
                rest %= extent_stride
            raw[offset * size:(offset + 1) * size] = \
                data[index * size:(index + 1) * size]
        return out_op.value

    def release(self):
        """Nothing to give back."""
