#include "server/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateBackend(
    const BackendOptions& options) {
  if (options.kind == "cpu" || options.kind == "auto") {
    return CpuBackend::Create();
  }
  if (options.kind == "cuda") {
    return absl::UnimplementedError("the cuda backend is not built yet");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", options.kind, "'; expected auto, cpu or cuda"));
}

}  // namespace matmul
