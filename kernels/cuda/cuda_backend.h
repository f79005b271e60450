// The daemon's CUDA backend: a matmul::GemmBackend that runs each product
// with the kernel GemmSelector picks for its shape (the project's own mma
// kernels or cuBLASLt), timing the kernel with CUDA events.
//
// Entry points (the GemmBackend interface):
//  * RunHost: every operand is staged through device buffers that are
//    reused across calls: A and B (and C when beta != 0) copied in, C copied
//    back. The pointers may address host memory or, through unified
//    addressing, device memory: a request that mixes inline operands with
//    operands in GPU regions runs here.
//  * RunDevice: operands already in device (or registered / unified)
//    memory, e.g. CUDA IPC or registered regions; nothing is staged.
//  * RunBatch: products of one BatchKey as one pointer-array launch, or,
//    when they all read the same B and that B outweighs their A and C, as
//    one product of their A's stacked row-wise (gathered into one matrix;
//    C scattered back after): B is then read once instead of once each.
// Either way an operand whose strides have no unit dimension is packed to a
// dense matrix first (the kernels need one contiguous dimension), and the
// output is scattered back to its strides afterwards.
//
// Construct once per device and share: all methods are thread-safe. Up to
// `streams` calls run at once, each on a lane of its own (stream, timing
// events, workspace, staging buffers), so one call's host work overlaps
// another's kernel; further callers wait for a free lane. Products on
// lanes overlap on the GPU. A big product (serial_min_gflop_per_sm) itself
// runs on one stream that all lanes share, its
// staging and gathers staying on its lane: such products run back to back
// in the order they were queued, never two at once, and with no
// cross-stream wait between one and the next. The
// selector's background tuning runs beside them on its own stream.
#ifndef MATMUL_KERNELS_CUDA_CUDA_BACKEND_H_
#define MATMUL_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/gemm_selector.h"
#include "kernels/gemm_backend.h"

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
  // Products in flight at once (lanes); >= 1.
  int streams = 2;
  // Products of at least this many GFLOP per SM run on the stream all
  // lanes share (see CudaBackend); > 0. Four clients' products on the
  // H200 (132 SMs), on lanes against one after another, one session:
  // 5120x512x2048 (0.08 GFLOP per SM) 500-545 vs 438-497 TFLOPS,
  // 5120x2048x2048 (0.33) 655-663 vs 622 TFLOPS, batches of 32 stacked
  // 64x4096x4096 (0.52) 156-162k vs 151-152k requests/s, 5120x2048x11008
  // (1.75) 646-653 vs 667-669 TFLOPS. Products on lanes share the GPU, so
  // their kernel time includes the overlap.
  double serial_min_gflop_per_sm = 1.0;
  // TEST ONLY, for the device-lost path: the Nth product launch (from 1)
  // runs a kernel that writes out of range instead, which poisons the CUDA
  // context. 0: never.
  int64_t test_only_inject_fault_after = 0;
  // TEST ONLY, for the out-of-memory path: once set up, the backend takes
  // all but this many bytes of the device's free memory and holds them, so
  // that a product whose staging needs more really fails in cudaMalloc.
  // 0: off.
  int64_t test_only_memory_headroom_bytes = 0;
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
  // memory the device can read and write. Returns once the output is
  // complete, so that kernel_seconds is known.
  absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem) override;

  // See GemmBackend::RunBatch: with `on_device`, the pointer arrays are
  // copied to the device and the products run as one launch.
  absl::StatusOr<GemmRunInfo> RunBatch(
      absl::Span<const GemmProblem* const> problems, bool on_device) override;

  // 1 for products that fill the device (a wave of 128x128 tiles).
  int MaxUsefulBatch(const GemmProblem& problem) const override;

  cuda::GemmSelector& selector() { return *selector_; }
  int device() const { return options_.device; }
  int cuda_device() const override { return options_.device; }
  // Device memory (cudaMemGetInfo) and the selector's tuning counts.
  BackendGauges Gauges() const override;

 private:
  // What one call in flight uses alone.
  struct Lane {
    cuda::CudaStream stream;
    cuda::CudaEvent start;
    cuda::CudaEvent stop;
    // Marks the lane's work that a product on the shared stream must wait
    // for (staging, gathers).
    cuda::CudaEvent prepared;
    cuda::DeviceBuffer workspace;
    // Staging for RunHost and stacked batches (a, c), pointer arrays for
    // RunBatch: grown on demand, kept between calls.
    cuda::DeviceBuffer a_buffer;
    cuda::DeviceBuffer b_buffer;
    cuda::DeviceBuffer c_buffer;
    cuda::DeviceBuffer pointer_arrays;
  };
  // Holds a lane for one call and gives it back (and restores the calling
  // thread's device) when it goes out of scope.
  class LaneLease;

  CudaBackend(const CudaBackendOptions& options, DeviceInfo info,
              std::unique_ptr<cuda::GemmSelector> selector,
              std::vector<std::unique_ptr<Lane>> lanes,
              cuda::CudaStream serial_stream);

  // Waits for a free lane; makes the backend's device current.
  absl::StatusOr<LaneLease> AcquireLane();
  // Every lane, for background tuning (see SetTuningGuard); null if the
  // device cannot be made current.
  std::shared_ptr<void> HoldAllLanes();
  // True when `problem` alone has a wave of 128x128 tiles for the device.
  bool FillsDevice(const GemmProblem& problem) const;
  // True when `problem` runs on the shared stream (its GFLOP per SM reach
  // options_.serial_min_gflop_per_sm).
  bool RunsSerially(const GemmProblem& problem) const;
  // Work queued on a lane's stream after a product (a scatter of its
  // output); empty for none.
  using AfterProduct = std::function<absl::Status(cudaStream_t)>;
  // Runs `problem` (device pointers, unit-stride layouts), timed with CUDA
  // events, and waits for it: on the lane's stream, or on the shared one
  // when RunsSerially (see above). `after_lane_work`: the product
  // reads what the lane's stream has queued before it. `then` is queued
  // on the lane's stream behind the product and waited for with it, so no
  // host round trip leaves the GPU idle between the two.
  absl::StatusOr<GemmRunInfo> RunTimed(const GemmProblem& problem, Lane& lane,
                                       bool after_lane_work,
                                       const AfterProduct& then = nullptr);
  // RunTimed for a product that RunsSerially, on the shared stream.
  absl::StatusOr<GemmRunInfo> RunSerial(const cuda::KernelChoice& choice,
                                        const GemmProblem& problem, Lane& lane,
                                        bool after_lane_work,
                                        const AfterProduct& then);
  absl::StatusOr<GemmRunInfo> RunDeviceOnLane(
      const GemmProblem& problem, Lane& lane, bool after_lane_work,
      const AfterProduct& then = nullptr);
  // `batched`: a pointer-array product (arrays on the device) whose entries
  // all read B at `shared_b`; runs as one stacked product (see above).
  absl::StatusOr<GemmRunInfo> RunStacked(const GemmProblem& batched,
                                         const void* shared_b, Lane& lane);
  // Queues `choice`'s kernel for `problem` on `stream` (or, at the launch
  // options_.test_only_inject_fault_after names, the out-of-range write).
  absl::Status LaunchProduct(const cuda::KernelChoice& choice,
                             const GemmProblem& problem, cudaStream_t stream,
                             cuda::DeviceBuffer& workspace);

  const CudaBackendOptions options_;
  const DeviceInfo info_;
  std::unique_ptr<cuda::GemmSelector> selector_;

  const std::vector<std::unique_ptr<Lane>> lanes_;
  // Where products that RunsSerially run (see above).
  const cuda::CudaStream serial_stream_;
  // Events that mark where products start and end on the shared stream,
  // and the mark after the last product queued there (guarded by
  // serial_mu_, which also keeps a product's marks and kernel together).
  cuda::EventPool serial_marks_;
  std::shared_ptr<cuda::CudaEvent> last_serial_mark_;
  std::mutex serial_mu_;
  std::mutex lanes_mu_;
  std::condition_variable lane_freed_;
  std::vector<Lane*> free_lanes_;     // guarded by lanes_mu_
  std::atomic<int64_t> launches_{0};  // products launched (fault injection)
  // Device memory held back by test_only_memory_headroom_bytes.
  cuda::DeviceBuffer test_only_ballast_;
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
