"""The Client's session on the daemon and its region RPCs."""

import threading
import warnings

import grpc

from ._errors import MatmulError, _call
from ._proto import matmul_pb2 as pb
from ._transports import _RingProducts


class _Session:
    """Part of Client: the OpenSession stream, opened on first use, and the
    RPCs that name the session. Uses the Client's target, timeout,
    _connect_timeout, _client_name, _max_message_bytes, _ring_spin_us,
    shm_prefix, _stub, _native, _lock, _session_call, _connection,
    _products, _session_id and _closed (made in Client.__init__). With the
    native extension the session is the C++ client's, and products go
    through a request ring attached to it; region RPCs go over this stub
    either way."""

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
        if self._native is not None:
            self._open_native_session()
            return
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

    def _open_native_session(self):
        connection = self._native.Connection(
            self.target, self._client_name,
            connect_timeout=self._connect_timeout,
            max_message_bytes=self._max_message_bytes)
        self._connection = connection  # holding it keeps the session open
        self._session_id = connection.session_id
        spin = {} if self._ring_spin_us is None else \
            {"spin_us": self._ring_spin_us}
        try:
            ring = self._native.Ring(connection, slots=self._RING_SLOTS,
                                     shm_prefix=self.shm_prefix,
                                     timeout=self._connect_timeout, **spin)
        except MatmulError as error:
            # The daemon refused a ring (--max_rings reached, say): the
            # session is fine, and products go over gRPC as elsewhere.
            warnings.warn(f"the daemon attached no request ring ({error}); "
                          "products go over gRPC", RuntimeWarning,
                          stacklevel=4)
            return
        self._products = _RingProducts(ring)

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

    def share_region(self, region_id, access=pb.SHARE_ACCESS_SAME_USER):
        """ShareRegion: the token other processes' sessions register the
        region with (RegisterRegionRequest.shared)."""
        return _call(self._stub.ShareRegion,
                     pb.ShareRegionRequest(session_id=self.session_id,
                                           region_id=region_id,
                                           access=access),
                     self.timeout).token

    def list_regions(self):
        return list(_call(self._stub.ListRegions,
                          pb.ListRegionsRequest(session_id=self.session_id),
                          self.timeout).regions)

    def server_info(self):
        return _call(self._stub.GetServerInfo, pb.GetServerInfoRequest(),
                     self.timeout, wait_for_ready=True)
