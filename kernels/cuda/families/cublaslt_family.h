// cuBLASLt as a kernel family: a candidate is rank N of cuBLASLt's
// heuristic for the problem's layout, named "cublaslt_algoN" (stable for a
// given environment: GPU, driver and library versions).
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_FAMILY_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_FAMILY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/families/cublaslt_gemm.h"
#include "kernels/cuda/families/family_factory.h"
#include "kernels/cuda/families/gemm_family.h"

namespace matmul::cuda {

class CublasLtFamily : public GemmFamily {
 public:
  static constexpr char kName[] = "cublaslt";

  static absl::StatusOr<std::unique_ptr<CublasLtFamily>> Create(int device,
                                                                int top_k);
  // Create() as a FamilyFactory.
  static absl::StatusOr<std::unique_ptr<GemmFamily>> CreateFamily(
      const FamilySettings& settings);

  const std::string& name() const override { return name_; }
  std::string Summary() const override;
  int shared_bytes_limit() const override { return 0; }
  std::vector<GemmCandidate> Candidates(const GemmProblem& problem) override;
  absl::StatusOr<KernelChoice> FromName(const std::string& name) override;
  absl::StatusOr<KernelChoice> Heuristic(const GemmProblem& problem) override;
  absl::Status CanImplement(const KernelChoice& choice,
                            const GemmProblem& problem) override;
  absl::StatusOr<size_t> WorkspaceBytes(const KernelChoice& choice,
                                        const GemmProblem& problem) override;
  size_t MaxWorkspaceBytes() const override;
  absl::Status Run(const KernelChoice& choice, const GemmProblem& problem,
                   cudaStream_t stream, void* workspace,
                   size_t workspace_bytes) override;

  CublasLtGemm& gemm() { return *gemm_; }

 private:
  explicit CublasLtFamily(std::unique_ptr<CublasLtGemm> gemm)
      : gemm_(std::move(gemm)) {}

  KernelChoice Choice(int rank);

  const std::string name_ = kName;
  std::unique_ptr<CublasLtGemm> gemm_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_FAMILY_H_
