#include "server/matmul_service.h"

#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/matmul_stream_reactor.h"

namespace matmul {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

MatmulServiceImpl::MatmulServiceImpl(GemmBackend& backend, Executor& executor,
                                     ServerMetrics& metrics,
                                     const ValidationLimits& limits,
                                     int max_concurrent_requests)
    : backend_(backend),
      executor_(executor),
      metrics_(metrics),
      limits_(limits),
      max_concurrent_requests_(max_concurrent_requests),
      runner_(backend, metrics) {}

void MatmulServiceImpl::Submit(grpc::CallbackServerContext* context,
                               const v1::MatmulRequest* request,
                               v1::MatmulResponse* response,
                               absl::AnyInvocable<void(absl::Status) &&> done) {
  const absl::Time accepted = absl::Now();
  metrics_.RequestStarted();
  // Every path ends here: count the outcome, then answer.
  auto finish = [this, done = std::move(done)](absl::Status status) mutable {
    metrics_.CountRequest(status.code());
    metrics_.RequestFinished();
    std::move(done)(std::move(status));
  };
  if (absl::FromChrono(context->deadline()) <= accepted) {
    finish(absl::DeadlineExceededError(
        "the request's deadline had passed when it arrived"));
    return;
  }
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(*request, limits_);
  if (!plan.ok()) {
    finish(plan.status());
    return;
  }
  executor_.Submit(
      [this, context, request, response, accepted, plan = std::move(*plan),
       finish = std::move(finish)](absl::Status admission) mutable {
        if (!admission.ok()) {
          finish(std::move(admission));
          return;
        }
        if (context->IsCancelled()) {
          finish(absl::CancelledError("the call was cancelled before it ran"));
          return;
        }
        if (absl::FromChrono(context->deadline()) < absl::Now()) {
          finish(absl::DeadlineExceededError(
              "the request's deadline passed while it waited in the queue"));
          return;
        }
        finish(runner_.Run(plan, *request, accepted, response));
      });
}

grpc::ServerUnaryReactor* MatmulServiceImpl::Matmul(
    grpc::CallbackServerContext* context, const v1::MatmulRequest* request,
    v1::MatmulResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Submit(context, request, response, [reactor](absl::Status status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerBidiReactor<v1::MatmulRequest, v1::MatmulResponse>*
MatmulServiceImpl::MatmulStream(grpc::CallbackServerContext* context) {
  // gRPC owns reactors by raw pointer; the reactor deletes itself in OnDone.
  return new MatmulStreamReactor(this, context);
}

grpc::ServerUnaryReactor* MatmulServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context,
    const v1::GetServerInfoRequest* /*request*/,
    v1::GetServerInfoResponse* response) {
  response->set_version(MATMUL_VERSION);
  response->set_backend(backend_.name());
  for (const DeviceInfo& info : backend_.devices()) {
    v1::Device* device = response->add_devices();
    device->set_name(info.name);
    device->set_compute_capability(info.compute_capability);
    device->set_memory_bytes(info.memory_bytes);
    device->set_multiprocessors(info.multiprocessors);
  }
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(limits_.max_message_bytes);
  limits->set_max_dimension(limits_.max_dimension);
  limits->set_max_tensor_bytes(limits_.max_tensor_bytes);
  limits->set_max_concurrent_requests(max_concurrent_requests_);
  response->add_supported_input_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_FP32);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace matmul
