#include "server/backend_factory.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateBackend(
    const BackendOptions& options) {
  const bool want_cuda =
      options.kind == "cuda" ||
      (options.kind == "auto" && cuda::CudaDeviceCount() > 0);
  if (want_cuda) {
    cuda::CudaBackendOptions cuda_options;
    cuda_options.device = options.cuda_device;
    cuda_options.tuning_cache_path = options.tuning_cache;
    cuda_options.streams = options.cuda_streams;
    cuda_options.serial_min_gflop_per_sm = options.cuda_serial_min_gflop_per_sm;
    cuda_options.test_only_inject_fault_after =
        options.test_only_inject_gpu_fault_after;
    cuda_options.test_only_memory_headroom_bytes =
        options.test_only_gpu_memory_headroom_bytes;
    return cuda::CreateCudaBackend(cuda_options);
  }
  if (options.kind == "cpu" || options.kind == "auto") {
    return CpuBackend::Create(options.cpu_threads);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", options.kind, "'; expected auto, cpu or cuda"));
}

absl::StatusOr<std::vector<std::unique_ptr<GemmBackend>>> CreateBackends(
    const BackendOptions& options) {
  std::vector<int> devices;
  if (options.cuda_devices == "all") {
    for (int d = 0; d < cuda::CudaDeviceCount(); ++d) devices.push_back(d);
    if (devices.empty()) {
      return absl::UnavailableError("--cuda_devices=all: no CUDA device");
    }
  } else if (!options.cuda_devices.empty()) {
    for (absl::string_view part :
         absl::StrSplit(options.cuda_devices, ',', absl::SkipWhitespace())) {
      int device = 0;
      if (!absl::SimpleAtoi(part, &device) || device < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cuda_devices: '", part,
                         "' is not a device ordinal; expected all or 0,1,..."));
      }
      if (std::find(devices.begin(), devices.end(), device) != devices.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cuda_devices names device ", device, " twice"));
      }
      devices.push_back(device);
    }
  }
  std::vector<std::unique_ptr<GemmBackend>> backends;
  if (devices.size() <= 1) {
    BackendOptions one = options;
    if (!devices.empty()) one.cuda_device = devices.front();
    ASSIGN_OR_RETURN(std::unique_ptr<GemmBackend> backend, CreateBackend(one));
    backends.push_back(std::move(backend));
    return backends;
  }
  if (options.kind == "cpu") {
    return absl::InvalidArgumentError(
        "--cuda_devices names several GPUs but --backend is cpu");
  }
  for (int device : devices) {
    BackendOptions one = options;
    one.kind = "cuda";
    one.cuda_device = device;
    ASSIGN_OR_RETURN(std::unique_ptr<GemmBackend> backend, CreateBackend(one));
    backends.push_back(std::move(backend));
  }
  return backends;
}

}  // namespace matmul
