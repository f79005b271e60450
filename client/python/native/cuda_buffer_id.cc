#include "client/python/native/cuda_buffer_id.h"

#include <cuda.h>

#include "absl/status/statusor.h"
#include "common/cuda_driver_api.h"
#include "pybind11/stl.h"

namespace matmul::python {

std::optional<uint64_t> CudaBufferId(uintptr_t address) {
  // Loaded once: the driver's entry points do not change while the process
  // runs.
  static const absl::StatusOr<CudaDriverApi> api = LoadCudaDriverApi();
  if (!api.ok()) return std::nullopt;
  unsigned long long id = 0;  // NOLINT(runtime/int): the driver's type
  if (api->pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 static_cast<CUdeviceptr>(address)) !=
      CUDA_SUCCESS) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(id);
}

void BindCudaBufferId(pybind11::module_& module) {
  module.def("cuda_buffer_id", &CudaBufferId, pybind11::arg("address"),
             "The CUDA driver's buffer id of the allocation holding the "
             "device address (unique per allocation for the life of the "
             "process); None where the driver does not say.");
}

}  // namespace matmul::python
