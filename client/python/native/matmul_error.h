// Raising the package's matmul_client.MatmulError from the extension, so
// that a failed product reads the same whether it went through the request
// ring or through gRPC (absl status codes are gRPC's, one to one).
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_MATMUL_ERROR_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_MATMUL_ERROR_H_

#include "absl/status/status.h"
#include "pybind11/pybind11.h"

namespace matmul::python {

// matmul_client.MatmulError(code, message) for a non-OK `status`. Needs the
// GIL.
pybind11::object MatmulError(const absl::Status& status);

// Sets MatmulError(status) as the pending Python exception and throws
// pybind11::error_already_set. Needs the GIL.
[[noreturn]] void RaiseMatmulError(const absl::Status& status);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_MATMUL_ERROR_H_
