// matmul::Session: one OpenSession stream, held open for the owner's
// lifetime. The daemon ties every region registered under the session id to
// this stream: when it ends (the Session is destroyed, or the process exits,
// crashes or is killed and the kernel closes its socket) the daemon releases
// them all, so a client that dies never leaks daemon-side mappings.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
//                    Session::Open(*client, "trainer"));
//   ... RegisteredRegion::RegisterShm(*client, *session, *segment) ...
//
// Destroy regions before their session, and the session before its client
// (the client owns the channel the stream runs on).
#ifndef MATMUL_CLIENT_SESSION_H_
#define MATMUL_CLIENT_SESSION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/held_stream.h"

namespace matmul {

class Session {
 public:
  // Starts the stream and waits up to `timeout` for the first event, which
  // carries the session id. UNAVAILABLE (or the stream's own status) when
  // the daemon ends the stream first, DEADLINE_EXCEEDED when no id arrives
  // in time. `client_name` shows up in the daemon's logs.
  static absl::StatusOr<std::unique_ptr<Session>> Open(
      Client& client, const std::string& client_name,
      absl::Duration timeout = absl::Seconds(30));

  // Cancels the stream and waits until gRPC is done with it; the daemon
  // then drops the session's regions.
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& session_id() const { return session_id_; }

  // False once the daemon ended the stream (it shut down or restarted):
  // the session and its regions no longer exist there.
  bool alive() const;

 private:
  using Stream = HeldStream<v1::OpenSessionRequest, v1::SessionEvent>;

  explicit Session(std::unique_ptr<Stream> stream);

  std::unique_ptr<Stream> stream_;
  std::string session_id_;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_SESSION_H_
