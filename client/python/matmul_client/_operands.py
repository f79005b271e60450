"""One operand of a product (torch tensor or HostTensor) as the request
describes it, and the shape of the product's output."""

import ctypes
import functools

from ._proto import matmul_pb2 as pb
from ._tensors import (
    _ELEMENT_BYTES,
    HostTensor,
    _contiguous_strides,
    _extent_elements,
    _parse_dtype,
)


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


class _Operand:
    """One tensor as the request describes it, and where its bytes are."""

    def __init__(self, value, name):
        from ._shared_weight import SharedWeight
        self.value = value
        self.name = name
        self.torch = _is_torch(value)
        self.shared = isinstance(value, SharedWeight)
        if self.shared:
            self.shape, self.strides = value.shape, value.strides
            self.dtype = value.dtype
            self.cuda = True
        elif self.torch:
            self.shape = tuple(value.shape)
            self.strides = value.stride()
            self.dtype = _parse_dtype(value.dtype)
            self.cuda = value.is_cuda
        elif isinstance(value, HostTensor):
            self.shape, self.strides = value.shape, value.strides
            self.dtype = value.dtype
            self.cuda = False
        else:
            raise TypeError(f"{name}: expected a torch.Tensor, a HostTensor "
                            f"or a SharedWeight, got {type(value).__name__}")
        if len(self.shape) not in (2, 3):
            raise ValueError(f"{name}: rank {len(self.shape)}; expected 2 or 3")
        if min(self.strides) < 0:
            raise ValueError(f"{name}: negative strides are not supported")

    @functools.cached_property
    def nbytes(self):
        """Bytes from element (0, 0[, 0]) to the last one (host operands
        are copied that far)."""
        return (_extent_elements(self.shape, self.strides)
                * _ELEMENT_BYTES[self.dtype])

    def address(self):
        """Host address of element (0, 0[, 0]) (torch CPU tensors)."""
        return self.value.data_ptr()

    def read_into(self, segment, offset):
        if self.torch:
            ctypes.memmove(segment.address + offset, self.address(),
                           self.nbytes)
        else:
            raw = memoryview(self.value.data).cast("B")
            segment.view[offset:offset + self.nbytes] = raw[:self.nbytes]

    def write_from(self, segment, offset):
        if self.torch:
            ctypes.memmove(self.address(), segment.address + offset,
                           self.nbytes)
        else:
            raw = memoryview(self.value.data).cast("B")
            raw[:self.nbytes] = segment.view[offset:offset + self.nbytes]

    def tensor(self, region_id=None, offset=0):
        return _tensor_message(region_id, offset, self.shape, self.strides,
                               self.dtype)


def _tensor_message(region_id, offset, shape, strides, dtype):
    """The pb.Tensor of an operand at `offset` bytes into a region."""
    t = pb.Tensor(dtype=dtype, shape=shape)
    if tuple(strides) != _contiguous_strides(shape):
        t.strides.extend(strides)
    t.region.region_id = region_id
    t.region.offset_bytes = offset
    return t


def _output_shape(a, b, transpose_a, transpose_b):
    m = a.shape[-1] if transpose_a else a.shape[-2]
    n = b.shape[-2] if transpose_b else b.shape[-1]
    if len(a.shape) == 3 or len(b.shape) == 3:
        batch = max(a.shape[0] if len(a.shape) == 3 else 1,
                    b.shape[0] if len(b.shape) == 3 else 1)
        return (batch, m, n)
    return (m, n)
