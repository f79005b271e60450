#include "client/session.h"

#include <utility>

#include "absl/memory/memory.h"

namespace matmul {

Session::Session(std::unique_ptr<Stream> stream) : stream_(std::move(stream)) {}

absl::StatusOr<std::unique_ptr<Session>> Session::Open(
    Client& client, const std::string& client_name, absl::Duration timeout) {
  v1::OpenSessionRequest request;
  request.set_client_name(client_name);
  auto stream = std::make_unique<Stream>(
      [&client](grpc::ClientContext* context,
                const v1::OpenSessionRequest* request,
                grpc::ClientReadReactor<v1::SessionEvent>* reactor) {
        client.stub().async()->OpenSession(context, request, reactor);
      },
      std::move(request), client.options().wait_for_ready);
  absl::StatusOr<v1::SessionEvent> first =
      stream->WaitForFirstEvent(timeout, "OpenSession");
  if (!first.ok()) {
    stream->CancelAndWait();
    return first.status();
  }
  // The constructor is private, so std::make_unique cannot reach it.
  std::unique_ptr<Session> session =
      absl::WrapUnique(new Session(std::move(stream)));
  session->session_id_ = first->session_id();
  return session;
}

Session::~Session() { stream_->CancelAndWait(); }

bool Session::alive() const { return !stream_->ended(); }

}  // namespace matmul
