// matmul::python::WithoutGil: runs a step that may wait for another thread
// which itself may need the GIL (destroying a request ring joins its
// completion thread; ending a session waits for a gRPC thread), with the
// GIL released when the caller holds it.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_WITHOUT_GIL_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_WITHOUT_GIL_H_

#include "pybind11/pybind11.h"

namespace matmul::python {

template <typename Step>
void WithoutGil(Step step) {
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    step();
  } else {
    step();
  }
}

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_WITHOUT_GIL_H_
