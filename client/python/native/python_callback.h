// matmul::python::PythonCallback: owns a reference to a Python callable that
// is invoked, and may be destroyed, on a thread that does not hold the GIL
// (the request ring's completion thread, a gRPC thread). Moving it touches
// no reference count, so it can travel through C++ callbacks without the
// GIL; releasing the reference takes the GIL.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_PYTHON_CALLBACK_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_PYTHON_CALLBACK_H_

#include <utility>

#include "pybind11/pybind11.h"

namespace matmul::python {

class PythonCallback {
 public:
  // Takes a new reference to `callable`; needs the GIL.
  explicit PythonCallback(const pybind11::object& callable)
      : callable_(callable.inc_ref().ptr()) {}

  PythonCallback(PythonCallback&& other) noexcept
      : callable_(std::exchange(other.callable_, nullptr)) {}
  PythonCallback& operator=(PythonCallback&& other) noexcept {
    if (this != &other) {
      Release();
      callable_ = std::exchange(other.callable_, nullptr);
    }
    return *this;
  }
  PythonCallback(const PythonCallback&) = delete;
  PythonCallback& operator=(const PythonCallback&) = delete;

  ~PythonCallback() { Release(); }

  // Calls the callable once with `args` and drops the reference; needs the
  // GIL. An exception it raises cannot propagate into the C++ thread that
  // called: it is reported as unraisable (printed, like an exception in a
  // __del__).
  template <typename... Args>
  void CallOnce(Args&&... args) {
    pybind11::object callable = pybind11::reinterpret_steal<pybind11::object>(
        std::exchange(callable_, nullptr));
    try {
      callable(std::forward<Args>(args)...);
    } catch (pybind11::error_already_set& error) {
      error.discard_as_unraisable("matmul_client._native callback");
    }
  }

 private:
  void Release() {
    if (callable_ == nullptr) return;
    pybind11::gil_scoped_acquire acquire;
    Py_DECREF(std::exchange(callable_, nullptr));
  }

  PyObject* callable_ = nullptr;
};

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_PYTHON_CALLBACK_H_
