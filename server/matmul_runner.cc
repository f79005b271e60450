#include "server/matmul_runner.h"

#include "absl/strings/str_cat.h"

namespace matmul {

absl::Status MatmulRunner::Run(const MatmulPlan& plan, BoundOperands& operands,
                               const v1::MatmulRequest& request,
                               absl::Time accepted,
                               v1::MatmulResponse* response) {
  const absl::Time started = absl::Now();
  absl::StatusOr<GemmRunInfo> run = operands.device_pointers()
                                        ? backend_.RunDevice(operands.problem())
                                        : backend_.RunHost(operands.problem());
  if (!run.ok()) {
    return absl::Status(
        run.status().code(),
        absl::StrCat(backend_.name(), " backend: ", run.status().message()));
  }
  const GemmProblem& p = plan.problem;
  response->set_request_id(request.request_id());
  if (!plan.output_in_region) {
    v1::Tensor* c = response->mutable_c();
    c->set_dtype(p.c_dtype == DType::kBF16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
    if (p.batch > 1) c->add_shape(p.batch);
    c->add_shape(p.m);
    c->add_shape(p.n);
    c->set_inline_data(operands.TakeOutput());
  }
  response->set_backend(backend_.name());
  response->set_kernel(run->kernel);
  response->set_batch_size(1);

  RequestRecord record;
  record.shape = ShapeName(p);
  record.kernel = run->kernel;
  record.flops = p.flops();
  record.queue_seconds = absl::ToDoubleSeconds(started - accepted);
  record.kernel_seconds = run->kernel_seconds;
  record.total_seconds = absl::ToDoubleSeconds(absl::Now() - accepted);
  v1::Timing* timing = response->mutable_timing();
  timing->set_queue_seconds(record.queue_seconds);
  timing->set_kernel_seconds(record.kernel_seconds);
  timing->set_total_seconds(record.total_seconds);
  metrics_.RecordSuccess(record);
  return absl::OkStatus();
}

}  // namespace matmul
