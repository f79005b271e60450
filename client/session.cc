#include "client/session.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace matmul {

// Keeps one read pending for the whole life of the stream: the first read
// delivers the id, the last one (ok == false) tells that the daemon ended
// the stream. The callback API needs no thread of our own for that.
class Session::Stream final : public grpc::ClientReadReactor<v1::SessionEvent> {
 public:
  Stream(Client& client, const std::string& client_name) {
    request_.set_client_name(client_name);
    // No deadline: the stream is meant to live as long as the process.
    context_.set_wait_for_ready(client.options().wait_for_ready);
    client.stub().async()->OpenSession(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  // Returns the id, or why there is none, waiting up to `timeout`.
  absl::StatusOr<std::string> WaitForId(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !session_id_.empty() || ended_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
    if (!session_id_.empty()) return session_id_;
    if (!ended_) {
      return absl::DeadlineExceededError(
          absl::StrCat("OpenSession sent no session id within ",
                       absl::FormatDuration(timeout)));
    }
    if (!final_status_.ok()) return final_status_;
    return absl::UnavailableError("the daemon closed OpenSession at once");
  }

  // Ends the call (no-op once it ended) and waits for gRPC to let go of
  // this object.
  void CancelAndWait() {
    context_.TryCancel();
    done_.WaitForNotification();
  }

  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        ended_ = true;
        return;  // OnDone follows
      }
      if (session_id_.empty()) session_id_ = event_.session_id();
    }
    StartRead(&event_);  // wait for the end of the stream
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
  v1::OpenSessionRequest request_;
  v1::SessionEvent event_;
  mutable absl::Mutex mu_;
  std::string session_id_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

Session::Session(std::unique_ptr<Stream> stream) : stream_(std::move(stream)) {}

absl::StatusOr<std::unique_ptr<Session>> Session::Open(
    Client& client, const std::string& client_name, absl::Duration timeout) {
  auto stream = std::make_unique<Stream>(client, client_name);
  absl::StatusOr<std::string> id = stream->WaitForId(timeout);
  if (!id.ok()) {
    stream->CancelAndWait();
    return id.status();
  }
  // The constructor is private, so std::make_unique cannot reach it.
  std::unique_ptr<Session> session =
      absl::WrapUnique(new Session(std::move(stream)));
  session->session_id_ = *std::move(id);
  return session;
}

Session::~Session() { stream_->CancelAndWait(); }

bool Session::alive() const { return !stream_->ended(); }

}  // namespace matmul
