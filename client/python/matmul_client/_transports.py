"""How products reach the daemon: through the native extension's request
ring (a daemon on this host, over a unix socket) or as gRPC calls. Both
take a MatmulRequest and give a MatmulResponse, or raise MatmulError with
the same code and message for the same failure. Only the ring queues CUDA
products on a stream (given as _CudaProduct.spec, built into a request in
C++)."""

import importlib
import os
import warnings

import grpc

from ._errors import MatmulError, _call, _error_from_rpc
from ._proto import matmul_pb2 as pb


def _load_native(target, secure):
    """matmul_client._native when products to `target` should go through
    it: a unix-socket target without TLS, the extension built, and not
    turned off with MATMUL_CLIENT_NATIVE=0. None otherwise."""
    if os.environ.get("MATMUL_CLIENT_NATIVE", "1") == "0":
        return None
    if secure or not target.startswith("unix:"):
        return None
    name = __package__ + "._native"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name == name:
            return None  # installed without it (setup.py said why)
        unusable = error
    except ImportError as error:
        unusable = error
    # Built but unusable (a library missing since): say so, and go on over
    # gRPC.
    warnings.warn(f"matmul_client._native does not load ({unusable}); "
                  "products go over gRPC", RuntimeWarning, stacklevel=3)
    return None


class _GrpcProducts:
    """Products as unary gRPC calls on the client's stub."""

    name = "grpc"

    def __init__(self, stub):
        self._stub = stub

    def call(self, request, timeout):
        return _call(self._stub.Matmul, request, timeout)

    def call_async(self, request, timeout, done):
        """Sends `request`; done(response, None) or done(None, MatmulError)
        runs later on a gRPC thread."""
        future = self._stub.Matmul.future(request, timeout=timeout)

        def finished(future):
            try:
                response = future.result()
            except grpc.RpcError as error:
                done(None, _error_from_rpc(error))
            except grpc.FutureCancelledError:
                done(None, MatmulError(grpc.StatusCode.CANCELLED,
                                       "the call was cancelled"))
            else:
                done(response, None)

        future.add_done_callback(finished)

    def stream_failures(self):
        """No stream-ordered products go over gRPC."""
        return ()

    def wait_stream_calls(self):
        pass

    def close(self):
        pass  # the channel closes with the client


# A ring call always has a deadline; "no timeout" (None) becomes this one.
_NO_TIMEOUT_SECONDS = 365 * 24 * 3600.0


def _ring_timeout(timeout):
    return _NO_TIMEOUT_SECONDS if timeout is None else float(timeout)


class _RingProducts:
    """Products through a request ring of the native extension: no gRPC
    call each, and the GIL is free while one waits."""

    name = "ring"

    def __init__(self, ring):
        self._ring = ring

    @property
    def stream_queue(self):
        """The native Ring, for the fast path of CUDA products."""
        return self._ring

    def call(self, request, timeout):
        return pb.MatmulResponse.FromString(
            self._ring.call(request.SerializeToString(),
                            _ring_timeout(timeout)))

    def call_async(self, request, timeout, done):
        """Sends `request`; done(response, None) or done(None, MatmulError)
        runs later on the ring's completion thread."""
        def finished(data, error):
            done(None if data is None else pb.MatmulResponse.FromString(data),
                 error)

        self._ring.call_async(request.SerializeToString(),
                              _ring_timeout(timeout), finished)

    def queue_on_stream(self, product, stream, timeout, number):
        """Queues a CUDA product (its _CudaProduct.spec) on the CUDA
        stream `stream` (a cudaStream_t as an int), the stream's later work
        waiting for it, and returns its ticket without waiting. Its answer
        runs no Python: answered_through() says when it came, and a failure
        comes back from stream_failures() with `number`. Raises MatmulError
        for what fails before sending (FAILED_PRECONDITION without a usable
        CUDA driver)."""
        return self._ring.queue_on_stream(product, stream,
                                          _ring_timeout(timeout), number)

    def call_on_stream(self, product, stream, timeout, done):
        """Queues a CUDA product after the work queued on `stream` so far,
        without holding up the stream's later work, and returns without
        waiting; done(None, None) or done(None, MatmulError) runs once the
        daemon answered. Raises as queue_on_stream."""
        self._ring.call_on_stream(product, stream, _ring_timeout(timeout),
                                  False, done)

    def stream_failures(self):
        """(number, MatmulError) of the queue_on_stream products that
        failed since the last call, in the order they were sent."""
        failures = self._ring.take_stream_failures()
        return [(number, error) for _, number, error in failures] \
            if failures else ()

    def answered_through(self):
        """Every queue_on_stream ticket below this one is answered."""
        return self._ring.answered_through()

    def wait_stream_calls(self):
        """Waits until every queue_on_stream product sent so far is
        answered (each within its own timeout)."""
        self._ring.wait_stream_calls()

    def close(self):
        """Detaches the ring; products still in flight fail (CANCELLED)."""
        self._ring.close()
