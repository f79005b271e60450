"""matmul_client.SharedWeight: a CUDA weight that one process lets other
processes' products read through the daemon, from the owner's memory."""

import json

from ._proto import matmul_pb2 as pb
from ._tensors import _parse_dtype

_ACCESS = {
    "user": pb.SHARE_ACCESS_SAME_USER,
    "group": pb.SHARE_ACCESS_SAME_GROUP,
    "any": pb.SHARE_ACCESS_ANY_LOCAL,
}
_DTYPE_NAMES = {pb.DTYPE_BF16: "bfloat16", pb.DTYPE_FP32: "float32"}


class SharedWeight:
    """A weight the daemon reads for several processes from one copy.

    In the process that holds it (a CUDA tensor it keeps unchanged while
    others use it):

        shared = matmul_client.SharedWeight(layer.weight)
        send_to_the_others(shared.handle)             # a short string

    In each of the others:

        w = matmul_client.SharedWeight.open(handle)
        y = matmul_client.matmul(x, w, transpose_b=True)   # x @ weight.T

    Products over w read the owner's memory in place; products of several
    processes over one weight that wait together in the daemon run as one
    GEMM that reads it once. `w` may be a (B) operand of matmul and
    matmul_async, not an output.

    access: "user" (processes of the owner's uid; the default), "group"
    (also processes whose gid is the owner's) or "any" (any local process
    that may connect to the daemon's socket); each must also know the
    handle. close() in the owner (or its exit, which ends its session)
    withdraws the weight: the others' products over it then raise
    MatmulError (NOT_FOUND) and close() in them is all that is left to do.
    `client`: the Client whose session holds the weight (default: the
    default client of `target`); products over it must go through that
    client."""

    def __init__(self, tensor, access="user", client=None,
                 target="unix:/run/matmul/matmul.sock"):
        from ._client import default_client
        from ._cuda_regions import _export_storage
        if access not in _ACCESS:
            raise ValueError(f"access is {access!r}; expected one of "
                             f"{sorted(_ACCESS)}")
        if not getattr(tensor, "is_cuda", False):
            raise ValueError("a SharedWeight is a CUDA tensor")
        if tensor.dim() not in (2, 3):
            raise ValueError(f"rank {tensor.dim()}; expected 2 or 3")
        self.client = client or default_client(target)
        # A region of its own, not the client's cached one for the storage,
        # which the cache may replace (and so withdraw) at any time.
        memory, storage_offset, needed = _export_storage(
            tensor.untyped_storage())
        with self.client._lock:
            response = self.client._register_export(memory, needed,
                                                    tensor.get_device())
        self.region_id = response.region_id
        self.offset = storage_offset + \
            tensor.storage_offset() * tensor.element_size()
        self.shape = tuple(tensor.shape)
        self.strides = tuple(tensor.stride())
        self.dtype = _parse_dtype(tensor.dtype)
        self._tensor = tensor  # its storage stays allocated meanwhile
        token = self.client.share_region(self.region_id, _ACCESS[access])
        self.handle = json.dumps({
            "token": token, "offset": self.offset, "shape": self.shape,
            "strides": self.strides, "dtype": _DTYPE_NAMES[self.dtype]})

    @classmethod
    def open(cls, handle, client=None, target="unix:/run/matmul/matmul.sock"):
        """The weight another process shared (its SharedWeight.handle),
        registered in this process's session."""
        from ._client import default_client
        fields = json.loads(handle)
        weight = cls.__new__(cls)
        weight.client = client or default_client(target)
        response = weight.client.register_region(pb.RegisterRegionRequest(
            shared=pb.SharedRegion(token=fields["token"])))
        weight.region_id = response.region_id
        weight.offset = int(fields["offset"])
        weight.shape = tuple(fields["shape"])
        weight.strides = tuple(fields["strides"])
        weight.dtype = _parse_dtype(fields["dtype"])
        weight._tensor = None
        weight.handle = handle
        return weight

    @property
    def owner(self):
        """True in the process that shared the weight."""
        return self._tensor is not None

    def close(self):
        """The owner withdraws the weight from everyone; another process
        lets go of its opening. Idempotent."""
        if self.region_id is None:
            return
        region_id, self.region_id = self.region_id, None
        self.client.unregister_region(region_id)
        self._tensor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ref(self, client):
        """(region id, offset) for a product of `client`."""
        if self.region_id is None:
            raise ValueError("this SharedWeight is closed")
        if client is not self.client:
            raise ValueError(
                "a SharedWeight is registered in one client's session: "
                "send its products through that client (SharedWeight.open "
                "with client=...)")
        return self.region_id, self.offset
