"""The client behind matmul_client: Client (its channel, products and
lifetime; sessions and regions come from the mixins) and matmul()."""

import atexit
import collections
import json
import os
import threading
import warnings
import weakref

import grpc

from ._cuda_product import _CudaProduct
from ._cuda_regions import _CudaRegions
from ._errors import MatmulError
from ._host_product import _HostProduct
from ._host_regions import _HostRegions
from ._in_flight import _InFlight
from ._inline_product import _InlineProduct
from ._operands import _Operand, _output_shape
from ._product_list import (
    _CudaList,
    _cuda_list_spec,
    _products_of,
    prepare_host_list,
)
from ._proto import matmul_pb2 as pb
from ._proto import matmul_pb2_grpc as pb_grpc
from ._scratch_pool import _ScratchPool
from ._session import _Session
from ._tensors import _ELEMENT_BYTES, BF16, FP32, _parse_dtype
from ._transports import _GrpcProducts, _load_native

_ALIGNMENT = 64  # bytes; every operand placed in a scratch region starts so
# gRPC's own round_robin over every address a target resolves to; a
# Matmul a draining daemon turns away unanswered is sent again, to another
# (inline products only, so sending one twice changes nothing): as the C++
# client's (client/client.cc).
_ROUND_ROBIN = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [{
        "name": [{"service": "matmul.v1.MatmulService", "method": "Matmul"}],
        "retryPolicy": {
            "maxAttempts": 3, "initialBackoff": "0.01s",
            "maxBackoff": "0.1s", "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]},
    }],
})


def _align(offset):
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


