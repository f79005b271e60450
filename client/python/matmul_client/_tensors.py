"""Dtypes, BF16 conversion and HostTensor: tensors without torch."""

import struct

from ._proto import matmul_pb2 as pb

BF16 = pb.DTYPE_BF16
FP32 = pb.DTYPE_FP32
_ELEMENT_BYTES = {BF16: 2, FP32: 4}


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
