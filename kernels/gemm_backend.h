// The interface the daemon's executor calls: one implementation per compute
// backend (CPU on OpenBLAS, CUDA behind the per-shape selector).
#ifndef MATMUL_KERNELS_GEMM_BACKEND_H_
#define MATMUL_KERNELS_GEMM_BACKEND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/gemm_problem.h"

namespace matmul {

// What ran and how long the compute part took (kernel time on a GPU, the
// GEMM call on the CPU; staging copies excluded).
struct GemmRunInfo {
  std::string kernel;
  double kernel_seconds = 0.0;
};

struct DeviceInfo {
  std::string name;
  std::string compute_capability;  // "9.0", empty on the CPU
  int64_t memory_bytes = 0;
  int multiprocessors = 0;  // cores on the CPU
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;

  // "cpu" or "cuda".
  virtual std::string name() const = 0;
  virtual std::vector<DeviceInfo> devices() const = 0;

  // Computes the product for a problem whose pointers all address host
  // memory; a GPU backend stages operands to the device and back. Blocks
  // until the output is complete. Thread-safe.
  virtual absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) = 0;

  // The CUDA device the backend runs on; -1 for a backend without one.
  virtual int cuda_device() const { return -1; }

  // Computes the product in place for a problem whose pointers all address
  // memory the backend's device reads and writes (zero-copy regions).
  // Blocks until the output is complete. Thread-safe.
  virtual absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem) {
    return absl::UnimplementedError(name() + " backend has no device");
  }

  // The most products like `problem` worth one launch: 0 leaves it to the
  // batcher (--max_batch_size); 1 runs each alone (a product that fills the
  // device gains nothing from company and its caller would only wait for
  // the others).
  virtual int MaxUsefulBatch(const GemmProblem& /*problem*/) const { return 0; }

  // Computes several products that share a BatchKey (kernels/gemm_batch.h),
  // as one launch where the backend can: RunHost or RunDevice (per
  // `on_device`) of their pointer-array combination. A single product runs
  // as it is. kernel_seconds covers the whole launch. Blocks until every
  // output is complete. Thread-safe.
  virtual absl::StatusOr<GemmRunInfo> RunBatch(
      absl::Span<const GemmProblem* const> problems, bool on_device);
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_GEMM_BACKEND_H_
