// One MatmulStream call: reads requests as they come, submits each to the
// service, and writes each response when its product is done (one write in
// flight at a time, the rest queued). Finishes once the client has
// half-closed and every accepted request has been answered.
#ifndef MATMUL_SERVER_MATMUL_STREAM_REACTOR_H_
#define MATMUL_SERVER_MATMUL_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

class MatmulServiceImpl;

class MatmulStreamReactor final
    : public grpc::ServerBidiReactor<v1::MatmulRequest, v1::MatmulResponse> {
 public:
  MatmulStreamReactor(MatmulServiceImpl* service,
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
  // Finishes the RPC when nothing is left to read, run or write.
  void MaybeFinish();

  MatmulServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  std::unique_ptr<Call> reading_;  // the target of the read in flight

  absl::Mutex mu_;
  // Responses waiting to be written; the front is being written while
  // writing_ is true.
  std::deque<v1::MatmulResponse> outbox_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_MATMUL_STREAM_REACTOR_H_
