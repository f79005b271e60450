// Who is calling: the credentials of the process at the other end of a
// unix-socket connection, as the kernel reports them (SO_PEERCRED), never
// as the caller describes itself. Calls over TCP have none.
#ifndef MATMUL_SERVER_TRANSPORT_PEER_CREDENTIALS_H_
#define MATMUL_SERVER_TRANSPORT_PEER_CREDENTIALS_H_

#include <sys/types.h>

#include <string>

namespace matmul {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  // A pidfd of the peer process taken from the connection (SO_PEERPIDFD),
  // so that a pid reused after the peer died names nobody; -1 where the
  // kernel has no SO_PEERPIDFD (then pidfd_open(pid) stands in). Borrowed:
  // valid for the duration of the call that carries it.
  int pidfd = -1;

  bool same_process(const PeerCredentials& other) const {
    return pid == other.pid && uid == other.uid;
  }
  std::string DebugString() const {
    return "pid " + std::to_string(pid) + ", uid " + std::to_string(uid);
  }
};

}  // namespace matmul

#endif  // MATMUL_SERVER_TRANSPORT_PEER_CREDENTIALS_H_
