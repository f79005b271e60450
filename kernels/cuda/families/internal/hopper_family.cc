// The project's Hopper kernels (kernels/hopper) as a kernel family: a
// candidate is one Config ("wgmma_128x256x64_s4", "..._c2",
// "wgmma_128x128x64_s6_pp"), which runs every operand layout. On a device
// it cannot run on (anything but compute capability 9.0) every candidate
// says so, and the selector keeps to the other families. CMake compiles
// this file only where the matmul_hopper library is part of the build.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/families/optional_families.h"
#include "kernels/hopper/hopper_gemm.h"

namespace matmul::cuda {
namespace {

class HopperFamily : public GemmFamily {
 public:
  static constexpr char kName[] = "hopper";

  static absl::StatusOr<std::unique_ptr<GemmFamily>> Create(
      const FamilySettings& settings) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
                               settings.device) != cudaSuccess) {
      cudaGetLastError();  // no device: every candidate will say why
      sms = 0;
    }
    return std::unique_ptr<GemmFamily>(
        new HopperFamily(settings.device, sms, settings.max_shared_bytes));
  }

  const std::string& name() const override { return name_; }

  std::string Summary() const override {
    return absl::StrCat(hopper::AllConfigs().size(), " configs (sm_90a)");
  }

  int shared_bytes_limit() const override { return max_shared_bytes_; }

  std::vector<GemmCandidate> Candidates(const GemmProblem& problem) override {
    std::vector<GemmCandidate> candidates;
    const auto& configs = hopper::AllConfigs();
    for (size_t i = 0; i < configs.size(); ++i) {
      GemmCandidate candidate;
      candidate.choice = Choice(static_cast<int>(i));
      // A group per kernel form, so that matmul-bench sets each beside
      // cuBLASLt.
      candidate.group =
          absl::StrCat("wgmma_", configs[i].BlockM(), "x", configs[i].BlockN(),
                       configs[i].pingpong ? "_pp" : "");
      candidate.shared_bytes = configs[i].SharedBytes();
      candidate.fits_spark = false;  // wgmma: not on the GB10
      candidate.status = Check(problem, configs[i]);
      candidates.push_back(std::move(candidate));
    }
    return candidates;
  }

  absl::StatusOr<KernelChoice> FromName(const std::string& name) override {
    const auto& configs = hopper::AllConfigs();
    for (size_t i = 0; i < configs.size(); ++i) {
      if (configs[i].Name() == name) return Choice(static_cast<int>(i));
    }
    return absl::NotFoundError(absl::StrCat("unknown Hopper config ", name));
  }

  // The plain config; whether clusters pay is for the timing to find.
  absl::StatusOr<KernelChoice> Heuristic(const GemmProblem& problem) override {
    RETURN_IF_ERROR(Check(problem, hopper::AllConfigs()[0]));
    return Choice(0);
  }

  absl::Status CanImplement(const KernelChoice& choice,
                            const GemmProblem& problem) override {
    ASSIGN_OR_RETURN(const hopper::Config* config, ConfigAt(choice.index));
    return Check(problem, *config);
  }

  absl::StatusOr<size_t> WorkspaceBytes(const KernelChoice& choice,
                                        const GemmProblem& problem) override {
    ASSIGN_OR_RETURN(const hopper::Config* config, ConfigAt(choice.index));
    return hopper::WorkspaceBytes(problem, *config, device_);
  }

  size_t MaxWorkspaceBytes() const override {
    return hopper::MaxWorkspaceBytes(sms_);
  }

  absl::Status Run(const KernelChoice& choice, const GemmProblem& problem,
                   cudaStream_t stream, void* workspace,
                   size_t workspace_bytes) override {
    ASSIGN_OR_RETURN(const hopper::Config* config, ConfigAt(choice.index));
    return hopper::Run(problem, *config, device_, stream, workspace,
                       workspace_bytes);
  }

 private:
  HopperFamily(int device, int sms, int max_shared_bytes)
      : device_(device), sms_(sms), max_shared_bytes_(max_shared_bytes) {}

  // hopper::CanImplement, within a shared memory limit where one is
  // imposed (the GB10's, to try the Spark path on a bigger GPU).
  absl::Status Check(const GemmProblem& problem,
                     const hopper::Config& config) const {
    if (max_shared_bytes_ > 0 && config.SharedBytes() > max_shared_bytes_) {
      return absl::FailedPreconditionError(
          absl::StrCat(config.Name(), " needs ", config.SharedBytes(),
                       " bytes of shared memory per block; the limit is ",
                       max_shared_bytes_));
    }
    return hopper::CanImplement(problem, config, device_);
  }

  KernelChoice Choice(int index) {
    KernelChoice choice;
    choice.family = this;
    choice.index = index;
    choice.name = hopper::AllConfigs()[index].Name();
    return choice;
  }

  static absl::StatusOr<const hopper::Config*> ConfigAt(int index) {
    const auto& configs = hopper::AllConfigs();
    if (index < 0 || index >= static_cast<int>(configs.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("Hopper kernel index ", index, " out of range"));
    }
    return &configs[index];
  }

  const std::string name_ = kName;
  const int device_;
  const int sms_;
  const int max_shared_bytes_;  // 0: none imposed
};

}  // namespace

FamilyFactory HopperFamilyFactory() {
  return {HopperFamily::kName, &HopperFamily::Create};
}

}  // namespace matmul::cuda
