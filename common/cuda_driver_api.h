// The few CUDA driver entry points the region code needs on both sides
// (VMM create/export/import/map, address ranges), fetched at run time
// through the runtime's cudaGetDriverEntryPointByVersion. Linking libcuda
// directly would stop the daemon and the CLI from even starting on machines
// without an NVIDIA driver, where they must still work on the CPU.
#ifndef MATMUL_COMMON_CUDA_DRIVER_API_H_
#define MATMUL_COMMON_CUDA_DRIVER_API_H_

#include <cuda.h>

#include <string>

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
  decltype(&cuMemCreate) mem_create = nullptr;
  decltype(&cuMemExportToShareableHandle) mem_export = nullptr;
  decltype(&cuMemGetAllocationGranularity) mem_get_granularity = nullptr;
  // Stream memory operations: stream-ordered products (common/gemm/
  // stream_order.h).
  decltype(&cuStreamWaitValue32) stream_wait_value32 = nullptr;
  decltype(&cuStreamWriteValue32) stream_write_value32 = nullptr;
  // Which allocation holds an address (the Python client's stale-region
  // check).
  decltype(&cuPointerGetAttribute) pointer_get_attribute = nullptr;
  // Whether a context may be limited to some SMs: only an MPS client's
  // may (runtime/mps_client.h).
  decltype(&cuDeviceGetExecAffinitySupport) device_exec_affinity_support =
      nullptr;

  // "CUDA_ERROR_INVALID_VALUE: invalid argument"-style text for `result`.
  std::string ErrorText(CUresult result) const;
};

// FAILED_PRECONDITION when the driver or a symbol is missing.
absl::StatusOr<CudaDriverApi> LoadCudaDriverApi();

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of a device, as nvidia-smi -L
// prints it; empty when the device cannot be queried.
std::string CudaDeviceUuid(int device);

}  // namespace matmul

#endif  // MATMUL_COMMON_CUDA_DRIVER_API_H_
