// The daemon's side of stream-ordered products (common/gemm/stream_order.h).
// The daemon waits for a client's stream on its CPU, before it queues the
// product, rather than with a wait queued on its own stream: a stream of
// the daemon's held by a client's wait would stall every call that
// synchronizes the daemon's context (a cudaFree, a module load) and so
// every other client, and could deadlock it with the client's own stream.
// The signal is written by the daemon's stream right behind the product.
#ifndef MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_
#define MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/cuda_driver_api.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/stream_order.h"

namespace matmul::cuda {

// Returns once the wait word of every stream-ordered problem among
// `problems` has reached its value (the client's work before each product
// is complete), or with the first non-OK give_up status: a client whose
// stream never gets there holds a worker only until its deadline, or until
// it goes away.
absl::Status WaitForClientStreams(
    absl::Span<const GemmProblem* const> problems);

// Queues on `stream` the write of every signal word.
absl::Status QueueClientSignals(const CudaDriverApi& api,
                                absl::Span<const GemmProblem* const> problems,
                                cudaStream_t stream);

// Writes every signal word from the CPU (the products are complete).
void StoreClientSignals(absl::Span<const GemmProblem* const> problems);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_CLIENT_STREAM_ORDER_H_
