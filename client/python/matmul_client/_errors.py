"""MatmulError, and the places RPC and ring failures become it."""

import grpc


class MatmulError(RuntimeError):
    """A failed product or RPC: `code` is the grpc.StatusCode, `details`
    the daemon's message (what was wrong and what was expected). The same
    whether the product went over gRPC or through the request ring."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _error_from_code(code, details):
    """MatmulError from a numeric status code (absl and gRPC share them);
    the native extension raises its failures through this."""
    return MatmulError(_CODES.get(code, grpc.StatusCode.UNKNOWN), details)


def _error_from_rpc(error):
    return MatmulError(error.code(), error.details())


def _call(method, request, timeout, **kwargs):
    try:
        return method(request, timeout=timeout, **kwargs)
    except grpc.RpcError as error:
        raise _error_from_rpc(error) from None
