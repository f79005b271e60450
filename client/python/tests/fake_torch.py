"""A stand-in for torch with CUDA, for the client's CUDA paths on a machine
without a GPU (or without torch): tensors that say what the client asks of
them, storages whose _share_cuda_() returns a given handle, and the few
torch.cuda calls the client makes, counted. Put it in sys.modules["torch"]
while a test runs (mock.patch.dict)."""

import types


class FakeDtype:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __str__(self):
        return f"torch.{self.name}"


BFLOAT16 = FakeDtype("bfloat16", 2)
FLOAT32 = FakeDtype("float32", 4)


class FakeStorage:
    def __init__(self, torch, address, nbytes, handle, offset):
        self.torch, self.address, self.size = torch, address, nbytes
        self.handle, self.offset = handle, offset

    def data_ptr(self):
        return self.address

    def nbytes(self):
        return self.size

    def _share_cuda_(self):
        self.torch.shares += 1
        return (0, self.handle, self.size, self.offset, b"refcount", 8,
                b"event", True)


class FakeTensor:
    """A CUDA tensor in `storage`, `element_offset` elements in."""

    is_cuda = True

    def __init__(self, storage, element_offset=0, shape=(1, 1),
                 strides=None, dtype=BFLOAT16, device=0):
        self.storage, self.element_offset = storage, element_offset
        self.shape = tuple(shape)
        self.strides = tuple(strides or _row_major(self.shape))
        self.dtype, self.index = dtype, device

    @property
    def device(self):
        return f"cuda:{self.index}"

    def stride(self):
        return self.strides

    def data_ptr(self):
        return self.storage.address + self.element_offset * self.dtype.size

    def untyped_storage(self):
        return self.storage

    def storage_offset(self):
        return self.element_offset

    def element_size(self):
        return self.dtype.size

    def get_device(self):
        return self.index


# The client tells torch tensors by the module of their type.
FakeTensor.__module__ = "torch"


def _row_major(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= d
    return strides


def fake_torch():
    """The module. Counters: shares (_share_cuda_ calls), freed_looks
    (memory_stats calls), synchronized (torch.cuda.synchronize calls);
    set `freed` to what memory_stats reports as given back, `streams` to
    the current stream of each device, `next_address` to where torch.empty
    puts its tensors (each in a new cudaMalloc block, IPC handle
    b"E" * 64 + ...)."""
    torch = types.ModuleType("torch")
    torch.shares = 0
    torch.freed = 0
    torch.freed_looks = 0
    torch.synchronized = 0
    torch.released = []
    torch.streams = {0: 0x5100, 1: 0x5101}
    torch.next_address = 0x7f00_0000_0000
    torch.bfloat16, torch.float32 = BFLOAT16, FLOAT32
    torch.UntypedStorage = types.SimpleNamespace(
        _release_ipc_counter_cuda=lambda *args: torch.released.append(args))

    def memory_stats_as_nested_dict(device):
        torch.freed_looks += 1
        return {"reserved_bytes": {"all": {"freed": torch.freed}}}

    def synchronize(device=None):
        torch.synchronized += 1

    def empty(shape, device, dtype):
        size = dtype.size
        for d in shape:
            size *= d
        address = torch.next_address
        torch.next_address += 1 << 30
        handle = b"\x02c" + address.to_bytes(8, "little") * 8
        return FakeTensor(FakeStorage(torch, address, size, handle, 0),
                          shape=shape, dtype=dtype,
                          device=int(str(device).split(":")[-1]))

    torch.empty = empty
    torch.cuda = types.SimpleNamespace(
        memory_stats_as_nested_dict=memory_stats_as_nested_dict,
        synchronize=synchronize,
        get_device_properties=lambda device: types.SimpleNamespace(
            uuid="1234abcd-0000-0000-0000-000000000000"))
    torch._C = types.SimpleNamespace(
        _cuda_getCurrentRawStream=lambda device: torch.streams[device])
    return torch
