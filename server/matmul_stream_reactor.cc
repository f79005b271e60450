#include "server/matmul_stream_reactor.h"

#include "server/matmul_service.h"

namespace matmul {

MatmulStreamReactor::MatmulStreamReactor(MatmulServiceImpl* service,
                                         grpc::CallbackServerContext* context)
    : service_(service), context_(context), reading_(std::make_unique<Call>()) {
  StartRead(&reading_->request);
}

void MatmulStreamReactor::OnReadDone(bool ok) {
  if (!ok) {  // half-close, cancellation or a broken stream
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
    }
    MaybeFinish();
    return;
  }
  std::unique_ptr<Call> call = std::move(reading_);
  reading_ = std::make_unique<Call>();
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  StartRead(&reading_->request);
  Call* raw = call.get();
  service_->Submit(GrpcCallControl(context_), &raw->request, &raw->response,
                   [this, call = std::move(call)](absl::Status status) mutable {
                     Answer(std::move(call), std::move(status));
                   });
}

void MatmulStreamReactor::Answer(std::unique_ptr<Call> call,
                                 absl::Status status) {
  v1::MatmulResponse response;
  if (status.ok()) {
    response = std::move(call->response);
  } else {
    response.set_request_id(call->request.request_id());
    response.set_status_code(static_cast<int32_t>(status.code()));
    response.set_status_message(std::string(status.message()));
  }
  const v1::MatmulResponse* to_write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!write_failed_) {
      outbox_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        to_write = &outbox_.front();
      }
    }
  }
  if (to_write != nullptr) {
    StartWrite(to_write);
  } else {
    MaybeFinish();
  }
}

void MatmulStreamReactor::OnWriteDone(bool ok) {
  const v1::MatmulResponse* to_write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    outbox_.pop_front();
    if (!ok) {  // the client went away: drop what is left
      write_failed_ = true;
      outbox_.clear();
    }
    if (!outbox_.empty()) {
      to_write = &outbox_.front();
    } else {
      writing_ = false;
    }
  }
  if (to_write != nullptr) {
    StartWrite(to_write);
  } else {
    MaybeFinish();
  }
}

void MatmulStreamReactor::MaybeFinish() {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || !reads_done_ || in_flight_ > 0 || writing_) return;
    finished_ = true;
    if (write_failed_) {
      status = grpc::Status(grpc::StatusCode::CANCELLED,
                            "the client stopped reading responses");
    }
  }
  Finish(status);
}

void MatmulStreamReactor::OnDone() {
  // Finish ran only after every submitted request was answered, so no job
  // refers to this reactor any more.
  delete this;
}

}  // namespace matmul
