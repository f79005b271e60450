#include "server/backends/backend_factory.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/backends/cuda_backend_factory.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateBackend(
    const BackendOptions& options) {
  const bool want_cuda = options.kind == "cuda" ||
                         (options.kind == "auto" && CudaDevicesPresent() > 0);
  if (want_cuda) return CreateCudaBackendFromOptions(options);
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
    for (int d = 0; d < CudaDevicesPresent(); ++d) devices.push_back(d);
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
    if (!devices.empty()) one.cuda.device = devices.front();
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
    one.cuda.device = device;
    ASSIGN_OR_RETURN(std::unique_ptr<GemmBackend> backend, CreateBackend(one));
    backends.push_back(std::move(backend));
  }
  return backends;
}

}  // namespace matmul
