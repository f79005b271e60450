#include "server/api/session_reactor.h"

namespace matmul {

SessionReactor::SessionReactor(RegionRegistry& registry,
                               const std::string& client_name,
                               const PeerCredentials& owner,
                               std::function<void(SessionReactor*)> on_done)
    : registry_(registry),
      session_id_(registry.OpenSession(client_name, owner)),
      on_done_(std::move(on_done)) {
  event_.set_session_id(session_id_);
  StartWrite(&event_);
}

void SessionReactor::Close(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(status);
}

void SessionReactor::OnWriteDone(bool ok) {
  // After the id is delivered the stream stays open: nothing more to send.
  if (!ok) Close(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
}

void SessionReactor::OnCancel() {
  Close(grpc::Status(grpc::StatusCode::CANCELLED, "session closed"));
}

void SessionReactor::OnDone() {
  registry_.CloseSession(session_id_);
  on_done_(this);
  // gRPC owns reactors by raw pointer; the reactor deletes itself here.
  delete this;
}

}  // namespace matmul
