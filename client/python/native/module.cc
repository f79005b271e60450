// matmul_client._native: the C++ client's session and request ring for the
// Python package. matmul_client uses it, when it imports, for daemons on a
// unix socket; everything else (requests, regions, tensors) stays in
// Python.
#include "client/python/native/connection.h"
#include "client/python/native/ring.h"
#include "pybind11/pybind11.h"

PYBIND11_MODULE(_native, module) {
  module.doc() =
      "The C++ matmul client (session, request ring) for matmul_client.";
  matmul::python::BindConnection(module);
  matmul::python::BindRing(module);
}
