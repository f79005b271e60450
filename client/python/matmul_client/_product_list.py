"""Product lists (MatmulRequest.products): several products sent as one
request that the daemon runs in order on one stream, later products reading
what earlier ones wrote (in the caller's tensors or in daemon scratch).

    Product(a, b, out, transpose_a, transpose_b, alpha, beta)
    operand: a torch tensor (all CUDA, or all CPU, in one list) or a Scratch

A list is described with plain values, as the native extension takes it
(Ring.queue_on_stream, product_request):

    spec = [(a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype), ...]
    a, b, c: (region_id, offset_bytes, shape, strides, dtype), where an int
             region_id is a scratch operand: the index of the product whose
             buffer it is (offset_bytes into that buffer)

and the same spec becomes the MatmulRequest where Python sends it (gRPC,
host tensors).
"""

import bisect
import collections
import ctypes

from ._proto import matmul_pb2 as pb
from ._shared_weight import SharedWeight
from ._tensors import (
    _ELEMENT_BYTES,
    _contiguous_strides,
    _extent_elements,
    _parse_dtype,
)

_ALIGNMENT = 64  # bytes; every interval copied into a scratch region starts so


class Product(collections.namedtuple(
        "Product", "a b out transpose_a transpose_b alpha beta",
        defaults=(False, False, 1.0, 0.0))):
    """One product of a list: out = alpha * op(a) @ op(b) + beta * out.
    out is always given (a tensor, or a Scratch); its dtype is the
    product's output dtype. A plain tuple in this order works as well."""

    __slots__ = ()


class Scratch:
    """A buffer of the daemon's that lives as long as one product list.

    Scratch.new(shape, dtype) as a product's `out` makes a new buffer of
    that shape (contiguous, beta must be 0); Scratch(j, shape, dtype) names
    the buffer product j made: as `out` of a later product it is written
    again (beta may read it), as `a` or `b` of a later product it is read,
    with this marker's shape and strides (in elements, None: contiguous)
    at offset_bytes into the buffer. Nothing of it comes back to the
    client; use a tensor for what is needed after the list."""

    __slots__ = ("product", "shape", "dtype", "strides", "offset_bytes")

    def __init__(self, product, shape, dtype="bf16", strides=None,
                 offset_bytes=0):
        self.product = product
        self.shape = tuple(int(d) for d in shape)
        self.dtype = _parse_dtype(dtype)
        self.strides = _contiguous_strides(self.shape) if strides is None \
            else tuple(int(s) for s in strides)
        self.offset_bytes = int(offset_bytes)

    @classmethod
    def new(cls, shape, dtype="bf16"):
        """A new buffer, as the `out` of the product it is given to."""
        return cls(None, shape, dtype)

    def spec(self, index, name):
        """The operand's spec in product `index` (see the module's doc)."""
        product = self.product
        if product is None:
            if name != "out":
                raise ValueError(f"product {index}: {name}: Scratch.new() is "
                                 "a product's out; read it with "
                                 "Scratch(product index, shape)")
            product = index
        return (product, self.offset_bytes, self.shape, self.strides,
                self.dtype)

    def __repr__(self):
        return (f"Scratch({self.product}, {self.shape}, dtype={self.dtype}, "
                f"strides={self.strides}, offset_bytes={self.offset_bytes})")


def _torch_dtypes():
    import torch
    return {torch.bfloat16: pb.DTYPE_BF16, torch.float32: pb.DTYPE_FP32}


_DTYPES = None  # torch.dtype -> DType, once torch is imported


def _dtype_of(tensor, index, name):
    global _DTYPES
    if _DTYPES is None:
        _DTYPES = _torch_dtypes()
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        try:  # a dtype of another torch module (a test's stand-in)
            return _parse_dtype(tensor.dtype)
        except ValueError:
            raise ValueError(f"product {index}: {name}: dtype "
                             f"{tensor.dtype}; expected torch.bfloat16 or "
                             "torch.float32") from None
    return dtype


_TENSOR_TYPES = set()  # types seen to be torch's (a set lookup per operand)


def _is_tensor(value):
    kind = type(value)
    if kind in _TENSOR_TYPES:
        return True
    if kind.__module__.split(".")[0] == "torch":
        _TENSOR_TYPES.add(kind)
        return True
    return False


