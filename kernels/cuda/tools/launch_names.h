// The names of the kernels launched while a LaunchNames object lives, read
// through CUPTI's driver-API callbacks. cuBLASLt says which algorithm it
// ran but not which instruction its kernel uses; the kernel's name does
// (e.g. "tensor16x8x16" for mma.sync, "gmma" or "nvjet" for Hopper's
// wgmma kernels), so cublaslt-survey records it.
#ifndef MATMUL_KERNELS_CUDA_TOOLS_LAUNCH_NAMES_H_
#define MATMUL_KERNELS_CUDA_TOOLS_LAUNCH_NAMES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matmul::cuda {

class LaunchNames {
 public:
  // Subscribes to the launch callbacks. Fails where CUPTI cannot attach
  // (one subscriber per process; some sandboxes refuse it).
  static absl::StatusOr<std::unique_ptr<LaunchNames>> Create();
  ~LaunchNames();
  LaunchNames(const LaunchNames&) = delete;
  LaunchNames& operator=(const LaunchNames&) = delete;

  // The names recorded since the last Take(), in launch order.
  std::vector<std::string> Take();

  // CUPTI's callback (through a plain function): records a launch's name.
  static void Callback(void* self, int domain, const void* data);

 private:
  LaunchNames() = default;

  void* subscriber_ = nullptr;  // CUpti_SubscriberHandle
  absl::Mutex mu_;
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_TOOLS_LAUNCH_NAMES_H_
