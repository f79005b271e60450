// The project's own mma.sync kernels (kernels/mma) as a kernel family: a
// candidate is one compiled TileConfig, named by TileConfig::Name()
// ("mma_128x128x64_s3_w2x2_tma"). CMake compiles this file only where the
// matmul_mma library is part of the build.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/families/optional_families.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/mma/mma_gemm.h"

namespace matmul::cuda {
namespace {

class MmaFamily : public GemmFamily {
 public:
  static constexpr char kName[] = "mma";

  static absl::StatusOr<std::unique_ptr<GemmFamily>> Create(
      const FamilySettings& settings) {
    int limit = settings.max_shared_bytes;
    if (limit <= 0) {
      limit = mma::MaxSharedBytesOptin(settings.device);
      if (limit <= 0) {
        return absl::UnavailableError(
            absl::StrCat("cannot read the opt-in shared memory of device ",
                         settings.device));
      }
    }
    return std::unique_ptr<GemmFamily>(new MmaFamily(settings.device, limit));
  }

  const std::string& name() const override { return name_; }

  std::string Summary() const override {
    return absl::StrCat(mma::AllConfigs().size(), " configs");
  }

  int shared_bytes_limit() const override { return max_shared_bytes_; }

  std::vector<GemmCandidate> Candidates(const GemmProblem& problem) override {
    std::vector<GemmCandidate> candidates;
    const auto& configs = mma::AllConfigs();
    for (size_t i = 0; i < configs.size(); ++i) {
      const mma::TileConfig& c = configs[i];
      GemmCandidate candidate;
      candidate.choice = Choice(static_cast<int>(i));
      candidate.group = absl::StrCat("mma_", c.block_m, "x", c.block_n);
      candidate.shared_bytes = c.SharedBytes();
      candidate.fits_spark = c.SharedBytes() <= kSparkSharedBytes;
      candidate.status = mma::CanImplement(problem, c, max_shared_bytes_);
      candidates.push_back(std::move(candidate));
    }
    return candidates;
  }

  absl::StatusOr<KernelChoice> FromName(const std::string& name) override {
    const auto& configs = mma::AllConfigs();
    for (size_t i = 0; i < configs.size(); ++i) {
      if (NameOf(configs[i]) == name) return Choice(static_cast<int>(i));
    }
    return absl::NotFoundError(absl::StrCat("unknown mma config ", name));
  }

  absl::StatusOr<KernelChoice> Heuristic(const GemmProblem& problem) override {
    int sms = 0;
    RETURN_IF_ERROR(CudaStatus(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
        "cudaDeviceGetAttribute(MultiProcessorCount)"));
    // Largest tile that still gives every SM a tile; failing that, the one
    // that makes the most tiles.
    auto tiles = [&](const mma::TileConfig& c) {
      return problem.batch * ((problem.m + c.block_m - 1) / c.block_m) *
             ((problem.n + c.block_n - 1) / c.block_n);
    };
    auto better = [&](const mma::TileConfig& x, const mma::TileConfig& y) {
      const bool x_fills = tiles(x) >= sms, y_fills = tiles(y) >= sms;
      if (x_fills != y_fills) return x_fills;
      if (x_fills) return x.block_m * x.block_n > y.block_m * y.block_n;
      return tiles(x) > tiles(y);
    };
    const auto& configs = mma::AllConfigs();
    int best = -1;
    for (size_t i = 0; i < configs.size(); ++i) {
      if (!mma::CanImplement(problem, configs[i], max_shared_bytes_).ok()) {
        continue;
      }
      if (best < 0 || better(configs[i], configs[best])) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no mma config runs it within ", max_shared_bytes_, " B"));
    }
    return Choice(best);
  }

  absl::Status CanImplement(const KernelChoice& choice,
                            const GemmProblem& problem) override {
    ASSIGN_OR_RETURN(const mma::TileConfig* config, ConfigAt(choice.index));
    return mma::CanImplement(problem, *config, max_shared_bytes_);
  }

  absl::StatusOr<size_t> WorkspaceBytes(const KernelChoice& choice,
                                        const GemmProblem& problem) override {
    ASSIGN_OR_RETURN(const mma::TileConfig* config, ConfigAt(choice.index));
    return mma::WorkspaceBytes(problem, *config);
  }

  size_t MaxWorkspaceBytes() const override { return 0; }

  absl::Status Run(const KernelChoice& choice, const GemmProblem& problem,
                   cudaStream_t stream, void* workspace,
                   size_t /*workspace_bytes*/) override {
    ASSIGN_OR_RETURN(const mma::TileConfig* config, ConfigAt(choice.index));
    return mma::Run(problem, *config, stream, workspace);
  }

 private:
  MmaFamily(int device, int max_shared_bytes)
      : device_(device), max_shared_bytes_(max_shared_bytes) {}

  // The stable name: TileConfig::Name(), which starts with "mma".
  static std::string NameOf(const mma::TileConfig& c) {
    std::string name = c.Name();
    if (!absl::StartsWith(name, "mma")) name = absl::StrCat("mma_", name);
    return name;
  }

  KernelChoice Choice(int index) {
    KernelChoice choice;
    choice.family = this;
    choice.index = index;
    choice.name = NameOf(mma::AllConfigs()[index]);
    return choice;
  }

  static absl::StatusOr<const mma::TileConfig*> ConfigAt(int index) {
    const auto& configs = mma::AllConfigs();
    if (index < 0 || index >= static_cast<int>(configs.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("own kernel index ", index, " out of range"));
    }
    return &configs[index];
  }

  const std::string name_ = kName;
  const int device_;
  const int max_shared_bytes_;
};

}  // namespace

FamilyFactory MmaFamilyFactory() {
  return {MmaFamily::kName, &MmaFamily::Create};
}

}  // namespace matmul::cuda
