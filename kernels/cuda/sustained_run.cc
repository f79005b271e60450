#include "kernels/cuda/sustained_run.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/device_ops.h"

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

}  // namespace

absl::StatusOr<SustainedResult> RunSustained(GemmSelector& selector,
                                             const KernelChoice& choice,
                                             const GemmProblem& problem,
                                             const SustainedOptions& options) {
  if (options.seconds <= 0 || options.operand_sets < 1 ||
      options.window_seconds <= 0 || options.window_seconds > options.seconds) {
    return absl::InvalidArgumentError(
        "sustained run: need seconds > 0, operand_sets >= 1 and 0 < "
        "window_seconds <= seconds");
  }
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(Operands operands,
                   MakeOperands(problem, options.operand_sets, stream.get()));
  DeviceBuffer workspace;
  std::vector<GemmProblem> products(options.operand_sets, problem);
  for (int s = 0; s < options.operand_sets; ++s) {
    products[s].a.data = operands.a[s].data();
    products[s].b.data = operands.b.data();
    products[s].c.data = operands.c[s].data();
    products[s].a.pointers = products[s].b.pointers = nullptr;
    products[s].c.pointers = nullptr;
  }
  int64_t launched = 0;
  auto launch = [&]() -> absl::Status {
    const GemmProblem& p = products[launched++ % options.operand_sets];
    return selector.RunChoice(choice, p, stream.get(), workspace);
  };

  // Warm-up for as long as a phase (clocks settle under load), timed once
  // to size the windows.
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
  RETURN_IF_ERROR(launch());  // first call: plan and workspace set up
  RETURN_IF_ERROR(stream.Synchronize());
  const int64_t warmup = std::max<int64_t>(
      100, static_cast<int64_t>(options.seconds / (problem.flops() / 500e12)));
  RETURN_IF_ERROR(start.Record(stream.get()));
  for (int64_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(launch());
  RETURN_IF_ERROR(stop.Record(stream.get()));
  RETURN_IF_ERROR(stop.Synchronize());
  ASSIGN_OR_RETURN(double warm_seconds, CudaEvent::ElapsedSeconds(start, stop));
  const double per_product = warm_seconds / warmup;
  const int64_t per_window = std::max<int64_t>(
      1, static_cast<int64_t>(options.window_seconds / per_product));
  const int windows = std::max(
      1, static_cast<int>(options.seconds / (per_window * per_product)));

  std::vector<CudaEvent> marks;
  for (int w = 0; w <= windows; ++w) {
    ASSIGN_OR_RETURN(CudaEvent mark, CudaEvent::Create());
    marks.push_back(std::move(mark));
  }
  ASSIGN_OR_RETURN(CudaEvent after_each, CudaEvent::Create());
  auto phase = [&](bool event_after_each) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(marks[0].Record(stream.get()));
    for (int w = 0; w < windows; ++w) {
      for (int64_t i = 0; i < per_window; ++i) {
        RETURN_IF_ERROR(launch());
        // What the daemon records between products on its shared stream.
        if (event_after_each) RETURN_IF_ERROR(after_each.Record(stream.get()));
      }
      RETURN_IF_ERROR(marks[w + 1].Record(stream.get()));
    }
    RETURN_IF_ERROR(marks[windows].Synchronize());
    std::vector<double> tflops;
    for (int w = 0; w < windows; ++w) {
      ASSIGN_OR_RETURN(double s,
                       CudaEvent::ElapsedSeconds(marks[w], marks[w + 1]));
      tflops.push_back(problem.flops() * per_window / s * 1e-12);
    }
    std::sort(tflops.begin(), tflops.end());
    return tflops[tflops.size() / 2];
  };
  SustainedResult result;
  result.choice = choice;
  result.products = per_window * windows;
  ASSIGN_OR_RETURN(result.back_to_back_tflops, phase(false));
  ASSIGN_OR_RETURN(result.event_after_each_tflops, phase(true));
  return result;
}

}  // namespace matmul::cuda
