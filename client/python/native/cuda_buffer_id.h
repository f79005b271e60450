// matmul::python::CudaBufferId: which CUDA allocation holds an address, as
// the driver numbers allocations (CU_POINTER_ATTRIBUTE_BUFFER_ID: unique
// per allocation for the life of the process). The Python client caches a
// region per storage address; the same address with another buffer id is
// other memory (torch freed the block and allocated a new one there), so
// the cached region is stale.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_CUDA_BUFFER_ID_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_CUDA_BUFFER_ID_H_

#include <cstdint>
#include <optional>

#include "pybind11/pybind11.h"

namespace matmul::python {

// The buffer id of the allocation at `address`; nullopt where the driver
// does not say (no CUDA driver, a build without CUDA, an address the
// driver does not know).
std::optional<uint64_t> CudaBufferId(uintptr_t address);

// Adds cuda_buffer_id(address) -> int or None to the module.
void BindCudaBufferId(pybind11::module_& module);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_CUDA_BUFFER_ID_H_
