"""The client behind matmul_client: sessions, regions and matmul()."""

import atexit
import ctypes
import mmap
import os
import secrets
import struct
import threading

import grpc

from ._proto import matmul_pb2 as pb
from ._proto import matmul_pb2_grpc as pb_grpc
from ._share_handles import ExpandableSegmentHandle, parse_share_handle

BF16 = pb.DTYPE_BF16
FP32 = pb.DTYPE_FP32
_ELEMENT_BYTES = {BF16: 2, FP32: 4}
_ALIGNMENT = 64  # bytes; every operand placed in the scratch region starts so


class MatmulError(RuntimeError):
    """A failed RPC: `code` is the grpc.StatusCode, `details` the daemon's
    message (what was wrong and what was expected)."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def _call(method, request, timeout, **kwargs):
    try:
        return method(request, timeout=timeout, **kwargs)
    except grpc.RpcError as error:
        raise MatmulError(error.code(), error.details()) from None


# --- dtypes and raw host tensors ---------------------------------------------

def _parse_dtype(dtype):
    """BF16 / FP32 (the proto enum) from a name, the enum or a torch.dtype."""
    if dtype in (BF16, FP32):
        return dtype
    name = str(dtype).lower().replace("torch.", "")
    if name in ("bf16", "bfloat16"):
        return BF16
    if name in ("fp32", "float32", "float"):
        return FP32
    raise ValueError(f"unsupported dtype {dtype!r}; expected bf16 or fp32")


def bf16_bytes(values):
    """Little-endian BF16 bytes of a sequence of floats (round to nearest
    even, as PyTorch converts)."""
    out = bytearray(2 * len(values))
    for i, value in enumerate(values):
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
            half = (bits >> 16) | 0x40  # keep NaN a NaN
        else:
            half = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        struct.pack_into("<H", out, 2 * i, half & 0xFFFF)
    return bytes(out)


def floats_from_bf16(data):
    """Floats of little-endian BF16 bytes."""
    raw = memoryview(data).cast("B")
    halves = struct.unpack(f"<{len(raw) // 2}H", raw)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def _contiguous_strides(shape):
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


def _extent_elements(shape, strides):
    return 1 + sum((d - 1) * s for d, s in zip(shape, strides))


class HostTensor:
    """A rank-2 or rank-3 tensor in host memory without torch: `data` is any
    buffer (bytes, bytearray, array.array, memoryview, mmap) of little-endian
    BF16 or FP32 elements; `strides` are in elements (None: row-major).
    Outputs need a writable buffer."""

    def __init__(self, data, shape, dtype="bf16", strides=None):
        self.data = data
        self.shape = tuple(int(d) for d in shape)
        self.dtype = _parse_dtype(dtype)
        self.strides = (_contiguous_strides(self.shape) if strides is None
                        else tuple(int(s) for s in strides))
        if len(self.strides) != len(self.shape):
            raise ValueError("one stride per dimension")
        if any(d < 1 for d in self.shape) or any(s < 0 for s in self.strides):
            raise ValueError(f"bad shape {self.shape} / strides {self.strides}")
        needed = self.nbytes_extent
        have = memoryview(data).nbytes
        if have < needed:
            raise ValueError(f"buffer has {have} bytes; shape {self.shape} "
                             f"with strides {self.strides} spans {needed}")

    @property
    def nbytes_extent(self):
        return (_extent_elements(self.shape, self.strides)
                * _ELEMENT_BYTES[self.dtype])

    def tolist(self):
        """The elements as floats, row-major (honouring strides)."""
        raw = memoryview(self.data).cast("B")
        if self.dtype == BF16:
            values = floats_from_bf16(raw[:self.nbytes_extent])
        else:
            values = list(struct.unpack(f"<{self.nbytes_extent // 4}f",
                                        raw[:self.nbytes_extent]))
        out = []
        batch, rows, cols = (1,) + self.shape if len(self.shape) == 2 \
            else self.shape
        sb = 0 if len(self.shape) == 2 else self.strides[0]
        sr, sc = self.strides[-2], self.strides[-1]
        for b in range(batch):
            for r in range(rows):
                for c in range(cols):
                    out.append(values[b * sb + r * sr + c * sc])
        return out


# --- shared memory -----------------------------------------------------------

def _pid_namespace():
    """The inode of this process's pid namespace: pids name processes only
    within one, and /dev/shm may be shared across several (containers with
    --ipc=host). None where it cannot be read."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _segment_owner(name, prefix):
    """(pid, pid namespace) a segment name of this client's format carries,
    or None for any other name."""
    head = prefix + "-py"
    if not name.startswith(head):
        return None
    parts = name[len(head):].split("-")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


