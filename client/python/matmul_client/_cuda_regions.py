"""The Client's regions for CUDA tensors: the memory behind a torch
storage registered once (cuda_ipc for a cudaMalloc block, cuda_vmm for
expandable-segment chunks), cached, and forgotten when torch gives memory
back to the driver."""

import ctypes
import time

from ._proto import matmul_pb2 as pb
from ._share_handles import ExpandableSegmentHandle, parse_share_handle


# prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): <linux/prctl.h>.
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value
_ptracer_set = False


def _let_the_daemon_take_fds():
    """The daemon copies the fds of a cuda_vmm region out of this process
    with pidfd_getfd, which the kernel allows only to a process that may
    ptrace this one; under Yama's ptrace_scope 1 (Ubuntu's default) that
    takes this process's consent. Like the C++ client (CudaMemory), give it
    to any process of this user, once, before the first cuda_vmm region.
    Where Yama is absent the call fails harmlessly."""
    global _ptracer_set
    if _ptracer_set:
        return
    _ptracer_set = True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PTRACER),
                   ctypes.c_ulong(_PR_SET_PTRACER_ANY), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):
        pass


def _freed_bytes(device):
    """Bytes torch's caching allocator has given back to the driver on
    `device` so far (cudaFree of blocks, unmapping of expandable-segment
    chunks), or None when torch does not say."""
    import torch
    try:
        stats = torch.cuda.memory_stats_as_nested_dict(device)
        return stats["reserved_bytes"]["all"]["freed"]
    except (AttributeError, KeyError, RuntimeError, TypeError):
        return None


def _device_uuid(device):
    """"GPU-..." of a torch device index; empty when torch cannot say (the
    daemon then checks the ordinal only)."""
    import torch
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except (AttributeError, RuntimeError):
        return ""
    return uuid if uuid.startswith("GPU-") else "GPU-" + uuid


def _export_storage(storage):
    """(the storage's memory as parse_share_handle reads torch's handle,
    the storage's byte offset in it, the bytes a region needs to hold
    it)."""
    import torch
    try:
        shared = storage._share_cuda_()
    except RuntimeError as error:
        if "expandable_segments" not in str(error):
            raise
        raise RuntimeError(
            f"torch cannot export this tensor's expandable-segment "
            f"memory ({error}); torch 2.5 or later can, or allocate the "
            "tensors you send with expandable_segments:False") from None
    _, handle, storage_bytes, storage_offset = shared[:4]
    # _share_cuda_ put the storage behind torch's cross-process ref count
    # and set the count to 1 for a torch consumer to drop; the daemon is
    # none, so drop it here, or freed storages would wait in torch's IPC
    # limbo forever. The tensor only has to outlive the call.
    release = getattr(torch.UntypedStorage, "_release_ipc_counter_cuda",
                      None)
    if release is not None and shared[4]:
        release(shared[4], shared[5])
    memory = parse_share_handle(handle)
    needed = storage_offset + storage_bytes
    if isinstance(memory, ExpandableSegmentHandle) and \
            needed > memory.size_bytes:
        raise ValueError(
            f"torch shared {len(memory.fds)} chunk(s) of "
            f"{memory.chunk_bytes} bytes for a storage that ends at "
            f"byte {needed} of them")
    return memory, storage_offset, needed


