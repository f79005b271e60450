// Where and how the CUDA backend runs a product, and how it is timed.
// A product runs on its call's stream slot, timed by an event pair around
// its kernel, and products on different slots overlap on the GPU. A big
// product (at least serial_min_gflop_per_sm GFLOP per SM) instead runs on
// one stream that all slots share, its staging and gathers staying on its
// slot: such products run back to back in the order they were queued,
// never two at once, and with no cross-stream wait between one and the
// next; one event between consecutive products marks where one ends and
// the next starts.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_PRODUCT_SCHEDULE_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_PRODUCT_SCHEDULE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/backend/internal/schedule_options.h"
#include "kernels/cuda/backend/internal/stream_slots.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/selector/gemm_selector.h"
#include "kernels/gemm_backend.h"

namespace matmul::cuda {

class ProductSchedule {
 public:
  // Creates the shared stream on the current device, which has
  // `multiprocessors` SMs (for GFLOP per SM).
  static absl::StatusOr<std::unique_ptr<ProductSchedule>> Create(
      GemmSelector& selector, int multiprocessors,
      const ScheduleOptions& options);

  // Work queued on a slot's stream after a product (a scatter of its
  // output).
  using AfterProduct = std::function<absl::Status(cudaStream_t)>;

  // A product behind a wait for a client's stream that the caller queued
  // on the slot's stream (client_stream_order.h): `await` waits for it
  // instead of a blocking synchronize, polling done().
  struct QueuedWait {
    std::function<absl::Status(const std::function<bool()>& done)> await;
  };
  // Runs once the product and what follows it are queued, before the wait
  // for them.
  using Queued = std::function<void()>;

  // True when `problem` runs on the shared stream.
  bool RunsSerially(const GemmProblem& problem) const;

  // Queues `problem` (device pointers, unit-stride layouts) on the slot's
  // stream with the kernel the selector resolves for it, neither timed nor
  // waited for (a product list's products, one after another); returns
  // the kernel's name.
  absl::StatusOr<std::string> Queue(const GemmProblem& problem,
                                    StreamSlot& slot);

  // Queues `problem` (device pointers, unit-stride layouts) on the slot's
  // stream between the slot's start and stop events, with the kernel the
  // selector resolves for it, and returns that kernel's name without
  // waiting: the caller notices the end (CudaBackend::StartBatch). Not
  // for products that RunsSerially: their order is the shared stream's.
  absl::StatusOr<std::string> QueueTimed(const GemmProblem& problem,
                                         StreamSlot& slot);

  // Runs `problem` (device pointers, unit-stride layouts) with the kernel
  // the selector resolves for it, timed with CUDA events, and waits for
  // it: on the slot's stream, or on the shared one when RunsSerially.
  // `after_slot_work`: the product reads what the slot's stream has queued
  // before it. `then` (may be empty) is queued on the slot's stream behind
  // the product and waited for with it, so no host round trip leaves the
  // GPU idle between the two. With `wait`, the product runs on the slot's
  // stream even when it RunsSerially: the shared stream must never wait
  // for a client. `queued` (may be empty) runs once all is queued.
  absl::StatusOr<GemmRunInfo> RunTimed(const GemmProblem& problem,
                                       StreamSlot& slot, bool after_slot_work,
                                       const AfterProduct& then = nullptr,
                                       const QueuedWait* wait = nullptr,
                                       const Queued& queued = nullptr);

 private:
  ProductSchedule(GemmSelector& selector, int multiprocessors,
                  const ScheduleOptions& options, CudaStream serial_stream)
      : selector_(selector),
        multiprocessors_(multiprocessors),
        options_(options),
        serial_stream_(std::move(serial_stream)) {}

  // RunTimed for a product that RunsSerially, on the shared stream.
  absl::StatusOr<GemmRunInfo> RunSerial(const KernelChoice& choice,
                                        const GemmProblem& problem,
                                        StreamSlot& slot, bool after_slot_work,
                                        const AfterProduct& then,
                                        const Queued& queued);
  // Records the slot's start event, queues the kernel, records its stop.
  absl::Status LaunchBetweenEvents(const KernelChoice& choice,
                                   const GemmProblem& problem,
                                   StreamSlot& slot);
  // Queues `choice`'s kernel for `problem` on `stream` (or, at the launch
  // options_.test_only_inject_fault_after names, the out-of-range write).
  absl::Status LaunchProduct(const KernelChoice& choice,
                             const GemmProblem& problem, cudaStream_t stream,
                             DeviceBuffer& workspace);

  GemmSelector& selector_;
  const int multiprocessors_;
  const ScheduleOptions options_;
  const CudaStream serial_stream_;
  // Events that mark where products start and end on the shared stream,
  // and the mark after the last product queued there; serial_mu_ also
  // keeps a product's marks and kernel together.
  EventPool serial_marks_;
  absl::Mutex serial_mu_;
  std::shared_ptr<CudaEvent> last_serial_mark_ ABSL_GUARDED_BY(serial_mu_);
  std::atomic<int64_t> launches_{0};  // products launched (fault injection)
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_PRODUCT_SCHEDULE_H_
