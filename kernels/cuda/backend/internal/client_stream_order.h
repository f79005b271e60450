// The daemon's side of stream-ordered products (common/gemm/stream_order.h),
// two ways:
//   on the CPU  the worker waits for the wait word, then queues the product:
//               a client's stream holds nothing of the daemon's but one
//               worker, and the GPU idles from the client's word to the
//               product's launch;
//   on the GPU  the worker queues a wait for the word on its own stream,
//               the product behind it, and polls until the product is
//               done: the product starts as soon as the client's stream
//               gets there, with no launch in between. That stream of the
//               daemon's is held until then, and so is any call that
//               synchronizes the daemon's context (a cudaFree, a lazy
//               kernel load); so a product waits on the GPU only once every
//               earlier product of its client's process is launched
//               (launch_order.h), which keeps such a call from waiting for
//               a product no worker has launched yet, and waits on the CPU
//               before that.
//               A wait the client never ends is ended by the daemon's CPU
//               writing the word itself, when give_up says so.
// Either way the signal is written by the daemon's stream right behind the
// product.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_CLIENT_STREAM_ORDER_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_CLIENT_STREAM_ORDER_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cuda_driver_api.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/stream_order.h"

namespace matmul::cuda {

// Returns once the wait word of every stream-ordered problem among
// `problems` has reached its value (the client's work before each product
// is complete), or as soon as `enough` (when given) returns true, or with
// the first non-OK give_up status: a client whose stream never gets there
// holds a worker only until its deadline, or until it goes away.
absl::Status WaitForClientStreams(
    absl::Span<const GemmProblem* const> problems,
    const std::function<bool()>& enough = nullptr);

// Queues on `stream` a wait for every wait word (the GPU way).
absl::Status QueueClientWaits(const CudaDriverApi& api,
                              absl::Span<const GemmProblem* const> problems,
                              cudaStream_t stream);

// Writes every wait word's value from here, so that the waits queued on
// the GPU for it end whether or not the client's stream gets there (a
// client given up on, or gone). The client's stream writes the same value,
// so this is harmless to it until its answer frees the word pair.
void ReleaseQueuedWaits(absl::Span<const GemmProblem* const> problems);

// Returns once done() is true, polling it. While a wait word has not
// reached its value, give_up is asked now and then; its first non-OK
// status releases the queued waits (ReleaseQueuedWaits: the products run)
// and is returned once done() is true.
absl::Status AwaitQueuedWaits(absl::Span<const GemmProblem* const> problems,
                              const std::function<bool()>& done);

// AwaitQueuedWaits's give-up checks for a caller that polls done() itself
// (completion_poller.h): Check asks give_up now and then while a wait word
// has not reached its value, and its first non-OK status releases the
// queued waits and stays in status().
class QueuedWaitWatch {
 public:
  QueuedWaitWatch(absl::Span<const GemmProblem* const> problems,
                  absl::Time start);
  void Check(absl::Time now);
  const absl::Status& status() const { return status_; }

 private:
  std::vector<const GemmProblem*> problems_;
  absl::Time next_check_;
  absl::Status status_;
};

// Queues on `stream` the write of every signal word.
absl::Status QueueClientSignals(const CudaDriverApi& api,
                                absl::Span<const GemmProblem* const> problems,
                                cudaStream_t stream);

// Writes every signal word from the CPU (the products are complete).
void StoreClientSignals(absl::Span<const GemmProblem* const> problems);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_CLIENT_STREAM_ORDER_H_
