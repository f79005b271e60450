#include "kernels/cuda/families/cublaslt_family.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace matmul::cuda {
namespace {

constexpr char kPrefix[] = "cublaslt_algo";

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtFamily>> CublasLtFamily::Create(
    int device, int top_k) {
  ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> gemm,
                   CublasLtGemm::Create(device, top_k));
  return std::unique_ptr<CublasLtFamily>(new CublasLtFamily(std::move(gemm)));
}

absl::StatusOr<std::unique_ptr<GemmFamily>> CublasLtFamily::CreateFamily(
    const FamilySettings& settings) {
  ASSIGN_OR_RETURN(std::unique_ptr<CublasLtFamily> family,
                   Create(settings.device, settings.cublaslt_top_k));
  return std::unique_ptr<GemmFamily>(std::move(family));
}

std::string CublasLtFamily::Summary() const {
  return absl::StrCat("heuristic candidates, cuBLASLt ",
                      CublasLtGemm::Version());
}

KernelChoice CublasLtFamily::Choice(int rank) {
  KernelChoice choice;
  choice.family = this;
  choice.index = rank;
  choice.name = absl::StrCat(kPrefix, rank);
  return choice;
}

std::vector<GemmCandidate> CublasLtFamily::Candidates(
    const GemmProblem& problem) {
  std::vector<GemmCandidate> candidates;
  auto plan = gemm_->GetPlan(problem);
  if (!plan.ok()) {
    candidates.push_back({Choice(0), name_, 0, false, plan.status()});
    return candidates;
  }
  for (int i = 0; i < (*plan)->algo_count(); ++i) {
    candidates.push_back({Choice(i), name_, 0, false, absl::OkStatus()});
  }
  return candidates;
}

absl::StatusOr<KernelChoice> CublasLtFamily::FromName(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix)) {
    return absl::NotFoundError(absl::StrCat(name, " is not a cuBLASLt name"));
  }
  int rank = 0;
  if (!absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &rank) || rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad cuBLASLt kernel name ", name));
  }
  return Choice(rank);
}

absl::StatusOr<KernelChoice> CublasLtFamily::Heuristic(
    const GemmProblem& problem) {
  // cuBLASLt's own top heuristic pick is a good default for any shape.
  RETURN_IF_ERROR(gemm_->GetPlan(problem).status());
  return Choice(0);
}

absl::Status CublasLtFamily::CanImplement(const KernelChoice& /*choice*/,
                                          const GemmProblem& problem) {
  // Building (and caching) the plan here means a launch right after it
  // does no host-side set-up. Any rank can run: Run() takes the last
  // candidate when this instance's plan offers fewer.
  return gemm_->GetPlan(problem).status();
}

absl::StatusOr<size_t> CublasLtFamily::WorkspaceBytes(
    const KernelChoice& /*choice*/, const GemmProblem& /*problem*/) {
  return gemm_->workspace_bytes();
}

size_t CublasLtFamily::MaxWorkspaceBytes() const {
  return gemm_->workspace_bytes();
}

absl::Status CublasLtFamily::Run(const KernelChoice& choice,
                                 const GemmProblem& problem,
                                 cudaStream_t stream, void* workspace,
                                 size_t workspace_bytes) {
  ASSIGN_OR_RETURN(std::shared_ptr<const CublasLtPlan> plan,
                   gemm_->GetPlan(problem));
  // A plan for this instance's exact strides may offer fewer candidates
  // than the canonical one the choice was tuned on.
  const int rank = std::min(choice.index, plan->algo_count() - 1);
  return gemm_->Run(*plan, rank, problem, stream, workspace, workspace_bytes);
}

}  // namespace matmul::cuda