_reaped_prefixes = set()
_reap_lock = threading.Lock()


def _reap_orphaned_segments(prefix):
    """Unlinks this user's segments that a client of this pid namespace left
    behind when it died (SIGKILL, a crash) in the moment between creating a
    segment and unlinking it once RegisterRegion answered. A name whose pid
    is alive, or that comes from another pid namespace (where the pid means
    nothing here), is left alone. Returns the names removed."""
    namespace = _pid_namespace()
    if namespace is None:
        return []
    removed = []
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    for name in names:
        owner = _segment_owner(name, prefix)
        if owner is None or owner[1] != namespace or owner[0] == os.getpid():
            continue
        path = "/dev/shm/" + name
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(owner[0], 0)
            continue  # its maker is alive (or its pid was reused)
        except ProcessLookupError:
            pass
        except OSError:
            continue  # gone already, or a process we may not signal: alive
        try:
            os.unlink(path)
            removed.append(name)
        except OSError:
            pass
    return removed


class _SharedSegment:
    """A POSIX shm object of this process (created O_EXCL, mode 0600, under
    a random name with the daemon's prefix) and its mapping. Linux keeps
    POSIX shm in /dev/shm, so plain os.open does what shm_open does.

    The daemon opens the object by name at RegisterRegion, so the name must
    exist until that answers; the client unlinks it right then (and on every
    failure path). A process killed inside that window leaves the name
    behind: it carries the pid and pid namespace of its maker
    ("<prefix>-py<pid>-<namespace>-<random>"), and the first segment a later
    client of this user creates removes such names of dead makers."""

    def __init__(self, size, prefix):
        with _reap_lock:
            if prefix not in _reaped_prefixes:
                _reaped_prefixes.add(prefix)
                _reap_orphaned_segments(prefix)
        namespace = _pid_namespace() or 0
        for _ in range(4):
            self.name = (f"{prefix}-py{os.getpid()}-{namespace}-"
                         f"{secrets.token_hex(8)}")
            self._path = "/dev/shm/" + self.name
            try:
                fd = os.open(self._path,
                             os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(f"could not create a fresh shm object {prefix}-*")
        self._linked = True
        try:
            os.ftruncate(fd, size)
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            self.unlink()
            raise
        finally:
            os.close(fd)  # the mapping keeps the object alive
        self.size = size
        # ctypes view for the base address (memmove to and from torch).
        self._holder = (ctypes.c_char * size).from_buffer(self._mmap)
        self.address = ctypes.addressof(self._holder)
        self.view = memoryview(self._mmap)

    def contains(self, address, nbytes):
        return self.address <= address and \
            address + nbytes <= self.address + self.size

    def unlink(self):
        if self._linked:
            self._linked = False
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass

    def close(self):
        self.unlink()
        self.view.release()
        del self._holder
        try:
            self._mmap.close()
        except BufferError:
            pass  # tensors still view it: unmapped when the last one goes


# --- operands ----------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


class _Operand:
    """One tensor as the request describes it, and where its bytes are."""

    def __init__(self, value, name):
        self.value = value
        self.name = name
        self.torch = _is_torch(value)
        if self.torch:
            self.shape = tuple(value.shape)
            self.strides = tuple(value.stride())
            self.dtype = _parse_dtype(value.dtype)
            self.cuda = value.is_cuda
        elif isinstance(value, HostTensor):
            self.shape, self.strides = value.shape, value.strides
            self.dtype = value.dtype
            self.cuda = False
        else:
            raise TypeError(f"{name}: expected a torch.Tensor or a HostTensor, "
                            f"got {type(value).__name__}")
        if len(self.shape) not in (2, 3):
            raise ValueError(f"{name}: rank {len(self.shape)}; expected 2 or 3")
        if any(s < 0 for s in self.strides):
            raise ValueError(f"{name}: negative strides are not supported")
        self.nbytes = (_extent_elements(self.shape, self.strides)
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
        t = pb.Tensor(dtype=self.dtype, shape=self.shape)
        if self.strides != _contiguous_strides(self.shape):
            t.strides.extend(self.strides)
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


def _align(offset):
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


# --- the client --------------------------------------------------------------

class Client:
    """One connection to the daemon and one session on it.

    The session (an OpenSession stream) opens on first use and stays open
    until close(); the daemon releases every region of it when the stream
    ends, also when this process is killed. Host operands are copied into a
    scratch shm region (registered once, grown when needed); tensors made by
    shared_tensor / shared_buffer are used in place. CUDA tensors are
    referenced by offset in their memory, registered once: a cudaMalloc
    block by its IPC handle (cuda_ipc), the expandable-segment chunks that
    hold a storage by their POSIX fds (cuda_vmm). Those registrations are
    forgotten (and unregistered) when torch gives memory of their device
    back to the driver (empty_cache, or an allocation retried after OOM).
    Thread-safe; host-path products of one client run one at a time (they
    share the scratch region)."""

    def __init__(self, target="unix:/run/matmul/matmul.sock", *, client_name=None,
                 timeout=60.0, max_message_bytes=256 << 20,
                 shm_prefix="matmul", connect_timeout=30.0,
                 tls_ca=None, tls_cert=None, tls_key=None):
        self.target = target
        self.timeout = timeout
        self.shm_prefix = shm_prefix
        self._connect_timeout = connect_timeout
        self._client_name = client_name or f"python pid {os.getpid()}"
        channel_options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if tls_ca is None and (tls_cert or tls_key):
            raise ValueError("a client certificate needs tls_ca, the CA "
                             "that signed the daemon's certificate")
        if tls_ca is not None:
            # A TCP daemon serving TLS (paths of PEM files); tls_cert and
            # tls_key when it asks for a client certificate.
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca),
                private_key=read(tls_key) if tls_key else None,
                certificate_chain=read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(target, credentials,
                                                options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target,
                                                  options=channel_options)
        self._stub = pb_grpc.MatmulServiceStub(self._channel)
        self._lock = threading.RLock()
        self._session_call = None
        self._session_id = None
        self._scratch = None  # (_SharedSegment, region id)
        self._shared = []  # [(_SharedSegment, region id)] of shared_*()
        # ("ipc", device, cudaIpcMemHandle) or ("vmm", device, pid,
        # chunk bytes, fds) -> (region id, size, device)
        self._cuda_regions = {}
        # storage address -> (region id, storage's offset in the region,
        # region size, device)
        self._cuda_storages = {}
        self._cuda_freed = {}  # device -> _freed_bytes at the last product
        self._retired = []  # region ids to unregister after the current call
        self._closed = False

    # -- session and regions --

    @property
    def session_id(self):
        """The session's id (opens the session on first use)."""
        with self._lock:
            if self._closed:
                raise ValueError("the client is closed")
            if self._session_id is None:
                self._open_session()
            return self._session_id

    def _open_session(self):
        call = self._stub.OpenSession(
            pb.OpenSessionRequest(client_name=self._client_name),
            wait_for_ready=True)
        # No deadline on the stream (it lives as long as the client); the
        # timer bounds only the wait for its first event.
        timer = threading.Timer(self._connect_timeout, call.cancel)
        timer.start()
        try:
            event = next(call)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.CANCELLED:
                raise MatmulError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                  f"no session from {self.target} within "
                                  f"{self._connect_timeout} s") from None
            raise MatmulError(code, error.details()) from None
        except StopIteration:
            raise MatmulError(grpc.StatusCode.UNAVAILABLE,
                              "the daemon closed OpenSession at once") from None
        finally:
            timer.cancel()
        self._session_call = call  # holding it keeps the stream open
        self._session_id = event.session_id

    def register_region(self, request):
        """RegisterRegion for a RegisterRegionRequest (session_id is set
        here); returns the RegisterRegionResponse."""
        request.session_id = self.session_id
        return _call(self._stub.RegisterRegion, request, self.timeout)

    def unregister_region(self, region_id):
        """Returns True when requests in flight defer the release."""
        response = _call(self._stub.UnregisterRegion,
                         pb.UnregisterRegionRequest(
                             session_id=self.session_id, region_id=region_id),
                         self.timeout)
        return response.deferred

    def list_regions(self):
        return list(_call(self._stub.ListRegions,
                          pb.ListRegionsRequest(session_id=self.session_id),
                          self.timeout).regions)

    def server_info(self):
        return _call(self._stub.GetServerInfo, pb.GetServerInfoRequest(),
                     self.timeout, wait_for_ready=True)

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

    def _scratch_segment(self, size):
        if self._scratch is not None and self._scratch[0].size >= size:
            return self._scratch
        size = max(size, 1 << 20)
        size = 1 << (size - 1).bit_length()  # grow geometrically
        if self._scratch is not None:
            old, old_id = self._scratch
            self._scratch = None
            try:
                self.unregister_region(old_id)
            finally:
                old.close()
        self._scratch = self._new_segment(size)
        return self._scratch

    # -- CUDA --

    def _cuda_ref(self, operand):
        """(region id, offset) of a CUDA tensor: the memory behind its
        storage as a region (registered once, then cached), plus the
        tensor's byte offset in it. A cudaMalloc block becomes a cuda_ipc
        region; the chunks of an expandable segment that hold the storage
        (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) a cuda_vmm
        region that maps them back to back."""
        t = operand.value
        storage = t.untyped_storage()
        tensor_offset = t.storage_offset() * t.element_size()
        # Storages are looked up by address first: sharing a storage has a
        # cost (an IPC event, a ref-counter slot), and the memory at an
        # address stays the same until torch gives it back to the driver
        # (which _drop_stale_cuda_regions notices).
        cached = self._cuda_storages.get(storage.data_ptr())
        if cached is not None and cached[1] + storage.nbytes() <= cached[2]:
            return cached[0], cached[1] + tensor_offset
        device = t.get_device()
        region_id, storage_offset, region_bytes = self._share_storage(
            storage, device)
        self._cuda_storages[storage.data_ptr()] = (
            region_id, storage_offset, region_bytes, device)
        return region_id, storage_offset + tensor_offset

    def _share_storage(self, storage, device):
        """(region id, storage's offset in it, region size)."""
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
        # _share_cuda_ put the storage behind torch's cross-process ref
        # count and set the count to 1 for a torch consumer to drop; the
        # daemon is none, so drop it here, or freed storages would wait in
        # torch's IPC limbo forever. The tensor only has to outlive the call.
        release = getattr(torch.UntypedStorage, "_release_ipc_counter_cuda",
                          None)
        if release is not None and shared[4]:
            release(shared[4], shared[5])
        memory = parse_share_handle(handle)
        needed = storage_offset + storage_bytes
        if isinstance(memory, ExpandableSegmentHandle):
            if needed > memory.size_bytes:
                raise ValueError(
                    f"torch shared {len(memory.fds)} chunk(s) of "
                    f"{memory.chunk_bytes} bytes for a storage that ends at "
                    f"byte {needed} of them")
            # Keyed by what the handle means, not its bytes (their padding
            # is not reliably zeroed). An fd number names one chunk only
            # while torch keeps it mapped; _drop_stale_cuda_regions forgets
            # these regions once torch unmaps anything.
            key = ("vmm", device, memory.pid, memory.chunk_bytes, memory.fds)
            cached = self._cuda_regions.get(key)
            if cached is None:
                _let_the_daemon_take_fds()
                response = self.register_region(pb.RegisterRegionRequest(
                    cuda_vmm=pb.CudaVmmRegion(
                        pid=memory.pid, chunk_fds=memory.fds,
                        chunk_bytes=memory.chunk_bytes,
                        size_bytes=memory.size_bytes, device_ordinal=device,
                        device_uuid=_device_uuid(device))))
                # The whole chunks: other storages in them reuse the region.
                cached = (response.region_id, memory.size_bytes, device)
                self._cuda_regions[key] = cached
            return cached[0], storage_offset, cached[1]
        key = ("ipc", device, memory.handle)
        cached = self._cuda_regions.get(key)
        if cached is None or cached[1] < needed:
            response = self.register_region(pb.RegisterRegionRequest(
                cuda_ipc=pb.CudaIpcRegion(handle=memory.handle,
                                          device_ordinal=device,
                                          device_uuid=_device_uuid(device),
                                          size_bytes=needed)))
            if cached is not None:
                # Outgrown: the larger one replaces it. Operands of the
                # request being built may still name the old one, so it is
                # unregistered only after the call.
                self._forget_cuda_regions(lambda entry: entry is cached,
                                          defer=True)
            cached = (response.region_id, needed, device)
            self._cuda_regions[key] = cached
        return cached[0], storage_offset, cached[1]

    def _forget_cuda_regions(self, which, defer=False):
        """Unregisters the cached CUDA regions for which which(entry) holds
        (entry: (region id, size, device)) and the storages that use them;
        with `defer`, only after the product being prepared (see
        _unregister_retired)."""
        gone = {key: entry for key, entry in self._cuda_regions.items()
                if which(entry)}
        ids = {entry[0] for entry in gone.values()}
        for key in gone:
            del self._cuda_regions[key]
        self._cuda_storages = {ptr: entry for ptr, entry
                               in self._cuda_storages.items()
                               if entry[0] not in ids}
        if defer:
            self._retired.extend(ids)
            return
        for region_id in ids:
            self.unregister_region(region_id)

    def _unregister_retired(self):
        with self._lock:
            retired, self._retired = self._retired, []
            for region_id in retired:
                self.unregister_region(region_id)

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

    # -- products --

    def matmul(self, a, b, out=None, transpose_b=False, transpose_a=False,
               alpha=1.0, beta=0.0, out_dtype=None, timeout=None):
        """out = alpha * op(a) @ op(b) + beta * out, op = transpose or not.

        a is [M, K] ([K, M] with transpose_a), b is [K, N] ([N, K] with
        transpose_b: nn.Linear's weight), optionally with a leading batch
        dimension; any non-negative strides. BF16 inputs; the output is
        BF16 or FP32 (out_dtype, else out's dtype, else BF16). beta != 0
        needs out, whose values are read first. Returns out (a new tensor
        when None: torch for torch inputs, else a HostTensor)."""
        a_op, b_op = _Operand(a, "a"), _Operand(b, "b")
        shape = _output_shape(a_op, b_op, transpose_a, transpose_b)
        if out is not None:
            out_op = _Operand(out, "out")
            if out_dtype is not None and _parse_dtype(out_dtype) != out_op.dtype:
                raise ValueError("out_dtype differs from out's dtype")
        elif beta != 0.0:
            raise ValueError("beta != 0 needs out (the C it scales)")
        dtype = out_op.dtype if out is not None else \
            _parse_dtype(out_dtype or "bf16")
        request = pb.MatmulRequest(transpose_a=transpose_a,
                                   transpose_b=transpose_b, alpha=alpha,
                                   beta=beta, out_dtype=dtype)
        timeout = self.timeout if timeout is None else timeout
        if a_op.cuda or b_op.cuda or (out is not None and out_op.cuda):
            return self._matmul_cuda(request, a_op, b_op, out, shape, dtype,
                                     timeout)
        with self._lock:
            return self._matmul_host(request, a_op, b_op, out, shape, dtype,
                                     timeout)

    def _matmul_cuda(self, request, a_op, b_op, out, shape, dtype, timeout):
        import torch
        if out is None:
            out = torch.empty(shape, device=a_op.value.device,
                              dtype=torch.bfloat16 if dtype == BF16
                              else torch.float32)
        out_op = _Operand(out, "out")
        if not (a_op.cuda and b_op.cuda and out_op.cuda):
            raise ValueError("a, b and out must all be CUDA tensors, or all "
                             "host tensors")
        with self._lock:
            request.session_id = self.session_id
            for device in {op.value.get_device() for op in (a_op, b_op,
                                                            out_op)}:
                self._drop_stale_cuda_regions(device)
            for operand, field in ((a_op, request.a), (b_op, request.b),
                                   (out_op, request.c)):
                field.CopyFrom(operand.tensor(*self._cuda_ref(operand)))
        # The daemon reads the inputs when the request arrives: finish the
        # work that produces them first.
        torch.cuda.synchronize(a_op.value.device)
        try:
            response = _call(self._stub.Matmul, request, timeout)
        finally:
            self._unregister_retired()
        self.last_response = response
        return out

    def _matmul_host(self, request, a_op, b_op, out, shape, dtype, timeout):
        out_op = _Operand(out, "out") if out is not None else None
        refs = [self._shared_ref(op) if op else None
                for op in (a_op, b_op, out_op)]
        # Everything not already in a shared region goes to the scratch one.
        dense_out = 1
        for d in shape:
            dense_out *= d
        dense_out *= _ELEMENT_BYTES[dtype]
        placements, end = [], 0
        for op, ref, nbytes in ((a_op, refs[0], a_op.nbytes),
                                (b_op, refs[1], b_op.nbytes),
                                (out_op, refs[2],
                                 out_op.nbytes if out_op else dense_out)):
            if ref is None:
                end = _align(end)
                placements.append(end)
                end += nbytes
            else:
                placements.append(None)
        scratch = scratch_id = None
        if end:
            scratch, scratch_id = self._scratch_segment(end)
        request.session_id = self.session_id
        for op, ref, offset, field in ((a_op, refs[0], placements[0],
                                        request.a),
                                       (b_op, refs[1], placements[1],
                                        request.b)):
            if ref is None:
                op.read_into(scratch, offset)
                ref = (scratch_id, offset)
            field.CopyFrom(op.tensor(*ref))
        if out_op is not None:
            if refs[2] is None:
                # The whole extent, so elements between strided rows come
                # back unchanged when it is copied back.
                out_op.read_into(scratch, placements[2])
                request.c.CopyFrom(out_op.tensor(scratch_id, placements[2]))
            else:
                request.c.CopyFrom(out_op.tensor(*refs[2]))
        else:
            request.c.CopyFrom(pb.Tensor(
                dtype=dtype, shape=shape,
                region=pb.RegionRef(region_id=scratch_id,
                                    offset_bytes=placements[2])))
        response = _call(self._stub.Matmul, request, timeout)
        self.last_response = response
        if out_op is not None:
            if refs[2] is None:
                out_op.write_from(scratch, placements[2])
            return out
        start = placements[2]
        result = bytearray(scratch.view[start:start + dense_out])
        if a_op.torch:
            import torch
            tensor = torch.empty(shape, dtype=torch.bfloat16 if dtype == BF16
                                 else torch.float32)
            ctypes.memmove(tensor.data_ptr(),
                           (ctypes.c_char * dense_out).from_buffer(result),
                           dense_out)
            return tensor
        return HostTensor(result, shape, dtype)

    # -- lifetime --

    def close(self):
        """Unregisters the regions, ends the session (the daemon would
        release its regions anyway) and closes the channel."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            segments = [s for s, _ in self._shared]
            if self._scratch is not None:
                segments.append(self._scratch[0])
            self._shared, self._scratch = [], None
            self._cuda_regions, self._cuda_storages = {}, {}
            self._cuda_freed = {}
            if self._session_call is not None:
                self._session_call.cancel()
            for segment in segments:
                segment.close()
            self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- module-level convenience ------------------------------------------------

_default_clients = {}
_default_lock = threading.Lock()


def default_client(target="unix:/run/matmul/matmul.sock"):
    """The process-wide Client of `target` (created on first use, closed at
    exit)."""
    with _default_lock:
        client = _default_clients.get(target)
        if client is None:
            client = _default_clients[target] = Client(target)
        return client


def close_default_clients():
    with _default_lock:
        clients = list(_default_clients.values())
        _default_clients.clear()
    for client in clients:
        client.close()


atexit.register(close_default_clients)


def matmul(a, b, out=None, transpose_b=False, transpose_a=False, alpha=1.0,
           beta=0.0, out_dtype=None, target="unix:/run/matmul/matmul.sock"):
    """alpha * op(a) @ op(b) + beta * out on the daemon at `target`; see
    Client.matmul. matmul(x, w, transpose_b=True) is x @ w.T (nn.Linear)."""
    return default_client(target).matmul(
        a, b, out=out, transpose_b=transpose_b, transpose_a=transpose_a,
        alpha=alpha, beta=beta, out_dtype=out_dtype)