class _CudaRegions:
    """Part of Client: CUDA tensors as (region id, offset). Uses the
    Client's _lock, _native and its caches _cuda_regions, _cuda_storages,
    _cuda_freed, _cuda_next_freed_check, _cuda_unidentified and _retired
    (made and described in Client.__init__).

    A cached storage address can come to stand for other memory once torch
    gives the allocation back to the driver and gets a new one at the same
    address. A storage in a cudaMalloc block is recognised by the block's
    buffer id (the driver's number for an allocation, never reused): a new
    one at the address makes its region stale at once. torch's count of
    bytes given back (memory_stats, which costs more) is looked at on every
    product only for devices with storages the buffer id cannot vouch for
    (expandable-segment chunks, whose fds and addresses are remapped in
    place, or no id from the driver); elsewhere at most every
    _FREED_CHECK_SECONDS, to unregister the regions of freed memory, which
    the daemon would otherwise keep allocated."""

    _FREED_CHECK_SECONDS = 0.1

    def _cuda_ref(self, operand):
        """(region id, offset) of a CUDA tensor: the memory behind its
        storage as a region (registered once, then cached), plus the
        tensor's byte offset in it. A cudaMalloc block becomes a cuda_ipc
        region; the chunks of an expandable segment that hold the storage
        (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) a cuda_vmm
        region that maps them back to back."""
        t = operand.value
        storage = t.untyped_storage()
        address = storage.data_ptr()
        tensor_offset = t.storage_offset() * t.element_size()
        # Storages are looked up by address first: sharing a storage has a
        # cost (an IPC event, a ref-counter slot), and the memory at an
        # address stays the same while its allocation lives.
        cached = self._cuda_storages.get(address)
        if cached is not None:
            if cached[4] is not None and \
                    cached[4] != self._cuda_buffer_id(address):
                # Another allocation at the address: the region (and every
                # storage in it) maps the one torch freed. The product
                # being prepared may name it already: unregistered after.
                self._forget_cuda_regions(
                    lambda entry: entry[0] == cached[0], defer=True)
            elif cached[1] + storage.nbytes() <= cached[2]:
                return cached[0], cached[1] + tensor_offset
        device = t.get_device()
        region_id, storage_offset, region_bytes, chunked = \
            self._share_storage(storage, device)
        buffer_id = None if chunked else self._cuda_buffer_id(address)
        self._cuda_storages[address] = (
            region_id, storage_offset, region_bytes, device, buffer_id)
        if buffer_id is None:
            self._cuda_unidentified.add(device)
        return region_id, storage_offset + tensor_offset

    def _cuda_buffer_id(self, address):
        """The driver's buffer id of the allocation at a device address, or
        None (no native extension, or the driver does not say)."""
        if self._native is None:
            return None
        return self._native.cuda_buffer_id(address)

    def _share_storage(self, storage, device):
        """(region id, storage's offset in it, region size, whether the
        region is of expandable-segment chunks)."""
        memory, storage_offset, needed = _export_storage(storage)
        if isinstance(memory, ExpandableSegmentHandle):
            # Keyed by what the handle means, not its bytes (their padding
            # is not reliably zeroed). An fd number names one chunk only
            # while torch keeps it mapped; _drop_stale_cuda_regions forgets
            # these regions once torch unmaps anything (looked at on every
            # product of the device: see _check_freed_cuda_memory).
            key = ("vmm", device, memory.pid, memory.chunk_bytes, memory.fds)
            cached = self._cuda_regions.get(key)
            if cached is None:
                response = self._register_export(memory, needed, device)
                # The whole chunks: other storages in them reuse the region.
                cached = (response.region_id, memory.size_bytes, device)
                self._cuda_regions[key] = cached
            return cached[0], storage_offset, cached[1], True
        key = ("ipc", device, memory.handle)
        cached = self._cuda_regions.get(key)
        if cached is None or cached[1] < needed:
            response = self._register_export(memory, needed, device)
            if cached is not None:
                # Outgrown: the larger one replaces it. Operands of the
                # request being built may still name the old one, so it is
                # unregistered only after the call.
                self._forget_cuda_regions(lambda entry: entry is cached,
                                          defer=True)
            cached = (response.region_id, needed, device)
            self._cuda_regions[key] = cached
        return cached[0], storage_offset, cached[1], False

    def _register_export(self, memory, needed, device):
        """Registers what _export_storage gave, `needed` bytes of it (a
        cudaMalloc block's) or its whole chunks; the
        RegisterRegionResponse."""
        if isinstance(memory, ExpandableSegmentHandle):
            _let_the_daemon_take_fds()
            return self.register_region(pb.RegisterRegionRequest(
                cuda_vmm=pb.CudaVmmRegion(
                    pid=memory.pid, chunk_fds=memory.fds,
                    chunk_bytes=memory.chunk_bytes,
                    size_bytes=memory.size_bytes, device_ordinal=device,
                    device_uuid=_device_uuid(device))))
        return self.register_region(pb.RegisterRegionRequest(
            cuda_ipc=pb.CudaIpcRegion(handle=memory.handle,
                                      device_ordinal=device,
                                      device_uuid=_device_uuid(device),
                                      size_bytes=needed)))

    def _forget_cuda_regions(self, which, defer=False):
        """Unregisters the cached CUDA regions for which which(entry) holds
        (entry: (region id, size, device)) and the storages that use them;
        with `defer`, only after the product being prepared is answered
        (see Client._unregister_retired)."""
        gone = {key: entry for key, entry in self._cuda_regions.items()
                if which(entry)}
        ids = {entry[0] for entry in gone.values()}
        for key in gone:
            del self._cuda_regions[key]
        self._cuda_storages = {ptr: entry for ptr, entry
                               in self._cuda_storages.items()
                               if entry[0] not in ids}
        self._cuda_unidentified = {entry[3] for entry
                                   in self._cuda_storages.values()
                                   if entry[4] is None}
        if defer:
            self._retired.extend(ids)
            return
        for region_id in ids:
            self.unregister_region(region_id)

    def _check_freed_cuda_memory(self, devices):
        """_drop_stale_cuda_regions for each of `devices` (indices) that
        needs it now: on every product where some cached storage has no
        buffer id, else at most every _FREED_CHECK_SECONDS."""
        now = time.monotonic()
        for device in devices:
            if device in self._cuda_unidentified or \
                    now >= self._cuda_next_freed_check.get(device, now):
                self._cuda_next_freed_check[device] = \
                    now + self._FREED_CHECK_SECONDS
                self._drop_stale_cuda_regions(device)

    def _drop_stale_cuda_regions(self, device):
        """Forgets the cached regions of `device` when torch has given
        memory back to the driver since the last look: the address of a
        cached storage, or the fd number of a cached expandable-segment
        chunk, may now stand for new memory, while the daemon's region
        still maps the old (and keeps it allocated)."""
        freed = _freed_bytes(device)
        if freed is None:
            return
        last = self._cuda_freed.get(device)
        self._cuda_freed[device] = freed
        if last is not None and freed != last:
            self._forget_cuda_regions(lambda entry: entry[2] == device)

    def release_cuda_regions(self):
        """Unregisters every cached CUDA region (cuda_ipc and cuda_vmm); the
        next product registers what it needs again."""
        with self._lock:
            self._forget_cuda_regions(lambda entry: True)
