#include "kernels/cuda/own_kernels.h"

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

#ifdef MATMUL_HAVE_MMA
#include "kernels/mma/mma_gemm.h"
#endif

namespace matmul::cuda {
namespace {

#ifdef MATMUL_HAVE_MMA
std::vector<OwnKernel> BuildList() {
  std::vector<OwnKernel> list;
  const auto& configs = mma::AllConfigs();
  for (size_t i = 0; i < configs.size(); ++i) {
    const mma::TileConfig& c = configs[i];
    std::string name = c.Name();
    if (!absl::StartsWith(name, "mma")) name = absl::StrCat("mma_", name);
    list.push_back(OwnKernel{static_cast<int>(i), std::move(name),
                             absl::StrCat("mma_", c.block_m, "x", c.block_n),
                             c.SharedBytes(), c.block_m, c.block_n});
  }
  return list;
}

absl::StatusOr<const mma::TileConfig*> ConfigAt(int index) {
  const auto& configs = mma::AllConfigs();
  if (index < 0 || index >= static_cast<int>(configs.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("own kernel index ", index, " out of range"));
  }
  return &configs[index];
}
#endif

}  // namespace

bool HaveOwnKernels() {
#ifdef MATMUL_HAVE_MMA
  return true;
#else
  return false;
#endif
}

const std::vector<OwnKernel>& OwnKernels() {
#ifdef MATMUL_HAVE_MMA
  static const std::vector<OwnKernel>* const list =
      new std::vector<OwnKernel>(BuildList());
#else
  static const std::vector<OwnKernel>* const list = new std::vector<OwnKernel>;
#endif
  return *list;
}

absl::Status OwnCanImplement(const GemmProblem& problem, int index,
                             int max_shared_bytes) {
#ifdef MATMUL_HAVE_MMA
  ASSIGN_OR_RETURN(const mma::TileConfig* config, ConfigAt(index));
  return mma::CanImplement(problem, *config, max_shared_bytes);
#else
  (void)problem, (void)index, (void)max_shared_bytes;
  return absl::UnimplementedError("the mma kernel library is not built in");
#endif
}

size_t OwnWorkspaceBytes(const GemmProblem& problem, int index) {
#ifdef MATMUL_HAVE_MMA
  auto config = ConfigAt(index);
  return config.ok() ? mma::WorkspaceBytes(problem, **config) : 0;
#else
  (void)problem, (void)index;
  return 0;
#endif
}

absl::Status OwnRun(const GemmProblem& problem, int index, cudaStream_t stream,
                    void* workspace) {
#ifdef MATMUL_HAVE_MMA
  ASSIGN_OR_RETURN(const mma::TileConfig* config, ConfigAt(index));
  return mma::Run(problem, *config, stream, workspace);
#else
  (void)problem, (void)index, (void)stream, (void)workspace;
  return absl::UnimplementedError("the mma kernel library is not built in");
#endif
}

absl::StatusOr<int> MaxSharedBytesOptin(int device) {
  int bytes = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaDeviceGetAttribute(
                     &bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                 "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)"));
  return bytes;
}

}  // namespace matmul::cuda