def _products_of(products):
    """The list's products as tuples of 7 (a Product is one), and whether
    their tensors are CUDA ones (all of them, or none)."""
    items, cuda = [], None
    for index, product in enumerate(products):
        if len(product) != 7:  # a Product or a tuple of 7 is used as is
            product = Product(*product)
        for value, name in ((product[0], "a"), (product[1], "b"),
                            (product[2], "out")):
            if isinstance(value, Scratch):
                continue
            if isinstance(value, SharedWeight):
                if name == "out":
                    raise ValueError(f"product {index}: out: a SharedWeight "
                                     "is read only")
                is_cuda = True
            elif _is_tensor(value):
                is_cuda = value.is_cuda
            else:
                raise TypeError(f"product {index}: {name}: expected a torch "
                                f"tensor, a SharedWeight or a Scratch, got "
                                f"{type(value).__name__}")
            if cuda is None:
                cuda = is_cuda
            elif cuda != is_cuda:
                raise ValueError(f"product {index}: {name}: a list's tensors "
                                 "must all be CUDA tensors, or all CPU ones")
        items.append(product)
    if not items:
        raise ValueError("a product list needs at least one product")
    return items, bool(cuda)


class _TensorRef:
    """What _CudaRegions._cuda_ref reads of an operand."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _cuda_list_spec(products, cuda_ref, client=None):
    """The spec of CUDA products (see the module's doc); cuda_ref(operand)
    -> (region id, offset) as _CudaRegions._cuda_ref; `client` is the one
    SharedWeight operands must belong to. A tensor named by several
    products is looked up once."""
    refs = {}  # id(tensor) -> its operand spec
    spec = []
    for index, product in enumerate(products):
        operands = []
        for value, name in ((product[0], "a"), (product[1], "b"),
                            (product[2], "out")):
            if isinstance(value, Scratch):
                operands.append(value.spec(index, name))
                continue
            operand = refs.get(id(value))
            if operand is None and isinstance(value, SharedWeight):
                region_id, offset = value._ref(client)
                operand = refs[id(value)] = (
                    region_id, offset, value.shape, value.strides,
                    value.dtype)
            if operand is None:
                region_id, offset = cuda_ref(_TensorRef(value))
                operand = refs[id(value)] = (
                    region_id, offset, tuple(value.shape), value.stride(),
                    _dtype_of(value, index, name))
            operands.append(operand)
        spec.append((operands[0], operands[1], operands[2], product[3],
                     product[4], product[5], product[6], operands[2][4]))
    return spec


def _operand_message(operand):
    region_id, offset, shape, strides, dtype = operand
    t = pb.Tensor(dtype=dtype, shape=shape)
    if tuple(strides) != _contiguous_strides(shape):
        t.strides.extend(strides)
    if isinstance(region_id, int):
        t.scratch.product = region_id
        t.scratch.offset_bytes = offset
    else:
        t.region.region_id = region_id
        t.region.offset_bytes = offset
    return t


def list_request(session_id, spec):
    """The MatmulRequest of a list's spec."""
    request = pb.MatmulRequest(session_id=session_id)
    for a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype in spec:
        request.products.add(
            a=_operand_message(a), b=_operand_message(b),
            c=_operand_message(c), transpose_a=transpose_a,
            transpose_b=transpose_b, alpha=alpha, beta=beta,
            out_dtype=out_dtype)
    return request


class _CudaList:
    """A list of CUDA products, as _CudaProduct is one: `spec` for the
    native ring, `request` for gRPC; the regions made stale while it was
    built (`retired`) are unregistered once it is answered."""

    out = None  # a list returns nothing: its outputs are the caller's

    def __init__(self, session_id, spec, device_index, retired,
                 retired_sink):
        self.session_id = session_id
        self.spec = spec
        self.device_index = device_index
        self.retired = retired
        self._retired_sink = retired_sink

    @property
    def request(self):
        return list_request(self.session_id, self.spec)

    def synchronize_inputs(self):
        """Waits for the work that produces the inputs (over gRPC the
        daemon reads them when the request arrives)."""
        import torch
        torch.cuda.synchronize(self.device_index)

    def finish(self, response):
        return None

    def release(self):
        retired, self.retired = self.retired, []
        self._retired_sink.extend(retired)


class _HostList:
    """A list of CPU tensors: every tensor not in a shared_* region is
    copied into one scratch shm region (overlapping tensors, such as a
    product's out that a later product reads, share their bytes there), and
    the outputs' bytes are copied back once the list is answered."""

    def __init__(self, request, scratch, pool, copy_back):
        self.request = request
        self._scratch = scratch  # (segment, region id) or None
        self._pool = pool
        self._copy_back = copy_back  # [(host address, scratch offset, bytes)]

    def synchronize_inputs(self):
        """Nothing to wait for: host operands are in place already."""

    def finish(self, response):
        if self._scratch is not None:
            base = self._scratch[0].address
            for address, offset, nbytes in self._copy_back:
                ctypes.memmove(address, base + offset, nbytes)
        return None

    def release(self):
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            self._pool.release(scratch)


def _host_operand(value, index, name):
    """(address, bytes of its extent, shape, strides, dtype) of a CPU
    tensor."""
    shape, strides = tuple(value.shape), value.stride()
    dtype = _dtype_of(value, index, name)
    if min(strides, default=0) < 0:
        raise ValueError(f"product {index}: {name}: negative strides are "
                         "not supported")
    nbytes = _extent_elements(shape, strides) * _ELEMENT_BYTES[dtype] \
        if all(shape) else 0
    return value.data_ptr(), nbytes, shape, strides, dtype


def prepare_host_list(products, session_id, shared_ref, pool):
    """The _HostList of CPU products. shared_ref(address, nbytes) -> (region
    id, offset) of a shared_* region holding those bytes, or None; pool:
    the client's _ScratchPool."""
    operands = []  # per product: [operand tuple or Scratch spec] * 3
    spans = []  # (address, end) of the tensors to copy
    outputs = []  # (address, end) of the outputs among them
    for index, product in enumerate(products):
        row = []
        for value, name in ((product[0], "a"), (product[1], "b"),
                            (product[2], "out")):
            if isinstance(value, Scratch):
                row.append((True, value.spec(index, name)))
                continue
            address, nbytes, shape, strides, dtype = _host_operand(
                value, index, name)
            ref = shared_ref(address, nbytes)
            if ref is None:
                spans.append((address, address + nbytes))
                if name == "out":
                    outputs.append((address, address + nbytes))
            row.append((False, (ref, address, shape, strides, dtype)))
        operands.append(row)
    # Overlapping extents merge into one interval, copied once: a tensor
    # that one product writes and a later one reads is one place.
    intervals = []  # [start, end, offset in the scratch]
    for start, stop in sorted(spans):
        if intervals and start < intervals[-1][1]:
            intervals[-1][1] = max(intervals[-1][1], stop)
        else:
            intervals.append([start, stop, 0])
    size = 0
    for interval in intervals:
        interval[2] = (size + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
        size = interval[2] + interval[1] - interval[0]
    scratch = pool.acquire(size) if size else None
    copy_back = []
    try:
        starts = [interval[0] for interval in intervals]

        def place(address):
            interval = intervals[bisect.bisect_right(starts, address) - 1]
            return scratch[1], interval[2] + address - interval[0]

        if scratch is not None:
            base = scratch[0].address
            for start, stop, offset in intervals:
                ctypes.memmove(base + offset, start, stop - start)
                if any(start <= o < stop for o, _ in outputs):
                    copy_back.append((start, offset, stop - start))
        spec = []
        for row, product in zip(operands, products):
            resolved = []
            for is_scratch, operand in row:
                if is_scratch:
                    resolved.append(operand)
                    continue
                ref, address, shape, strides, dtype = operand
                region_id, offset = ref if ref is not None else place(address)
                resolved.append((region_id, offset, shape, strides, dtype))
            spec.append((resolved[0], resolved[1], resolved[2], product[3],
                         product[4], product[5], product[6], resolved[2][4]))
        request = list_request(session_id, spec)
    except BaseException:
        if scratch is not None:
            pool.release(scratch)
        raise
    return _HostList(request, scratch, pool, copy_back)
