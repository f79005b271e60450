// Who is at the other end of a gRPC call, from the kernel rather than from
// anything the caller sends. Calls that came through the daemon's own
// unix-socket listener have the peer string "fd:<n>" (gRPC's name for a
// connection handed to it by fd), and the connection's SO_PEERCRED names
// the process that connected. A call's connection stays open at least as
// long as the call, so <n> cannot be reused by another connection while
// the call asks about it.
#ifndef MATMUL_SERVER_TRANSPORT_PEER_IDENTITY_H_
#define MATMUL_SERVER_TRANSPORT_PEER_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// A local caller's credentials, plus a pidfd of its process where the
// kernel offers one (SO_PEERPIDFD): `credentials.pidfd` borrows it.
struct LocalPeer {
  PeerCredentials credentials;
  UniqueFd pidfd;
};

// The local caller behind `grpc_peer` (ServerContext::peer()).
// PERMISSION_DENIED for calls over TCP, which carry no identity the daemon
// can trust for regions, sessions and rings. `with_pidfd` also takes a
// pidfd of the caller (one more syscall; only cuda_vmm needs it).
absl::StatusOr<LocalPeer> LocalPeerOf(absl::string_view grpc_peer,
                                      bool with_pidfd = false);

// The key fairness limits count a caller's requests under: its process for
// local callers, its address (without the port) over TCP.
std::string ClientKey(absl::string_view grpc_peer);
std::string ClientKey(const PeerCredentials& local_caller);

}  // namespace matmul

#endif  // MATMUL_SERVER_TRANSPORT_PEER_IDENTITY_H_
