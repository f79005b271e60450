"""MatmulError, and the one place RPC failures become it."""

import grpc


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
