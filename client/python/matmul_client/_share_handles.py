"""The memory handle inside what torch's UntypedStorage._share_cuda_()
returns, parsed into what a RegisterRegion request needs. Pure Python (no
torch, no CUDA), so it is tested with fabricated bytes.

torch writes the handle in c10/cuda/CUDACachingAllocator.cpp
(DeviceCachingAllocator::shareIpcHandle and ExpandableSegment::share):

- torch < 2.5: the bare 64-byte cudaIpcMemHandle_t of the storage's
  cudaMalloc block.
- since torch 2.5 (pytorch/pytorch#130890) a versioned handle, [version byte][type byte][payload]:
  - type 'c' (SHAREABLE_CUDA_MALLOC): the 64-byte cudaIpcMemHandle_t of
    the cudaMalloc block;
  - type 'e' (SHAREABLE_CUDA_EXPANDABLE_SEGMENT): a ShareHeader in the
    producer's native layout, then one handle per chunk ("segment" in
    torch's words) that covers the storage, in address order:
      version 1, 2:  int32 pid, 4 bytes padding, uint64 segment_size,
                     uint64 num_handles                     (24 bytes)
      version 3:     the same, then int32 handle_type (0 unspecified,
                     1 POSIX fd, 2 fabric) and 4 bytes padding (32 bytes;
                     torch 2.13 added the field so a consumer knows the
                     handle shape)
    then num_handles int32 POSIX fds (cuMemExportToShareableHandle of each
    chunk's cuMemCreate allocation, open in the producer, i.e. this
    process) or, when torch chose fabric handles (version 2 may do so
    without saying: the payload length tells), 64-byte CUmemFabricHandles.
    The storage offset _share_cuda_ returns is relative to the first
    chunk's start.

The padding bytes are not reliably zero (pytorch/pytorch#198305), so
nothing here compares raw handle bytes of expandable segments.
"""

import collections
import struct

CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_FABRIC_HANDLE_BYTES = 64  # sizeof(CUmemFabricHandle)
_MALLOC = ord("c")
_EXPANDABLE_SEGMENT = ord("e")
# Versioned-handle versions whose 'e' layout is known (see above).
_HEADERS = {
    1: struct.Struct("=i4xQQ"),
    2: struct.Struct("=i4xQQ"),
    3: struct.Struct("=i4xQQi4x"),
}
_HANDLE_TYPE_UNSPECIFIED, _HANDLE_TYPE_POSIX_FD, _HANDLE_TYPE_FABRIC = 0, 1, 2
_FD = struct.Struct("=i")
# The daemon takes at most this many chunks per region (kMaxCudaVmmChunks in
# server/regions/cuda_vmm_region.h); more is a garbled header.
MAX_CHUNKS = 1 << 16

# A cudaMalloc block: register `handle` as a cuda_ipc region.
CudaIpcHandle = collections.namedtuple("CudaIpcHandle", "handle")


class ExpandableSegmentHandle(
        collections.namedtuple("ExpandableSegmentHandle",
                               "pid chunk_bytes fds")):
    """Chunks of an expandable segment: register them as one cuda_vmm
    region of len(fds) chunks of chunk_bytes, fds[i] (in process `pid`)
    mapped at byte i * chunk_bytes."""

    @property
    def size_bytes(self):
        return self.chunk_bytes * len(self.fds)


def parse_share_handle(handle):
    """CudaIpcHandle or ExpandableSegmentHandle from the handle bytes of
    _share_cuda_(). ValueError, saying what was expected, for bytes that are
    truncated, garbled or of an unknown version; NotImplementedError for a
    well-formed kind the daemon cannot open (fabric handles)."""
    handle = bytes(handle)
    if len(handle) == CUDA_IPC_HANDLE_BYTES:  # torch < 2.5
        return CudaIpcHandle(handle)
    if len(handle) < 2:
        raise ValueError(f"CUDA share handle of {len(handle)} bytes: expected "
                         f"{CUDA_IPC_HANDLE_BYTES} (cudaIpcMemHandle_t) or "
                         "[version][type][payload]")
    version, kind = handle[0], handle[1]
    if kind == _MALLOC:
        # The 'c' payload has been the same in every version so far.
        if len(handle) != 2 + CUDA_IPC_HANDLE_BYTES:
            raise ValueError(
                f"CUDA share handle of type 'c' has {len(handle)} bytes; "
                f"expected {2 + CUDA_IPC_HANDLE_BYTES} (version, type and a "
                "cudaIpcMemHandle_t)")
        return CudaIpcHandle(handle[2:])
    if kind != _EXPANDABLE_SEGMENT:
        raise ValueError(
            f"CUDA share handle of {len(handle)} bytes with type byte "
            f"{kind:#04x}: expected 'c' (cudaMalloc block) or 'e' "
            "(expandable segment)")
    return _parse_expandable_segment(version, handle[2:])


def _parse_expandable_segment(version, payload):
    header = _HEADERS.get(version)
    if header is None:
        raise ValueError(
            f"expandable-segment share handle of version {version}; this "
            f"matmul_client reads versions {min(_HEADERS)}-{max(_HEADERS)} "
            "(a newer torch? update matmul_client)")
    if len(payload) < header.size:
        raise ValueError(
            f"expandable-segment share handle (version {version}) is "
            f"truncated: {len(payload)} bytes after the type byte, fewer than "
            f"its {header.size}-byte header")
    fields = header.unpack_from(payload)
    pid, chunk_bytes, count = fields[:3]
    handle_type = fields[3] if len(fields) > 3 else None
    if pid <= 0 or chunk_bytes == 0 or not 1 <= count <= MAX_CHUNKS:
        raise ValueError(
            f"expandable-segment share handle has a garbled header: pid {pid},"
            f" segment_size {chunk_bytes}, num_handles {count} (expected "
            f"pid > 0, segment_size > 0, 1 <= num_handles <= {MAX_CHUNKS})")
    if handle_type not in (None, _HANDLE_TYPE_UNSPECIFIED,
                           _HANDLE_TYPE_POSIX_FD, _HANDLE_TYPE_FABRIC):
        raise ValueError(
            f"expandable-segment share handle has handle_type {handle_type}; "
            "expected 0 (unspecified), 1 (POSIX fd) or 2 (fabric)")
    rest = payload[header.size:]
    # Before version 3 only the length says which handles follow.
    if (handle_type == _HANDLE_TYPE_FABRIC or
            (handle_type is None and
             len(rest) == count * _FABRIC_HANDLE_BYTES)):
        raise NotImplementedError(
            "this tensor's expandable segment is shared through CUDA fabric "
            "handles, which the daemon cannot import (cuda_vmm regions take "
            "POSIX file descriptors); have torch export POSIX fds for it "
            "(torch suggests PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments_handle_type:posix_fd) or allocate the "
            "tensors you send with expandable_segments:False")
    if len(rest) != count * _FD.size:
        raise ValueError(
            f"expandable-segment share handle announces {count} chunk(s) but "
            f"carries {len(rest)} bytes of handles; expected {count * _FD.size}"
            f" ({count} int32 file descriptors)")
    fds = tuple(fd for (fd,) in _FD.iter_unpack(rest))
    if any(fd < 0 for fd in fds):
        raise ValueError(
            f"expandable-segment share handle has a negative fd: {fds}")
    return ExpandableSegmentHandle(pid, chunk_bytes, fds)
