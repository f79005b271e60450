"""The client behind matmul_client: Client (its channel, products and
lifetime; sessions and regions come from the mixins) and matmul()."""

import atexit
import ctypes
import os
import threading

import grpc

from ._cuda_regions import _CudaRegions
from ._errors import _call
from ._host_regions import _HostRegions
from ._operands import _Operand, _output_shape
from ._proto import matmul_pb2 as pb
from ._proto import matmul_pb2_grpc as pb_grpc
from ._session import _Session
from ._tensors import _ELEMENT_BYTES, BF16, HostTensor, _parse_dtype

_ALIGNMENT = 64  # bytes; every operand placed in the scratch region starts so


def _align(offset):
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


# --- the client --------------------------------------------------------------

class Client(_Session, _HostRegions, _CudaRegions):
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
