"""A product of host operands in flight: its request names the client's
shm regions (a scratch region from the pool for whatever is not in a
shared_* region), and its answer is copied back from there."""

import ctypes

from ._tensors import BF16, HostTensor


class _HostProduct:
    """finish() turns the answer into the caller's result; release() gives
    the scratch region back (once, whatever happened)."""

    def __init__(self, request, scratch, pool, out_op, out_offset, shape,
                 dtype, out_bytes, torch_result):
        self.request = request
        self._scratch = scratch  # (segment, region id) or None
        self._pool = pool
        self._out_op = out_op  # the caller's out (None: a new tensor)
        self._out_offset = out_offset  # in the scratch; None: used in place
        self._shape = shape
        self._dtype = dtype
        self._out_bytes = out_bytes
        self._torch_result = torch_result

    def synchronize_inputs(self):
        """Nothing to wait for: host operands are in place already."""

    def finish(self, response):
        """out: the caller's, filled in, or a new tensor (torch for torch
        inputs, else a HostTensor)."""
        if self._out_op is not None:
            if self._out_offset is not None:
                self._out_op.write_from(self._scratch[0], self._out_offset)
            return self._out_op.value
        segment, start = self._scratch[0], self._out_offset
        if self._torch_result:
            import torch
            tensor = torch.empty(self._shape,
                                 dtype=torch.bfloat16 if self._dtype == BF16
                                 else torch.float32)
            ctypes.memmove(tensor.data_ptr(), segment.address + start,
                           self._out_bytes)
            return tensor
        data = bytearray(segment.view[start:start + self._out_bytes])
        return HostTensor(data, self._shape, self._dtype)

    def release(self):
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            self._pool.release(scratch)
