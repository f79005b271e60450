// The client built without CUDA (MATMUL_CUDA=OFF): there is no GPU memory
// to register, so cuda_ipc and cuda_vmm modes say why they cannot run.
#include "absl/strings/str_cat.h"
#include "client/regions/cuda_memory.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<CudaMemory>> CudaMemory::Create(
    Kind kind, int64_t /*bytes*/, int /*device*/) {
  return absl::FailedPreconditionError(absl::StrCat(
      kind == Kind::kIpc ? "cuda_ipc" : "cuda_vmm",
      " memory is not available: this client was built without CUDA "
      "(MATMUL_CUDA=OFF); use shared memory instead"));
}

}  // namespace matmul
