"""The Client's shm regions for host operands: new registered segments
(for the scratch pool that operands are copied through, and for the
shared_* regions used in place)."""

import ctypes

from ._proto import matmul_pb2 as pb
from ._shm_segment import _SharedSegment
from ._tensors import BF16, _parse_dtype


class _HostRegions:
    """Part of Client: registers shm segments as regions of its session.
    Uses the Client's shm_prefix, _lock and _shared (made and described in
    Client.__init__)."""

    def _register_segment(self, segment):
        response = self.register_region(pb.RegisterRegionRequest(
            shm=pb.ShmRegion(name=segment.name, offset_bytes=0,
                             size_bytes=segment.size)))
        # Registered: the name is not needed any more, and unlinking now
        # leaves nothing in /dev/shm if this process dies.
        segment.unlink()
        return response.region_id

    def _new_segment(self, size):
        # The session first: the name then exists only for the one
        # RegisterRegion call, not for the wait for a session as well.
        self.session_id  # noqa: B018 (opens the session)
        segment = _SharedSegment(size, self.shm_prefix)
        try:
            return segment, self._register_segment(segment)
        except BaseException:
            segment.close()
            raise

    def shared_buffer(self, nbytes):
        """A writable memoryview of `nbytes` in a registered shm region of
        this session: HostTensors over it are used in place (zero copy).
        Valid until close()."""
        with self._lock:
            segment, region_id = self._new_segment(nbytes)
            self._shared.append((segment, region_id))
            return segment.view

    def shared_tensor(self, shape, dtype="bf16"):
        """A torch CPU tensor in a registered shm region of this session:
        products read it (and write it, as out) in place. Valid until
        close()."""
        import torch  # only here: the package works without torch
        dtype = torch.bfloat16 if _parse_dtype(dtype) == BF16 else \
            torch.float32
        count = 1
        for d in shape:
            count *= int(d)
        element = torch.empty((), dtype=dtype).element_size()
        with self._lock:
            segment, region_id = self._new_segment(max(count * element, 1))
            self._shared.append((segment, region_id))
            return torch.frombuffer(segment._mmap, dtype=dtype,
                                    count=count).view(*shape)

    def _shared_ref(self, operand):
        """(region id, offset) when the operand lies in a shared_* region."""
        if operand.torch:
            address = operand.address()
        else:
            try:
                address = ctypes.addressof(ctypes.c_char.from_buffer(
                    memoryview(operand.value.data).cast("B")))
            except TypeError:  # read-only buffers cannot be ours
                return None
        for segment, region_id in self._shared:
            if segment.contains(address, operand.nbytes):
                return region_id, address - segment.address
        return None
