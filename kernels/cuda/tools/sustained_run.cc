#include "kernels/cuda/tools/sustained_run.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cuda/families/run_choice.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"

namespace matmul::cuda {
namespace {

struct Operands {
  DeviceBuffer b;
  std::vector<DeviceBuffer> a, c;
};

absl::StatusOr<Operands> MakeOperands(const GemmProblem& p, int sets,
                                      cudaStream_t stream) {
  Operands o;
  const int64_t a_count = p.batch * p.m * p.k;
  const int64_t b_count = p.batch * p.k * p.n;
  ASSIGN_OR_RETURN(o.b, DeviceBuffer::Create(b_count * 2));
  RETURN_IF_ERROR(FillRandomBf16(o.b.data(), b_count, 1, stream));
  for (int s = 0; s < sets; ++s) {
    ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Create(a_count * 2));
    RETURN_IF_ERROR(FillRandomBf16(a.data(), a_count, 2 + s, stream));
    ASSIGN_OR_RETURN(
        DeviceBuffer c,
        DeviceBuffer::Create(p.batch * p.m * p.n * DTypeSize(p.c_dtype)));
    o.a.push_back(std::move(a));
    o.c.push_back(std::move(c));
  }
  return o;
}

// One kernel's warm-up and phases over `products` (one per operand set),
// on a stream of its own.
absl::StatusOr<SustainedResult> RunOne(const KernelChoice& choice,
                                       const GemmProblem& problem,
                                       const std::vector<GemmProblem>& products,
                                       const SustainedOptions& options) {
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  DeviceBuffer workspace;
  int64_t launched = 0;
  auto launch = [&]() -> absl::Status {
    const GemmProblem& p = products[launched++ % options.operand_sets];
    return RunChoice(choice, p, stream.get(), workspace);
  };

  // Twenty products timed to size the phases, then a warm-up as long as a
  // phase (clocks settle under load).
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent after_each, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent plain, CudaEvent::Create(cudaEventDisableTiming));
  RETURN_IF_ERROR(launch());  // first call: plan and workspace set up
  RETURN_IF_ERROR(start.Record(stream.get()));
  constexpr int kProbe = 20;
  for (int i = 0; i < kProbe; ++i) RETURN_IF_ERROR(launch());
  RETURN_IF_ERROR(stop.Record(stream.get()));
  RETURN_IF_ERROR(stop.Synchronize());
  ASSIGN_OR_RETURN(double probe_seconds,
                   CudaEvent::ElapsedSeconds(start, stop));
  const int64_t count = std::max<int64_t>(
      1, static_cast<int64_t>(options.seconds * kProbe / probe_seconds));
  for (int64_t i = 0; i < count; ++i) RETURN_IF_ERROR(launch());

  // Stream slots for the concurrent phase, each with its own event pair.
  struct StreamSlot {
    CudaStream stream;
    CudaEvent start, stop;
    DeviceBuffer workspace;
  };
  std::vector<StreamSlot> slots;
  for (int i = 0; i < options.operand_sets; ++i) {
    ASSIGN_OR_RETURN(CudaStream s, CudaStream::Create());
    ASSIGN_OR_RETURN(CudaEvent a, CudaEvent::Create());
    ASSIGN_OR_RETURN(CudaEvent b, CudaEvent::Create());
    slots.push_back({std::move(s), std::move(a), std::move(b), {}});
  }
  // Each slot's first call sets up its workspace, untimed.
  for (int i = 0; i < options.operand_sets; ++i) {
    RETURN_IF_ERROR(RunChoice(choice, products[i], slots[i].stream.get(),
                              slots[i].workspace));
  }

  enum class Mode { kBackToBack, kTimingEvent, kPlainEvent, kStreams };
  auto phase = [&](Mode mode) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(start.Record(stream.get()));
    for (StreamSlot& slot : slots) {
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamWaitEvent(slot.stream.get(), start.get(), 0),
                     "cudaStreamWaitEvent"));
    }
    for (int64_t i = 0; i < count; ++i) {
      if (mode == Mode::kStreams) {
        // What the daemon's stream slots do with products below
        // serial_min_gflop_per_sm: an event pair around each, on its own
        // stream.
        StreamSlot& slot = slots[i % slots.size()];
        const GemmProblem& p = products[i % options.operand_sets];
        RETURN_IF_ERROR(slot.start.Record(slot.stream.get()));
        RETURN_IF_ERROR(
            RunChoice(choice, p, slot.stream.get(), slot.workspace));
        RETURN_IF_ERROR(slot.stop.Record(slot.stream.get()));
        continue;
      }
      RETURN_IF_ERROR(launch());
      // What the daemon records between products on its shared stream.
      if (mode == Mode::kTimingEvent) {
        RETURN_IF_ERROR(after_each.Record(stream.get()));
      } else if (mode == Mode::kPlainEvent) {
        RETURN_IF_ERROR(plain.Record(stream.get()));
      }
    }
    for (StreamSlot& slot : slots) {
      RETURN_IF_ERROR(slot.stop.Record(slot.stream.get()));
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamWaitEvent(stream.get(), slot.stop.get(), 0),
                     "cudaStreamWaitEvent"));
    }
    RETURN_IF_ERROR(stop.Record(stream.get()));
    RETURN_IF_ERROR(stop.Synchronize());
    ASSIGN_OR_RETURN(double seconds, CudaEvent::ElapsedSeconds(start, stop));
    return problem.flops() * count / seconds * 1e-12;
  };
  SustainedResult result;
  result.choice = choice;
  result.products = count;
  ASSIGN_OR_RETURN(result.back_to_back_tflops, phase(Mode::kBackToBack));
  ASSIGN_OR_RETURN(result.event_after_each_tflops, phase(Mode::kTimingEvent));
  ASSIGN_OR_RETURN(result.plain_event_after_each_tflops,
                   phase(Mode::kPlainEvent));
  ASSIGN_OR_RETURN(result.streams_tflops, phase(Mode::kStreams));
  return result;
}

}  // namespace

absl::Status CheckSustainedOptions(const SustainedOptions& options) {
  if (options.seconds <= 0 || options.operand_sets < 1 ||
      options.operand_sets > 64) {
    return absl::InvalidArgumentError(
        "sustained run: need seconds > 0 and 1 <= operand_sets <= 64");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SustainedResult>> RunSustained(
    const std::vector<KernelChoice>& choices, const GemmProblem& problem,
    const SustainedOptions& options) {
  RETURN_IF_ERROR(CheckSustainedOptions(options));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(Operands operands,
                   MakeOperands(problem, options.operand_sets, stream.get()));
  RETURN_IF_ERROR(stream.Synchronize());
  std::vector<GemmProblem> products(options.operand_sets, problem);
  for (int s = 0; s < options.operand_sets; ++s) {
    products[s].a.data = operands.a[s].data();
    products[s].b.data = operands.b.data();
    products[s].c.data = operands.c[s].data();
    products[s].a.pointers = products[s].b.pointers = nullptr;
    products[s].c.pointers = nullptr;
  }
  std::vector<SustainedResult> results;
  for (const KernelChoice& choice : choices) {
    if (options.on_kernel_start) options.on_kernel_start(choice);
    ASSIGN_OR_RETURN(SustainedResult result,
                     RunOne(choice, problem, products, options));
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace matmul::cuda
