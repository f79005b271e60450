// One MatmulStream call: reads requests as they come, submits each to the
// service, and writes each response when its product is done (one write in
// flight at a time, the rest queued). Finishes once the client has
// half-closed and every accepted request has been answered.
//
// The stream is read as raw bytes and parsed here: with typed messages a
// message that fails to parse shows up as OnReadDone(false), which cannot
// be told from a half-close, so the stream would end OK and leave every
// later request unanswered. Here such a message gets an in-band answer
// (status_code INVALID_ARGUMENT, request_id 0, since it could not be read)
// and the stream goes on.
#ifndef MATMUL_SERVER_API_MATMUL_STREAM_REACTOR_H_
#define MATMUL_SERVER_API_MATMUL_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/product_submitter.h"

namespace matmul {

class MatmulStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `submitter` must outlive the reactor.
  MatmulStreamReactor(ProductSubmitter& submitter,
                      grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // A request and its response live together until the response is queued.
  struct Call {
    v1::MatmulRequest request;
    v1::MatmulResponse response;
  };

  void Answer(std::unique_ptr<Call> call, absl::Status status);
  // Queues `response` for writing (or drops it once writes have failed).
  void Write(const v1::MatmulResponse& response);
  // The status to finish the RPC with, once, when nothing is left to read,
  // run or write. Decided under mu_ by the thread that made it so, which
  // then calls Finish as its last touch of the reactor: OnDone (delete
  // this) may run as soon as Finish is called, so a thread that unlocked
  // first and looked again could find the reactor freed.
  std::optional<grpc::Status> TakeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ProductSubmitter& submitter_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer reading_;  // the target of the read in flight

  absl::Mutex mu_;
  // Serialised responses waiting to be written; the front is being written
  // while writing_ is true.
  std::deque<grpc::ByteBuffer> outbox_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_MATMUL_STREAM_REACTOR_H_
