// The interface the daemon's executor calls: one implementation per compute
// backend (CPU on OpenBLAS, CUDA behind the per-shape selector).
#ifndef MATMUL_KERNELS_GEMM_BACKEND_H_
#define MATMUL_KERNELS_GEMM_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/gemm_list.h"
#include "kernels/launch_stages.h"

namespace matmul {

// What ran and how long the compute part took (kernel time on a GPU, the
// GEMM call on the CPU; staging copies excluded).
struct GemmRunInfo {
  std::string kernel;
  double kernel_seconds = 0.0;
  // Host time of the launch's steps on the thread that started it, in
  // order; empty where the backend does not time them.
  std::vector<LaunchStage> launch_stages;
};

struct DeviceInfo {
  std::string name;
  std::string compute_capability;  // "9.0", empty on the CPU
  int64_t memory_bytes = 0;
  int multiprocessors = 0;  // cores on the CPU
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L and the DCGM
  // exporter's UUID label print it; empty on the CPU.
  std::string uuid;
  // True when the daemon's context on the device is a client of an MPS
  // server (kernels/cuda/runtime/mps_client.h).
  bool mps_client = false;
};

// What a metrics scrape reads from a backend now; -1 for what the backend
// cannot tell (the CPU backend has no device memory and no tuning).
struct BackendGauges {
  int64_t memory_used_bytes = -1;  // cudaMemGetInfo: total - free
  int64_t memory_total_bytes = -1;
  int64_t tuned_shapes = -1;       // shapes with a timed kernel choice
  int64_t tunings_succeeded = -1;  // since start
  int64_t tunings_failed = -1;
  // The thread that notices launches' ends (the CUDA backend's completion
  // poller): seconds so far spent polling for them and completing them
  // (answers included); negative where there is no such thread.
  double completion_polling_seconds = -1;
  double completion_completing_seconds = -1;
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

  // Read at each metrics scrape, from any thread.
  virtual BackendGauges Gauges() const { return {}; }

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

  // What StartBatch calls once the launch is complete, or has failed.
  using LaunchDone = absl::AnyInvocable<void(absl::StatusOr<GemmRunInfo>) &&>;

  // RunBatch that may return before the launch is complete: `done` then
  // runs later on a thread of the backend's (the CUDA backend's for
  // products on the device, whose ends it polls), so that the caller can
  // launch the next product meanwhile; it must not block there. Any
  // failure to launch runs `done` on the calling thread before StartBatch
  // returns; a launch of several that fails on the backend's thread fails
  // as the device does (each product would alone). The problems must
  // outlive `done`'s call. This default runs RunBatch, then `done`.
  virtual void StartBatch(absl::Span<const GemmProblem* const> problems,
                          bool on_device, LaunchDone done) {
    std::move(done)(RunBatch(problems, on_device));
  }

  // Runs a product list (kernels/gemm_list.h) in order, each product after
  // the previous one is complete, with scratch of the backend's own
  // memory; `on_device` as for RunBatch. Returns one GemmRunInfo per
  // product. Blocks until every output is complete. Thread-safe. This
  // default runs each product by RunHost or RunDevice with scratch in host
  // memory, and has no stream order.
  virtual absl::StatusOr<std::vector<GemmRunInfo>> RunList(const GemmList& list,
                                                           bool on_device);
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_GEMM_BACKEND_H_
