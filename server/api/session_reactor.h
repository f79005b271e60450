// One OpenSession call: opens a session in the registry, sends its id, and
// keeps the stream open. When the stream ends for any reason (the client
// closed or cancelled it, its process died, the daemon is stopping), the
// session and every region in it are released.
#ifndef MATMUL_SERVER_API_SESSION_REACTOR_H_
#define MATMUL_SERVER_API_SESSION_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/region_registry.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

class SessionReactor final : public grpc::ServerWriteReactor<v1::SessionEvent> {
 public:
  // `on_done` runs last, from OnDone (the service forgets the reactor).
  // The session belongs to `owner`, the process that opened it.
  SessionReactor(RegionRegistry& registry, const std::string& client_name,
                 const PeerCredentials& owner,
                 std::function<void(SessionReactor*)> on_done);

  // Ends the stream (daemon shutdown). Safe to call more than once and
  // concurrently with the client going away.
  void Close(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  RegionRegistry& registry_;
  const std::string session_id_;
  std::function<void(SessionReactor*)> on_done_;
  v1::SessionEvent event_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_SESSION_REACTOR_H_
