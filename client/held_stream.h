// matmul::HeldStream: a server-streaming call held open for its owner's
// lifetime, whose first event says the daemon set something up for us (a
// session, a request ring) and whose end says the daemon let it go. One read
// stays pending the whole time, so no thread of our own is needed.
//
//   auto stream = std::make_unique<HeldStream<v1::OpenSessionRequest,
//                                             v1::SessionEvent>>(
//       [&](grpc::ClientContext* context, const v1::OpenSessionRequest* r,
//           grpc::ClientReadReactor<v1::SessionEvent>* reactor) {
//         client.stub().async()->OpenSession(context, r, reactor);
//       },
//       request, client.options().wait_for_ready);
//   ASSIGN_OR_RETURN(v1::SessionEvent first,
//                    stream->WaitForFirstEvent(timeout, "OpenSession"));
#ifndef MATMUL_CLIENT_HELD_STREAM_H_
#define MATMUL_CLIENT_HELD_STREAM_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace matmul {

template <typename Request, typename Event>
class HeldStream final : public grpc::ClientReadReactor<Event> {
 public:
  // `start` binds the call to this reactor (stub().async()->Method(...)).
  using Starter = std::function<void(grpc::ClientContext*, const Request*,
                                     grpc::ClientReadReactor<Event>*)>;

  HeldStream(const Starter& start, Request request, bool wait_for_ready)
      : request_(std::move(request)) {
    // No deadline: the stream lives as long as its owner.
    context_.set_wait_for_ready(wait_for_ready);
    start(&context_, &request_, this);
    this->StartRead(&event_);
    this->StartCall();
  }

  // The first event, waiting up to `timeout`; otherwise the stream's own
  // status, UNAVAILABLE when the daemon ended it at once, or
  // DEADLINE_EXCEEDED. `method` names the call in messages.
  absl::StatusOr<Event> WaitForFirstEvent(absl::Duration timeout,
                                          const std::string& method) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return first_.has_value() || ended_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
    if (first_.has_value() && !ended_) return *first_;
    if (!ended_) {
      return absl::DeadlineExceededError(absl::StrCat(
          method, " got no answer within ", absl::FormatDuration(timeout)));
    }
    if (!final_status_.ok()) return final_status_;
    return absl::UnavailableError(
        absl::StrCat("the daemon closed ", method, " at once"));
  }

  // Ends the call (no-op once it ended) and waits for gRPC to let go of
  // this object.
  void CancelAndWait() {
    context_.TryCancel();
    done_.WaitForNotification();
  }

  // True once the daemon ended the stream (or it was cancelled).
  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  void OnReadDone(bool ok) override {
    // The stream's end is marked in OnDone, which follows a failed read and
    // brings the status that says why.
    if (!ok) return;
    {
      absl::MutexLock lock(&mu_);
      if (!first_.has_value()) first_ = event_;
    }
    this->StartRead(&event_);  // wait for the end of the stream
  }

  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      final_status_ = FromGrpcStatus(status);
    }
    // Last touch of this object by gRPC; a Notification may be destroyed
    // as soon as its waiter returns, unlike a Mutex still being unlocked.
    done_.Notify();
  }

 private:
  grpc::ClientContext context_;
  const Request request_;
  Event event_;
  mutable absl::Mutex mu_;
  std::optional<Event> first_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_HELD_STREAM_H_
