// The few CUDA driver entry points the region code needs (address ranges
// and VMM import/map), fetched at run time through the runtime's
// cudaGetDriverEntryPointByVersion. Linking libcuda directly would stop the
// daemon from even starting on machines without an NVIDIA driver, where it
// must run on the CPU backend.
#ifndef MATMUL_SERVER_REGIONS_CUDA_DRIVER_API_H_
#define MATMUL_SERVER_REGIONS_CUDA_DRIVER_API_H_

#include <cuda.h>

#include "absl/status/statusor.h"

namespace matmul {

struct CudaDriverApi {
  decltype(&cuMemGetAddressRange) mem_get_address_range = nullptr;
  decltype(&cuMemImportFromShareableHandle) mem_import = nullptr;
  decltype(&cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&cuMemAddressFree) mem_address_free = nullptr;
  decltype(&cuMemMap) mem_map = nullptr;
  decltype(&cuMemUnmap) mem_unmap = nullptr;
  decltype(&cuMemSetAccess) mem_set_access = nullptr;
  decltype(&cuMemRelease) mem_release = nullptr;
  decltype(&cuGetErrorString) get_error_string = nullptr;

  // "CUDA_ERROR_INVALID_VALUE: invalid argument"-style text for `result`.
  std::string ErrorText(CUresult result) const;
};

// FAILED_PRECONDITION when the driver or a symbol is missing.
absl::StatusOr<CudaDriverApi> LoadCudaDriverApi();

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_DRIVER_API_H_
