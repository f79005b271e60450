#include "kernels/cuda/backend/internal/product_schedule.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/families/run_choice.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"

namespace matmul::cuda {

absl::StatusOr<std::unique_ptr<ProductSchedule>> ProductSchedule::Create(
    GemmSelector& selector, int multiprocessors,
    const ScheduleOptions& options) {
  ASSIGN_OR_RETURN(CudaStream serial_stream, CudaStream::Create());
  return std::unique_ptr<ProductSchedule>(new ProductSchedule(
      selector, multiprocessors, options, std::move(serial_stream)));
}

bool ProductSchedule::RunsSerially(const GemmProblem& p) const {
  return p.flops() >=
         options_.serial_min_gflop_per_sm * 1e9 * std::max(1, multiprocessors_);
}

absl::Status ProductSchedule::LaunchProduct(const KernelChoice& choice,
                                            const GemmProblem& problem,
                                            cudaStream_t stream,
                                            DeviceBuffer& workspace) {
  if (options_.test_only_inject_fault_after > 0 &&
      launches_.fetch_add(1, std::memory_order_relaxed) + 1 ==
          options_.test_only_inject_fault_after) {
    return LaunchOutOfRangeWrite(stream);
  }
  return RunChoice(choice, problem, stream, workspace);
}

absl::StatusOr<std::string> ProductSchedule::Queue(const GemmProblem& problem,
                                                   StreamSlot& slot) {
  ASSIGN_OR_RETURN(KernelChoice choice, selector_.Resolve(problem));
  RETURN_IF_ERROR(
      LaunchProduct(choice, problem, slot.stream.get(), slot.workspace));
  return choice.name;
}

absl::Status ProductSchedule::LaunchBetweenEvents(const KernelChoice& choice,
                                                  const GemmProblem& problem,
                                                  StreamSlot& slot) {
  cudaStream_t stream = slot.stream.get();
  RETURN_IF_ERROR(slot.start.Record(stream));
  RETURN_IF_ERROR(LaunchProduct(choice, problem, stream, slot.workspace));
  return slot.stop.Record(stream);
}

absl::StatusOr<std::string> ProductSchedule::QueueTimed(
    const GemmProblem& problem, StreamSlot& slot) {
  ASSIGN_OR_RETURN(KernelChoice choice, selector_.Resolve(problem));
  RETURN_IF_ERROR(LaunchBetweenEvents(choice, problem, slot));
  return choice.name;
}

absl::StatusOr<GemmRunInfo> ProductSchedule::RunTimed(
    const GemmProblem& problem, StreamSlot& slot, bool after_slot_work,
    const AfterProduct& then, const QueuedWait* wait, const Queued& queued) {
  // Resolved before the start event, so that a first call's plan building
  // is not counted as kernel time.
  ASSIGN_OR_RETURN(KernelChoice choice, selector_.Resolve(problem));
  if (wait == nullptr && RunsSerially(problem)) {
    return RunSerial(choice, problem, slot, after_slot_work, then, queued);
  }
  cudaStream_t stream = slot.stream.get();
  RETURN_IF_ERROR(LaunchBetweenEvents(choice, problem, slot));
  if (then) RETURN_IF_ERROR(then(stream));
  if (queued) queued();
  if (wait != nullptr) {
    RETURN_IF_ERROR(wait->await(
        [stream] { return cudaStreamQuery(stream) != cudaErrorNotReady; }));
    RETURN_IF_ERROR(slot.stream.Synchronize());  // done: reports errors
  } else if (then) {
    RETURN_IF_ERROR(slot.stream.Synchronize());
  } else {
    RETURN_IF_ERROR(slot.stop.Synchronize());
  }
  GemmRunInfo info;
  info.kernel = choice.name;
  ASSIGN_OR_RETURN(info.kernel_seconds,
                   CudaEvent::ElapsedSeconds(slot.start, slot.stop));
  return info;
}

absl::StatusOr<GemmRunInfo> ProductSchedule::RunSerial(
    const KernelChoice& choice, const GemmProblem& problem, StreamSlot& slot,
    bool after_slot_work, const AfterProduct& then, const Queued& queued) {
  cudaStream_t serial = serial_stream_.get();
  std::shared_ptr<CudaEvent> from;
  std::shared_ptr<CudaEvent> to;
  if (after_slot_work) {
    RETURN_IF_ERROR(slot.prepared.Record(slot.stream.get()));
  }
  {
    absl::MutexLock lock(&serial_mu_);
    if (after_slot_work) {
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamWaitEvent(serial, slot.prepared.get(), 0),
                     "cudaStreamWaitEvent"));
    }
    // One event between consecutive products, not a start and a stop: an
    // event pair around each of back-to-back small products costs them a
    // visible share of their time, one event much less
    // (tests/gpu/investigations/service/launch_gaps.py measures it). While
    // the previous product is still pending, its end is this one's start;
    // on an idle stream the product gets a start event of its own.
    from = last_serial_mark_;
    if (from == nullptr || cudaEventQuery(from->get()) != cudaErrorNotReady) {
      ASSIGN_OR_RETURN(from, serial_marks_.Take());
      RETURN_IF_ERROR(from->Record(serial));
    }
    ASSIGN_OR_RETURN(to, serial_marks_.Take());
    RETURN_IF_ERROR(LaunchProduct(choice, problem, serial, slot.workspace));
    RETURN_IF_ERROR(to->Record(serial));
    last_serial_mark_ = to;
  }
  if (then) {
    cudaStream_t stream = slot.stream.get();
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, to->get(), 0),
                               "cudaStreamWaitEvent"));
    RETURN_IF_ERROR(then(stream));
    if (queued) queued();
    RETURN_IF_ERROR(slot.stream.Synchronize());  // after `to`, by the wait
  } else {
    if (queued) queued();
    RETURN_IF_ERROR(to->Synchronize());
  }
  GemmRunInfo info;
  info.kernel = choice.name;
  ASSIGN_OR_RETURN(info.kernel_seconds, CudaEvent::ElapsedSeconds(*from, *to));
  return info;
}

}  // namespace matmul::cuda
