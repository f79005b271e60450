#include "server/transport/peer_identity.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

// Linux 6.5 and later; older kernels answer ENOPROTOOPT.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace matmul {

absl::StatusOr<LocalPeer> LocalPeerOf(absl::string_view grpc_peer,
                                      bool with_pidfd) {
  absl::string_view fd_text = grpc_peer;
  int fd = -1;
  if (!absl::ConsumePrefix(&fd_text, "fd:") ||
      !absl::SimpleAtoi(fd_text, &fd) || fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "regions, sessions and request rings are for clients on the "
        "daemon's host: connect through its unix socket (this call came "
        "from ",
        grpc_peer, ")"));
  }
  sockaddr_storage local{};
  socklen_t local_size = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
      local.ss_family != AF_UNIX) {
    return absl::PermissionDeniedError(
        absl::StrCat("the connection of ", grpc_peer,
                     " is not a unix socket; regions, sessions and request "
                     "rings are local-only"));
  }
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot read the caller's credentials: ", strerror(errno)));
  }
  LocalPeer peer;
  peer.credentials.pid = credentials.pid;
  peer.credentials.uid = credentials.uid;
  peer.credentials.gid = credentials.gid;
  if (with_pidfd) {
    int pidfd = -1;
    socklen_t pidfd_size = sizeof(pidfd);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfd_size) == 0) {
      peer.pidfd.reset(pidfd);
      peer.credentials.pidfd = pidfd;
    }
  }
  return peer;
}

std::string ClientKey(absl::string_view grpc_peer) {
  if (absl::StartsWith(grpc_peer, "fd:")) {
    absl::StatusOr<LocalPeer> peer = LocalPeerOf(grpc_peer);
    if (peer.ok()) return ClientKey(peer->credentials);
  }
  // "ipv4:1.2.3.4:567" / "ipv6:[::1]:567": the host without the port.
  const size_t colon = grpc_peer.rfind(':');
  return std::string(colon == absl::string_view::npos
                         ? grpc_peer
                         : grpc_peer.substr(0, colon));
}

std::string ClientKey(const PeerCredentials& local_caller) {
  return absl::StrCat("pid:", local_caller.pid);
}

}  // namespace matmul
