#include "kernels/cuda/families/run_choice.h"

#include "common/status_macros.h"

namespace matmul::cuda {

absl::Status RunChoice(const KernelChoice& choice, const GemmProblem& problem,
                       cudaStream_t stream, DeviceBuffer& workspace) {
  GemmFamily& family = *choice.family;
  ASSIGN_OR_RETURN(size_t bytes, family.WorkspaceBytes(choice, problem));
  RETURN_IF_ERROR(workspace.Reserve(bytes));
  return family.Run(choice, problem, stream, workspace.data(),
                    workspace.size());
}

}  // namespace matmul::cuda
