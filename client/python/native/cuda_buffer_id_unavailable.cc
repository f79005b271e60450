// CudaBufferId in an extension built without CUDA: no buffer ids (the
// Python client then looks at torch's freed bytes on every product).
#include "client/python/native/cuda_buffer_id.h"
#include "pybind11/stl.h"

namespace matmul::python {

std::optional<uint64_t> CudaBufferId(uintptr_t /*address*/) {
  return std::nullopt;
}

void BindCudaBufferId(pybind11::module_& module) {
  module.def("cuda_buffer_id", &CudaBufferId, pybind11::arg("address"),
             "None: this extension was built without CUDA.");
}

}  // namespace matmul::python
