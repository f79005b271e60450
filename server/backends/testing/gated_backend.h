// The CPU backend behind a gate, for unit tests of the service that hold
// products in flight: each launch waits at its start until the gate is
// open.
#ifndef MATMUL_SERVER_BACKENDS_TESTING_GATED_BACKEND_H_
#define MATMUL_SERVER_BACKENDS_TESTING_GATED_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/gemm_backend.h"

namespace matmul {

class GatedBackend final : public GemmBackend {
 public:
  explicit GatedBackend(bool open) : open_(open) {}

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }

  std::string name() const override { return "cpu"; }
  std::vector<DeviceInfo> devices() const override { return cpu_->devices(); }
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&open_));
    }
    return cpu_->RunHost(problem);
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<GemmBackend> cpu_ = CpuBackend::Create(1);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_TESTING_GATED_BACKEND_H_
