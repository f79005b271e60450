#include "server/api/matmul_stream_reactor.h"

// SerializationTraits for protobuf messages (the stream is read as raw bytes).
#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/strings/str_cat.h"
#include "server/api/grpc_call_control.h"

namespace matmul {

MatmulStreamReactor::MatmulStreamReactor(ProductSubmitter& submitter,
                                         grpc::CallbackServerContext* context)
    : submitter_(submitter), context_(context) {
  StartRead(&reading_);
}

void MatmulStreamReactor::OnReadDone(bool ok) {
  if (!ok) {  // half-close, cancellation or a broken stream
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      finish = TakeFinish();
    }
    if (finish) Finish(*finish);
    return;
  }
  auto call = std::make_unique<Call>();
  const size_t bytes = reading_.Length();
  // Deserialize consumes (and clears) the buffer either way.
  const bool parsed = grpc::SerializationTraits<v1::MatmulRequest>::Deserialize(
                          &reading_, &call->request)
                          .ok();
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  StartRead(&reading_);
  if (!parsed) {
    Answer(std::move(call),
           absl::InvalidArgumentError(absl::StrCat(
               "a stream message of ", bytes,
               " bytes is not a serialized matmul.v1.MatmulRequest; it was "
               "skipped (request_id 0: its id could not be read) and the "
               "stream goes on")));
    return;
  }
  Call* raw = call.get();
  CallControl control = GrpcCallControl(context_);
  control.origin = "MatmulStream from " + control.origin;
  submitter_.Submit(
      std::move(control), &raw->request, &raw->response,
      [this, call = std::move(call)](absl::Status status) mutable {
        Answer(std::move(call), std::move(status));
      });
}

void MatmulStreamReactor::Answer(std::unique_ptr<Call> call,
                                 absl::Status status) {
  if (!status.ok()) {
    call->response.Clear();
    call->response.set_request_id(call->request.request_id());
    call->response.set_status_code(static_cast<int32_t>(status.code()));
    call->response.set_status_message(std::string(status.message()));
  }
  Write(call->response);
}

void MatmulStreamReactor::Write(const v1::MatmulResponse& response) {
  grpc::ByteBuffer bytes;
  bool own_buffer = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<v1::MatmulResponse>::Serialize(response, &bytes,
                                                               &own_buffer);
  const grpc::ByteBuffer* to_write = nullptr;
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    // A response that cannot be serialised (it would have to exceed 2 GiB)
    // is dropped; the client then misses one answer but the stream lives.
    if (!write_failed_ && serialized.ok()) {
      outbox_.push_back(std::move(bytes));
      if (!writing_) {
        writing_ = true;
        to_write = &outbox_.front();
      }
    }
    if (to_write == nullptr) finish = TakeFinish();
  }
  if (to_write != nullptr) {
    StartWrite(to_write);
  } else if (finish) {
    Finish(*finish);
  }
}

void MatmulStreamReactor::OnWriteDone(bool ok) {
  const grpc::ByteBuffer* to_write = nullptr;
  std::optional<grpc::Status> finish;
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
      finish = TakeFinish();
    }
  }
  if (to_write != nullptr) {
    StartWrite(to_write);
  } else if (finish) {
    Finish(*finish);
  }
}

std::optional<grpc::Status> MatmulStreamReactor::TakeFinish() {
  if (finished_ || !reads_done_ || in_flight_ > 0 || writing_) {
    return std::nullopt;
  }
  finished_ = true;
  if (write_failed_) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client stopped reading responses");
  }
  return grpc::Status::OK;
}

void MatmulStreamReactor::OnDone() {
  // Finish ran only after every submitted request was answered, so no job
  // refers to this reactor any more.
  delete this;
}

}  // namespace matmul
