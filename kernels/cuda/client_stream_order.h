// The daemon's side of stream-ordered products (common/gemm/stream_order.h):
// the waits for the clients' streams queued before a launch, the signals
// queued after it, and the watchdog that stops waiting for a client whose
// stream never gets there (it went away, or its deadline passed), so that
// no client can hold one of the daemon's streams forever.
#ifndef MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_
#define MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/cuda_driver_api.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/stream_order.h"

namespace matmul::cuda {

class OrderWatchdog {
 public:
  // A wait being watched; the watch ends with this object.
  class Watch {
   public:
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    // OK unless the watchdog gave up on the wait (give_up's status).
    absl::Status status() const;

   private:
    friend class OrderWatchdog;
    Watch(OrderWatchdog& watchdog, const StreamOrder& order)
        : watchdog_(watchdog), order_(order) {}
    OrderWatchdog& watchdog_;
    const StreamOrder& order_;
    bool done_ = false;  // guarded by watchdog_.mu_
    absl::Status status_;
  };

  OrderWatchdog();
  ~OrderWatchdog();
  OrderWatchdog(const OrderWatchdog&) = delete;
  OrderWatchdog& operator=(const OrderWatchdog&) = delete;

  // Watches `order` (which must outlive the watch): until its wait word
  // reaches its value, asks give_up now and then; once that says stop,
  // writes the value into the word itself, which releases the device.
  std::unique_ptr<Watch> Start(const StreamOrder& order);

 private:
  void Loop();
  // Looks at each watch once.
  void Check() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<Watch*> watches_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Queues on `stream` a wait for the wait word of every problem that has a
// stream order.
absl::Status QueueClientWaits(const CudaDriverApi& api,
                              absl::Span<const GemmProblem* const> problems,
                              cudaStream_t stream);

// Queues on `stream` the write of every signal word.
absl::Status QueueClientSignals(const CudaDriverApi& api,
                                absl::Span<const GemmProblem* const> problems,
                                cudaStream_t stream);

// Writes every signal word from the CPU (the products are complete).
void StoreClientSignals(absl::Span<const GemmProblem* const> problems);

// Writes every wait word from the CPU: after a launch failed, so that the
// waits already queued on the daemon's stream do not hold it.
void ReleaseClientWaits(absl::Span<const GemmProblem* const> problems);

// True when any problem has a stream order.
bool AnyStreamOrdered(absl::Span<const GemmProblem* const> problems);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_
