"""A product of CUDA tensors: its operands are named by (region id, byte
offset) in the regions of their storages and read and written in place by
the daemon's GPU; out is the caller's tensor (or a new one)."""

from ._operands import _tensor_message
from ._proto import matmul_pb2 as pb


class _CudaProduct:
    """`spec` describes the request with plain values, as the native
    extension takes it (Ring.queue_on_stream, product_request):

        (a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype)
        a, b, c: (region_id, offset_bytes, shape, strides, dtype)

    `request` is the same as a MatmulRequest (the paths that send one).
    The regions it made stale (`retired`) are unregistered once it is
    answered: release() hands them on."""

    def __init__(self, session_id, spec, out, retired, retired_sink):
        self.session_id = session_id
        self.spec = spec
        self.out = out
        self.retired = retired
        self._retired_sink = retired_sink

    @property
    def request(self):
        a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype = self.spec
        return pb.MatmulRequest(
            a=_tensor_message(*a), b=_tensor_message(*b),
            c=_tensor_message(*c), transpose_a=transpose_a,
            transpose_b=transpose_b, alpha=alpha, beta=beta,
            out_dtype=out_dtype, session_id=self.session_id)

    @property
    def device(self):
        return self.out.device

    @property
    def device_index(self):
        return self.out.get_device()

    def synchronize_inputs(self):
        """Waits for the work that produces the inputs (the daemon reads
        them when the request arrives, unless it is stream-ordered)."""
        import torch
        torch.cuda.synchronize(self.device)

    def finish(self, response):
        return self.out

    def release(self):
        retired, self.retired = self.retired, []
        self._retired_sink.extend(retired)
