// A kernel for one shape run back to back for seconds, the way a busy
// daemon runs it: several clients' A and C (rotated, so they do not
// all sit in L2 as one benchmark buffer would) against one shared B, with
// the GPU's clocks under sustained load. Short interleaved timings (what
// tuning and matmul-bench's table use) let the GPU cool and keep reused
// operands in L2; this is the standalone figure a service run compares
// with. It also measures what an event after each product costs, and what
// running the products on several streams at once gives.
#ifndef MATMUL_KERNELS_CUDA_TOOLS_SUSTAINED_RUN_H_
#define MATMUL_KERNELS_CUDA_TOOLS_SUSTAINED_RUN_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/families/gemm_family.h"

namespace matmul::cuda {

struct SustainedOptions {
  double seconds = 3.0;  // each measured phase, after as long a warm-up
  // Distinct A and C, like this many clients (and streams in the streams
  // phase).
  int operand_sets = 4;
  // Called as each kernel's warm-up starts (progress, clock logs).
  std::function<void(const KernelChoice&)> on_kernel_start;
};

struct SustainedResult {
  KernelChoice choice;
  int64_t products = 0;  // per phase
  // TFLOPS of each phase (its products over its time), on one stream:
  double back_to_back_tflops = 0;            // no event between products
  double event_after_each_tflops = 0;        // a timing event after each
  double plain_event_after_each_tflops = 0;  // one with timing disabled
  // Round robin over operand_sets streams, an event pair around each
  // product on its stream (products may overlap).
  double streams_tflops = 0;
};

// INVALID_ARGUMENT unless seconds > 0 and 1 <= operand_sets <= 64.
absl::Status CheckSustainedOptions(const SustainedOptions& options);

// Runs each of `choices` on `problem` in turn, all over the same operands
// (private random data: the problem's pointers are ignored), each after a
// warm-up of its own, on a stream of its own. One result per choice, in
// order.
absl::StatusOr<std::vector<SustainedResult>> RunSustained(
    const std::vector<KernelChoice>& choices, const GemmProblem& problem,
    const SustainedOptions& options);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_TOOLS_SUSTAINED_RUN_H_