def _current_stream(device):
    """The current CUDA stream of device `device` (an index), as a
    cudaStream_t int; without making a torch.cuda.Stream where torch has
    the raw accessor."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return torch.cuda.current_stream(device).cuda_stream


# --- the client --------------------------------------------------------------

class Client(_Session, _HostRegions, _CudaRegions):
    """One connection to the daemon and one session on it.

    The session (an OpenSession stream) opens on first use and stays open
    until close(); the daemon releases every region of it when the stream
    ends, also when this process is killed. On a unix-socket target, when
    the native extension (matmul_client._native) is installed and
    MATMUL_CLIENT_NATIVE is not 0, the session is the C++ client's and
    products go through a request ring in shared memory; otherwise each is
    a gRPC call. Results and errors are the same either way (`transport`
    says which is used).
    Host operands are copied into scratch shm regions (one per product in
    flight, registered once and reused); tensors made by shared_tensor /
    shared_buffer are used in place. CUDA tensors are referenced by offset
    in their memory, registered once: a cudaMalloc block by its IPC handle
    (cuda_ipc), the expandable-segment chunks that hold a storage by their
    POSIX fds (cuda_vmm). Those registrations are forgotten (and
    unregistered) when torch gives memory of their device back to the
    driver (empty_cache, or an allocation retried after OOM).
    A target that is not a unix socket (host:port, a DNS name with several
    addresses such as a Kubernetes headless Service, "ipv4:a:p,b:p") may
    name daemons elsewhere, or several: host products then go inline,
    spread over them with gRPC's round_robin (inline_target), and what
    needs regions (CUDA tensors, shared_* tensors, the ring) goes to the
    daemon on this host, local_target (target then names it), with a
    warning the first time.
    Thread-safe; products of several threads, and matmul_async products of
    one, run concurrently."""

    _RING_SLOTS = 64  # products in flight through the ring at once
    # Idle scratch regions kept for reuse, in bytes together (the largest
    # is always kept).
    _SCRATCH_KEEP_BYTES = 512 << 20

    def __init__(self, target="unix:/run/matmul/matmul.sock", *, client_name=None,
                 timeout=60.0, max_message_bytes=256 << 20,
                 shm_prefix="matmul", connect_timeout=30.0,
                 tls_ca=None, tls_cert=None, tls_key=None,
                 ring_spin_us=None,
                 local_target="unix:/run/matmul/matmul.sock"):
        # Regions, sessions and rings stay on this host.
        self.inline_target = None
        if not target.startswith("unix:"):
            self.inline_target, target = target, local_target
        self.target = target
        self.timeout = timeout
        self.shm_prefix = shm_prefix
        self._connect_timeout = connect_timeout
        self._max_message_bytes = max_message_bytes
        # How long a product waiting in the ring polls before it sleeps (a
        # busy core, against a wake-up); None: the C++ client's default.
        self._ring_spin_us = ring_spin_us
        self._client_name = client_name or f"python pid {os.getpid()}"
        channel_options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if tls_ca is None and (tls_cert or tls_key):
            raise ValueError("a client certificate needs tls_ca, the CA "
                             "that signed the daemon's certificate")
        credentials = None
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
        self._inline_channel = self._inline_products = None
        if self.inline_target is not None:
            options = channel_options + [
                ("grpc.service_config", _ROUND_ROBIN),
                ("grpc.per_rpc_retry_buffer_size", max_message_bytes)]
            self._inline_channel = grpc.insecure_channel(
                self.inline_target, options=options) if credentials is None \
                else grpc.secure_channel(self.inline_target, credentials,
                                         options=options)
            self._inline_products = _GrpcProducts(
                pb_grpc.MatmulServiceStub(self._inline_channel))
            credentials = None  # the local daemon's unix socket
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials,
                                                options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target,
                                                  options=channel_options)
        self._stub = pb_grpc.MatmulServiceStub(self._channel)
        self._native = _load_native(target, secure=credentials is not None)
        self._lock = threading.RLock()
        self._session_call = None  # the OpenSession stream (gRPC session)
        self._connection = None  # the native session (_native.Connection)
        self._session_id = None
        # Replaced by the ring's when the native session opens.
        self._products = _GrpcProducts(self._stub)
        self._scratch = _ScratchPool(self._new_segment,
                                     self.unregister_region,
                                     keep=self._RING_SLOTS,
                                     keep_bytes=self._SCRATCH_KEEP_BYTES)
        self._in_flight = _InFlight()
        self._shared = []  # [(_SharedSegment, region id)] of shared_*()
        # ("ipc", device, cudaIpcMemHandle) or ("vmm", device, pid,
        # chunk bytes, fds) -> (region id, size, device)
        self._cuda_regions = {}
        # storage address -> (region id, storage's offset in the region,
        # region size, device, the allocation's buffer id or None)
        self._cuda_storages = {}
        # Devices with a cached storage of no buffer id (their freed bytes
        # are looked at on every product).
        self._cuda_unidentified = set()
        self._cuda_freed = {}  # device -> _freed_bytes at the last look
        self._cuda_next_freed_check = {}  # device -> time.monotonic()
        # Region ids made stale while the product being prepared was built
        # (it may still name them), then, once it is answered, those to
        # unregister (_unregister_retired).
        self._retired = []
        self._retired_done = collections.deque()
        # (ticket, _CudaProduct) of stream-ordered products with retired
        # regions, until the ring has answered the ticket.
        self._retired_on_answer = collections.deque()
        self._closed = False
        # False once the driver turned stream-ordered products down.
        self._stream_order_usable = True
        # The native extension's CudaFastPath.matmul once a stream-ordered
        # product went through the ring (None before; False where there is
        # none, or no longer): matmul's common case without this module's
        # Python (see _new_cuda_fast_path).
        self._cuda_fast_matmul = None
        self._cuda_fast_path = None  # its CudaFastPath (hits, misses)
        _live_clients.add(self)

    @property
    def transport(self):
        """"ring" (the native extension's request ring) or "grpc": how this
        client's products reach the daemon. Opens the session. "inline"
        where host products go inline to inline_target."""
        if self.inline_target is not None and not self._shared:
            return "inline"
        self.session_id  # noqa: B018 (the transport is chosen with it)
        return self._products.name

    # -- products --

    def matmul(self, a, b, out=None, transpose_b=False, transpose_a=False,
               alpha=1.0, beta=0.0, out_dtype=None, timeout=None,
               stream=None):
        """out = alpha * op(a) @ op(b) + beta * out, op = transpose or not.

        a is [M, K] ([K, M] with transpose_a), b is [K, N] ([N, K] with
        transpose_b: nn.Linear's weight), optionally with a leading batch
        dimension; any non-negative strides. BF16 inputs; the output is
        BF16 or FP32 (out_dtype, else out's dtype, else BF16). beta != 0
        needs out, whose values are read first. Returns out (a new tensor
        when None: torch for torch inputs, else a HostTensor).

        CUDA tensors through the request ring are stream-ordered, as a
        kernel launched on `stream` (default: the current stream) would be:
        the product runs after the work queued there before the call, the
        work queued after the call waits for it, and the call returns
        without waiting for the GPU. An error the daemon finds then raises
        at this client's next call or at synchronize(), and out is
        undefined. Over gRPC the call waits for the product instead."""
        fast = self._cuda_fast_matmul
        if fast:
            # Everything below in C++ where the operands are cached CUDA
            # storages; None where this path has to run (nothing was sent).
            try:
                queued = fast(self, a, b, out, transpose_b, transpose_a,
                              alpha, beta, out_dtype, timeout, stream)
            except MatmulError as error:
                if not self._stream_order_refused(error, stacklevel=3):
                    raise
                queued = None
            if queued is not None:
                return queued
        self._raise_stream_failures()
        product = self._prepare(a, b, out, transpose_b, transpose_a, alpha,
                                beta, out_dtype)
        if isinstance(product, _CudaProduct) and self._stream_ordered() and \
                self._queue_on_stream(product, timeout, stream):
            self._release_answered()
            self._unregister_retired()  # those earlier products gave back
            if self._cuda_fast_matmul is None:
                self._cuda_fast_path = self._new_cuda_fast_path()
                self._cuda_fast_matmul = self._cuda_fast_path and \
                    self._cuda_fast_path.matmul
            return product.out
        product.synchronize_inputs()
        try:
            response = self._transport_of(product).call(
                product.request, self.timeout if timeout is None else timeout)
            self.last_response = response
            return product.finish(response)
        finally:
            product.release()
            self._unregister_retired()

    def matmul_async(self, a, b, out=None, transpose_b=False,
                     transpose_a=False, alpha=1.0, beta=0.0, out_dtype=None,
                     timeout=None):
        """As matmul, without waiting for the answer: returns a
        concurrent.futures.Future of out. One thread can keep many products
        in flight this way (the daemon's batcher may run them together).
        Errors found while preparing the request raise here; the daemon's
        raise from the future's result(), and synchronize() raises the
        first one not raised yet. Operands must stay alive and unchanged,
        and out untouched, until the future is done."""
        self._release_answered()
        self._unregister_retired()
        product = self._prepare(a, b, out, transpose_b, transpose_a, alpha,
                                beta, out_dtype)
        if isinstance(product, _CudaProduct) and self._stream_ordered():
            future = self._call_on_stream(product, timeout)
            if future is not None:
                return future
        product.synchronize_inputs()
        future = self._in_flight.start()

        def done(response, error):
            result = None
            try:
                if error is None:
                    self.last_response = response
                    result = product.finish(response)
            except BaseException as failure:  # noqa: BLE001 (to the future)
                error = failure
            finally:
                product.release()
            self._in_flight.finish(future, result, error)

        try:
            self._transport_of(product).call_async(
                product.request, self.timeout if timeout is None else timeout,
                done)
        except BaseException:
            self._in_flight.abandon(future)
            product.release()
            raise
        return future

    def matmul_list(self, products, stream=None, timeout=None):
        """Runs a product list: several products as one request, run by
        the daemon in order on one stream, each as matmul's
        out = alpha * op(a) @ op(b) + beta * out.

        products: Product(a, b, out, transpose_a=False, transpose_b=False,
        alpha=1.0, beta=0.0) or plain tuples in that order. out is always
        given and says the output dtype. Operands are torch tensors, all
        CUDA or all CPU, or Scratch buffers of the daemon that live as long
        as the list (Scratch.new(shape, dtype) as an out makes one,
        Scratch(j, shape, dtype) reads or rewrites product j's). A product
        may read what an earlier one wrote, in a tensor or in scratch, and
        accumulate into its out with beta=1.

        CUDA tensors through the request ring: the whole list is
        stream-ordered as one product of matmul (after the work queued on
        `stream` before the call, the work queued later waiting for the
        last product) and the call returns at once; an error raises at a
        later call or at synchronize(). Otherwise the call returns once
        the list is done (CUDA over gRPC: after a device synchronize before
        sending). CPU tensors not made by shared_tensor are copied through
        a scratch shm region, the outputs copied back. Errors are the
        daemon's MatmulError, naming the product at fault ("product 2: B:
        ..."); limits in GetServerInfo's max_list_products and
        max_list_scratch_bytes. Returns None: the outputs are the
        caller's."""
        self._raise_stream_failures()
        items, cuda = _products_of(products)
        if cuda:
            prepared = self._prepare_cuda_list(items)
            if self._stream_ordered() and \
                    self._queue_on_stream(prepared, timeout, stream):
                self._release_answered()
                self._unregister_retired()
                return None
        else:
            prepared = prepare_host_list(items, self.session_id,
                                         self._shared_bytes_ref,
                                         self._scratch)
        prepared.synchronize_inputs()
        try:
            response = self._products.call(
                prepared.request, self.timeout if timeout is None else timeout)
            self.last_response = response
            return prepared.finish(response)
        finally:
            prepared.release()
            self._unregister_retired()

    def _prepare_cuda_list(self, items):
        device = None
        for product in items:
            for value in product[:3]:
                if hasattr(value, "get_device"):
                    device = value.get_device()
                    break
            if device is not None:
                break
        with self._lock:
            session_id = self.session_id
            self._check_freed_cuda_memory((device,))
            spec = _cuda_list_spec(items, self._cuda_ref, self)
            retired, self._retired = self._retired, []
        return _CudaList(session_id, spec, device, retired,
                         self._retired_done)

    def _shared_bytes_ref(self, address, nbytes):
        """(region id, offset) of bytes inside a shared_* region, or None."""
        with self._lock:
            shared = list(self._shared)
        for segment, region_id in shared:
            if segment.contains(address, nbytes):
                return region_id, address - segment.address
        return None

    def _transport_of(self, product):
        """Where `product` goes: inline products over the round_robin
        channel of inline_target, the rest to this host's daemon."""
        if isinstance(product, _InlineProduct):
            return self._inline_products
        return self._products

    def _open_session(self):
        if self.inline_target is not None:
            warnings.warn(f"regions stay on their host: this client's "
                          f"regions, session and ring go to the daemon on "
                          f"this host, {self.target}, not to "
                          f"{self.inline_target}", RuntimeWarning,
                          stacklevel=5)
        super()._open_session()

    def _stream_ordered(self):
        """True while CUDA products go through the ring stream-ordered."""
        return self._stream_order_usable and \
            hasattr(self._products, "call_on_stream")

    def _queue_on_stream(self, product, timeout, stream):
        """Queues a CUDA product on `stream` (a torch.cuda.Stream; None: the
        current one), the work queued there later waiting for it, and
        returns True without waiting: the ring keeps its outcome, and its
        error raises at a later call (_raise_stream_failures). False, for
        this and every later product, where the driver cannot order it (the
        caller then takes the synchronizing path)."""
        raw_stream = _current_stream(product.device_index) if stream is None \
            else stream.cuda_stream
        try:
            ticket = self._products.queue_on_stream(
                product.spec, raw_stream,
                self.timeout if timeout is None else timeout,
                self._in_flight.number())
        except MatmulError as error:
            if not self._stream_order_refused(error):
                product.release()
                raise
            return False
        if product.retired:
            with self._lock:
                self._retired_on_answer.append((ticket, product))
        return True

    def _call_on_stream(self, product, timeout):
        """matmul_async of CUDA tensors: the product after the work queued
        on the current stream before it, holding up nothing queued later;
        returns its future without waiting, or None as _queue_on_stream
        returns False."""
        future = self._in_flight.start()

        def done(_, error):
            product.release()
            self._in_flight.finish(future, product.out, error)

        try:
            self._products.call_on_stream(
                product.spec, _current_stream(product.device_index),
                self.timeout if timeout is None else timeout, done)
        except MatmulError as error:
            self._in_flight.abandon(future)
            if not self._stream_order_refused(error):
                product.release()
                raise
            return None
        return future

    def _new_cuda_fast_path(self):
        """The native CudaFastPath of this client, or False where there is
        none (an extension without it, products not through a
        native ring). It reads this client's caches and hands back to the
        Python path whatever is not the common case (see
        native/cuda_fast_path.h)."""
        queue = getattr(self._products, "stream_queue", None)
        native = self._native
        if queue is None or native is None or \
                not hasattr(native, "CudaFastPath"):
            return False
        import torch
        current_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                                 None) or _current_stream
        # The buffer ids the cache holds are those of _cuda_buffer_id: the
        # driver's, which the extension asks itself, unless a stand-in
        # replaced it (tests).
        buffer_id = self.__dict__.get("_cuda_buffer_id")
        return native.CudaFastPath(
            queue, self._session_id, self._lock,
            self._in_flight.number_source(), self._retired_done,
            self._retired_on_answer, current_stream, torch.empty,
            {torch.bfloat16: BF16, torch.float32: FP32}, buffer_id)

    def _stream_order_refused(self, error, stacklevel=4):
        """True when `error` (raised before a stream-ordered product was
        sent) says the driver cannot order products: stream order is off
        from then on, with a warning."""
        if error.code != grpc.StatusCode.FAILED_PRECONDITION:
            return False
        warnings.warn(f"stream-ordered products are unavailable "
                      f"({error.details}); CUDA products synchronize "
                      "the device instead", RuntimeWarning,
                      stacklevel=stacklevel)
        self._stream_order_usable = False
        self._cuda_fast_matmul = False
        return True

    def _raise_stream_failures(self):
        """Raises the first error of the stream-ordered products that
        failed since the last call (see _InFlight.raise_failures)."""
        self._in_flight.add_stream_failures(self._products.stream_failures())
        self._in_flight.raise_failures(hidden_only=True)

    def _release_answered(self):
        """Releases the stream-ordered products that the ring has answered
        and that hold retired regions (for _unregister_retired)."""
        if not self._retired_on_answer:
            return
        answered_through = self._products.answered_through()
        with self._lock:
            while self._retired_on_answer and \
                    self._retired_on_answer[0][0] < answered_through:
                self._retired_on_answer.popleft()[1].release()

    def synchronize(self):
        """Waits for every product of this client in flight (matmul_async,
        stream-ordered matmul: until each is complete), then raises the
        first error among them, in the order they were sent, that was not
        raised yet (by a future's result() or an earlier synchronize());
        the failures after it count as reported with it."""
        try:
            self._in_flight.wait()
            self._products.wait_stream_calls()
            self._in_flight.add_stream_failures(
                self._products.stream_failures())
            self._in_flight.raise_failures()
        finally:
            self._release_answered()
            self._unregister_retired()

    def _prepare(self, a, b, out, transpose_b, transpose_a, alpha, beta,
                 out_dtype):
        """The product ready to send: its request, finish(response) and
        release() (see _HostProduct, _CudaProduct)."""
        a_op, b_op = _Operand(a, "a"), _Operand(b, "b")
        shape = _output_shape(a_op, b_op, transpose_a, transpose_b)
        out_op = None
        if out is not None:
            out_op = _Operand(out, "out")
            if out_dtype is not None and _parse_dtype(out_dtype) != out_op.dtype:
                raise ValueError("out_dtype differs from out's dtype")
        elif beta != 0.0:
            raise ValueError("beta != 0 needs out (the C it scales)")
        if out_op is not None:
            dtype = out_op.dtype
        else:
            dtype = BF16 if not out_dtype else _parse_dtype(out_dtype)
        options = (transpose_a, transpose_b, alpha, beta, dtype)
        if a_op.cuda or b_op.cuda or (out_op is not None and out_op.cuda):
            return self._prepare_cuda(a_op, b_op, out_op, shape, options)
        return self._prepare_host(a_op, b_op, out_op, shape, options)

    def _prepare_cuda(self, a_op, b_op, out_op, shape, options):
        if not (a_op.cuda and b_op.cuda and (out_op is None or out_op.cuda)):
            raise ValueError("a, b and out must all be CUDA tensors, or all "
                             "host tensors")
        if (out_op is not None and out_op.shared) or a_op.shared:
            raise ValueError("a SharedWeight is read as b only")
        if out_op is None:
            import torch
            out_op = _Operand(torch.empty(
                shape, device=a_op.value.device,
                dtype=torch.bfloat16 if options[4] == BF16 else torch.float32),
                "out")
        operands = (a_op, b_op, out_op)
        with self._lock:
            session_id = self.session_id
            self._check_freed_cuda_memory(
                {op.value.get_device() for op in operands if not op.shared})
            refs = [op.value._ref(self) if op.shared else self._cuda_ref(op)
                    for op in operands]
            retired, self._retired = self._retired, []
        spec = tuple((region_id, offset, op.shape, op.strides, op.dtype)
                     for op, (region_id, offset) in zip(operands, refs))
        return _CudaProduct(session_id, spec + options, out_op.value, retired,
                            self._retired_done)

    def _prepare_host(self, a_op, b_op, out_op, shape, options):
        if self.inline_target is not None and not self._shared:
            return _InlineProduct(a_op, b_op, out_op, shape, options,
                                  a_op.torch)
        transpose_a, transpose_b, alpha, beta, dtype = options
        request = pb.MatmulRequest(transpose_a=transpose_a,
                                   transpose_b=transpose_b, alpha=alpha,
                                   beta=beta, out_dtype=dtype)
        with self._lock:
            request.session_id = self.session_id
            refs = [self._shared_ref(op) if op else None
                    for op in (a_op, b_op, out_op)]
        # Everything not already in a shared region goes to a scratch one.
        dense_out = 1
        for d in shape:
            dense_out *= d
        dense_out *= _ELEMENT_BYTES[dtype]
        placements, end = [], 0
        for ref, nbytes in ((refs[0], a_op.nbytes), (refs[1], b_op.nbytes),
                            (refs[2], out_op.nbytes if out_op else dense_out)):
            if ref is None:
                end = _align(end)
                placements.append(end)
                end += nbytes
            else:
                placements.append(None)
        scratch = self._scratch.acquire(end) if end else None
        product = _HostProduct(request, scratch, self._scratch, out_op,
                               placements[2], shape, dtype, dense_out,
                               a_op.torch)
        try:
            for op, ref, offset, field in ((a_op, refs[0], placements[0],
                                            request.a),
                                           (b_op, refs[1], placements[1],
                                            request.b)):
                if ref is None:
                    op.read_into(scratch[0], offset)
                    ref = (scratch[1], offset)
                field.CopyFrom(op.tensor(*ref))
            if out_op is not None:
                if refs[2] is None:
                    # The whole extent, so elements between strided rows
                    # come back unchanged when it is copied back.
                    out_op.read_into(scratch[0], placements[2])
                    request.c.CopyFrom(out_op.tensor(scratch[1],
                                                     placements[2]))
                else:
                    request.c.CopyFrom(out_op.tensor(*refs[2]))
            else:
                request.c.CopyFrom(pb.Tensor(
                    dtype=dtype, shape=shape,
                    region=pb.RegionRef(region_id=scratch[1],
                                        offset_bytes=placements[2])))
        except BaseException:
            product.release()
            raise
        return product

    def _unregister_retired(self):
        """Unregisters the regions that answered products made stale."""
        while self._retired_done:
            try:
                region_id = self._retired_done.popleft()
            except IndexError:  # another thread took the last one
                return
            self.unregister_region(region_id)

    # -- lifetime --

    def close(self):
        """Waits for the products in flight, unregisters the regions, ends
        the session (the daemon would release its regions anyway) and
        closes the channel."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cuda_fast_matmul = False
        self._in_flight.wait()
        self._products.wait_stream_calls()
        with self._lock:
            segments = [s for s, _ in self._shared] + self._scratch.close()
            self._shared = []
            self._cuda_regions, self._cuda_storages = {}, {}
            self._cuda_unidentified = set()
            self._cuda_freed, self._cuda_next_freed_check = {}, {}
            self._retired_on_answer.clear()
            self._products.close()
            self._connection = None  # ends the native session
            if self._session_call is not None:
                self._session_call.cancel()
            for segment in segments:
                segment.close()
            self._channel.close()
            if self._inline_channel is not None:
                self._inline_channel.close()

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
    # Without the lock when it exists (a dict read is atomic): the
    # module-level matmul asks on every call.
    client = _default_clients.get(target)
    if client is not None:
        return client
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


# Every client still open at exit is closed then, default or not: a request
# ring's completion thread must not outlive the interpreter.
_live_clients = weakref.WeakSet()


def _close_live_clients():
    close_default_clients()
    for client in list(_live_clients):
        client.close()


atexit.register(_close_live_clients)


def matmul_list(products, target="unix:/run/matmul/matmul.sock", stream=None,
                timeout=None):
    """A product list on the daemon at `target`; see Client.matmul_list."""
    return default_client(target).matmul_list(products, stream=stream,
                                              timeout=timeout)


def matmul(a, b, out=None, transpose_b=False, transpose_a=False, alpha=1.0,
           beta=0.0, out_dtype=None, target="unix:/run/matmul/matmul.sock",
           stream=None):
    """alpha * op(a) @ op(b) + beta * out on the daemon at `target`; see
    Client.matmul. matmul(x, w, transpose_b=True) is x @ w.T (nn.Linear)."""
    return default_client(target).matmul(
        a, b, out=out, transpose_b=transpose_b, transpose_a=transpose_a,
        alpha=alpha, beta=beta, out_dtype=out_dtype, stream=stream)
