#include "common/cuda_driver_api.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace matmul {
namespace {

// The driver API version whose signatures the decltypes above describe.
constexpr unsigned int kDriverApiVersion = 12000;

template <typename Function>
absl::Status Load(const char* symbol, Function* function) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t error = cudaGetDriverEntryPointByVersion(
      symbol, &pointer, kDriverApiVersion, cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess ||
      pointer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver has no ", symbol, " (", cudaGetErrorString(error),
        "); is an NVIDIA driver for CUDA 12 or later installed?"));
  }
  *function = reinterpret_cast<Function>(pointer);
  return absl::OkStatus();
}

}  // namespace

std::string CudaDriverApi::ErrorText(CUresult result) const {
  const char* text = nullptr;
  if (get_error_string != nullptr) get_error_string(result, &text);
  return absl::StrCat("CUresult ", static_cast<int>(result), ": ",
                      text != nullptr ? text : "unknown error");
}

absl::StatusOr<CudaDriverApi> LoadCudaDriverApi() {
  CudaDriverApi api;
  for (absl::Status status :
       {Load("cuMemGetAddressRange", &api.mem_get_address_range),
        Load("cuMemImportFromShareableHandle", &api.mem_import),
        Load("cuMemAddressReserve", &api.mem_address_reserve),
        Load("cuMemAddressFree", &api.mem_address_free),
        Load("cuMemMap", &api.mem_map), Load("cuMemUnmap", &api.mem_unmap),
        Load("cuMemSetAccess", &api.mem_set_access),
        Load("cuMemRelease", &api.mem_release),
        Load("cuGetErrorString", &api.get_error_string),
        Load("cuMemCreate", &api.mem_create),
        Load("cuMemExportToShareableHandle", &api.mem_export),
        Load("cuMemGetAllocationGranularity", &api.mem_get_granularity),
        Load("cuStreamWaitValue32", &api.stream_wait_value32),
        Load("cuStreamWriteValue32", &api.stream_write_value32),
        Load("cuPointerGetAttribute", &api.pointer_get_attribute),
        Load("cuDeviceGetExecAffinitySupport",
             &api.device_exec_affinity_support)}) {
    if (!status.ok()) return status;
  }
  return api;
}

std::string CudaDeviceUuid(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) return "";
  const auto* b = reinterpret_cast<const unsigned char*>(props.uuid.bytes);
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%"
      "02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

}  // namespace matmul
