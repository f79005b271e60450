#include "client/python/native/matmul_error.h"

#include <string>

namespace matmul::python {

pybind11::object MatmulError(const absl::Status& status) {
  namespace py = pybind11;
  // The package maps the numeric code onto grpc.StatusCode (one place for
  // both paths: matmul_client/_errors.py).
  py::object from_code =
      py::module_::import("matmul_client._errors").attr("_error_from_code");
  return from_code(static_cast<int>(status.code()),
                   std::string(status.message()));
}

void RaiseMatmulError(const absl::Status& status) {
  pybind11::object error = MatmulError(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw pybind11::error_already_set();
}

}  // namespace matmul::python
