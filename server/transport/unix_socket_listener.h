// The daemon's unix-socket listener. The daemon binds and accepts itself
// (rather than through gRPC's own listener) for two reasons: the socket
// file gets its mode and group before anyone can connect, and every
// accepted connection's fd is handed to gRPC (AddInsecureChannelFromFd),
// whose peer string for it is "fd:<n>", so that a call can ask the kernel
// who is at the other end (see peer_identity.h).
#ifndef MATMUL_SERVER_TRANSPORT_UNIX_SOCKET_LISTENER_H_
#define MATMUL_SERVER_TRANSPORT_UNIX_SOCKET_LISTENER_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace matmul {

struct UnixSocketOptions {
  // Permission bits of the socket file: who may connect.
  mode_t mode = 0660;
  // The socket file's group (gid); nullopt keeps the daemon's own.
  std::optional<gid_t> group;
  // A directory that others may write to lets them replace the socket
  // with their own (and read every tensor clients send): refused unless
  // this is set.
  bool allow_shared_directory = false;
  // Make the socket's directory (0755) when it is missing: for the default
  // path (/run/matmul), not for one the operator named.
  bool create_directory = false;
};

class UnixSocketListener {
 public:
  // Binds `path` with the options' mode and group already in place when
  // listen() starts taking connections; nothing is accepted before Start.
  // A stale socket file of the daemon's own user that nobody listens on is
  // replaced; any other existing file is left alone and refused.
  static absl::StatusOr<std::unique_ptr<UnixSocketListener>> Create(
      const std::string& path, const UnixSocketOptions& options);
  // Stops accepting and removes the socket file.
  ~UnixSocketListener();

  UnixSocketListener(const UnixSocketListener&) = delete;
  UnixSocketListener& operator=(const UnixSocketListener&) = delete;

  // Accepts connections on a thread of its own and hands each (a
  // non-blocking, close-on-exec fd) to `on_connection`, which owns it.
  void Start(std::function<void(int fd)> on_connection);
  // Stops accepting (connections already handed over stay open) and
  // removes the socket file so that new clients fail fast. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  UnixSocketListener(std::string path, ino_t inode, UniqueFd socket,
                     UniqueFd wake);
  void AcceptLoop(const std::function<void(int fd)>& on_connection);

  const std::string path_;
  const ino_t inode_;  // of the socket file bound, to remove only that one
  UniqueFd socket_;
  UniqueFd wake_;  // an eventfd that ends the accept loop
  std::thread acceptor_;
  bool stopped_ = false;
};

// Parses a --socket_group value: a group name or a numeric gid.
absl::StatusOr<gid_t> ParseGroup(const std::string& group);

}  // namespace matmul

#endif  // MATMUL_SERVER_TRANSPORT_UNIX_SOCKET_LISTENER_H_
