#include "server/api/grpc_call_control.h"

#include <chrono>
#include <string>

#include "server/transport/peer_identity.h"

namespace matmul {

CallControl GrpcCallControl(grpc::ServerContextBase* context) {
  // gRPC 1.51 sends a deadline as the whole milliseconds left (grpc-timeout)
  // and one that has already passed as "1n", which the server reads back as
  // 1 ms from when the headers arrived; both ends also keep time in whole
  // milliseconds, which can add up to one more. So context->deadline() can
  // be up to 2 ms later than the client's deadline, and an
  // expired call would run and be answered OK to nobody. Taking the slack
  // off makes it expired here too; a call with less than 2 ms left could
  // not get its answer back in time anyway.
  const std::chrono::system_clock::time_point deadline = context->deadline();
  CallControl control{
      .deadline = deadline == std::chrono::system_clock::time_point::max()
                      ? absl::InfiniteFuture()
                      : absl::FromChrono(deadline) - kGrpcDeadlineSlack,
      .cancelled = [context] { return context->IsCancelled(); }};
  const std::string peer = context->peer();
  control.origin = peer;
  if (absl::StatusOr<LocalPeer> local = LocalPeerOf(peer); local.ok()) {
    control.caller = local->credentials;
    control.client_key = ClientKey(local->credentials);
  } else {
    control.client_key = ClientKey(peer);
  }
  return control;
}

}  // namespace matmul
