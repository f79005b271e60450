// The daemon's CUDA backend: a matmul::GemmBackend that runs each product
// with the kernel GemmSelector picks for its shape (the project's own mma
// kernels or cuBLASLt), timing the kernel with CUDA events.
//
// Two entry points:
//  * RunHost (the GemmBackend interface): operands in host memory are staged
//    into a pool of device buffers that is reused across calls, the product
//    runs, C is copied back (and copied in first when beta != 0).
//  * RunDevice: operands already in device (or unified) memory, e.g. CUDA
//    IPC or registered regions; nothing is staged.
// Either way an operand whose strides have no unit dimension is packed to a
// dense matrix first (the kernels need one contiguous dimension), and the
// output is scattered back to its strides afterwards.
//
// Construct once per device and share: all methods are thread-safe (calls
// are serialised on the backend's stream; the selector's background tuning
// runs beside them on its own stream).
#ifndef MATMUL_KERNELS_CUDA_CUDA_BACKEND_H_
#define MATMUL_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/gemm_selector.h"
#include "kernels/gemm_backend.h"
#include "kernels/gemm_problem.h"

namespace matmul {

struct CudaBackendOptions {
  int device = 0;
  // JSON file of tuned kernel choices; empty keeps them in memory only.
  std::string tuning_cache_path;
  // Tune shapes never seen before on a worker thread (they run with a
  // heuristic pick meanwhile).
  bool background_tuning = true;
  // Shared-memory limit for the own kernels; 0 = the device's opt-in limit.
  int max_shared_bytes = 0;
  // Which kernel families the selector may use (both by default; turning
  // one off is for tests and for ruling a family out in production).
  bool use_own_kernels = true;
  bool use_cublaslt = true;
};

// Number of usable CUDA devices; 0 when there is no GPU, no driver or the
// runtime fails to initialise. Never crashes, never throws.
int CudaDeviceCount();

class CudaBackend : public GemmBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::vector<DeviceInfo> devices() const override { return {info_}; }

  // See GemmBackend::RunHost. GemmRunInfo::kernel names what ran (e.g.
  // "cublaslt_algo0", "mma_128x128x32_s4_w2x2"), kernel_seconds its time
  // alone (staging and packing excluded).
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override;

  // The same for a problem whose pointers (and pointer arrays) address
  // memory the device can read and write. Work is queued on `stream` (null:
  // the backend's own stream) and the call returns once it is complete, so
  // that kernel_seconds is known.
  absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem,
                                        cudaStream_t stream);
  // GemmBackend's entry point: the backend's own stream.
  absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem) override {
    return RunDevice(problem, nullptr);
  }

  cuda::GemmSelector& selector() { return *selector_; }
  int device() const { return options_.device; }
  int cuda_device() const override { return options_.device; }

 private:
  CudaBackend(const CudaBackendOptions& options, DeviceInfo info,
              std::unique_ptr<cuda::GemmSelector> selector,
              cuda::CudaStream stream, cuda::CudaEvent start,
              cuda::CudaEvent stop);

  // Runs `problem` (device pointers, unit-stride layouts) on `stream`
  // between the timing events; callers hold mu_.
  absl::StatusOr<GemmRunInfo> RunTimed(const GemmProblem& problem,
                                       cudaStream_t stream);
  absl::StatusOr<GemmRunInfo> RunDeviceLocked(const GemmProblem& problem,
                                              cudaStream_t stream);

  const CudaBackendOptions options_;
  const DeviceInfo info_;
  std::unique_ptr<cuda::GemmSelector> selector_;

  std::mutex mu_;
  // Everything below is used under mu_ only.
  cuda::CudaStream stream_;
  cuda::CudaEvent start_;
  cuda::CudaEvent stop_;
  // Staging pool for RunHost: grown on demand, kept between calls.
  cuda::DeviceBuffer a_buffer_;
  cuda::DeviceBuffer b_buffer_;
  cuda::DeviceBuffer c_buffer_;
  cuda::DeviceBuffer workspace_;
};

// The factory the daemon calls for --backend=cuda|auto.
absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackend(
    const CudaBackendOptions& options);

// Validates what every CUDA path needs (sizes >= 1, operands present,
// non-negative strides, no broadcast output, int64 sizes that do not
// overflow); the message says what was wrong.
absl::Status ValidateForCuda(const GemmProblem& problem);

}  // namespace matmul

#endif  // MATMUL_KERNELS_CUDA_CUDA_BACKEND_H_
