#include "server/transport/unix_socket_listener.h"

#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace matmul {
namespace {

std::string Errno(int error) { return strerror(error); }

std::string Octal(mode_t mode) { return absl::StrFormat("%04o", mode); }

absl::StatusOr<sockaddr_un> SocketAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path '", path, "' is empty or longer than ",
                     sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// The directory must exist (or be made, when asked) and must not let
// others replace what is in it.
absl::Status CheckDirectory(const std::string& path,
                            const UnixSocketOptions& options) {
  const size_t slash = path.rfind('/');
  const std::string directory =
      slash == std::string::npos ? "."
                                 : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat info {};
  if (options.create_directory && stat(directory.c_str(), &info) != 0 &&
      errno == ENOENT) {
    if (mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the socket's directory ", directory,
          " does not exist and cannot be made: ", Errno(errno),
          " (create it, or pick another path with --listen=unix:/path)"));
    }
  }
  if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the socket's directory ", directory,
                     " does not exist or is not a directory (create it, or "
                     "pick another path with --listen=unix:/path)"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
      !options.allow_shared_directory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the socket's directory ", directory, " (mode ",
        Octal(info.st_mode & 07777),
        ") is writable by other users, who could replace the socket with "
        "their own; use a directory only the daemon's user can write (e.g. "
        "/run/matmul), or pass --allow_shared_socket_dir"));
  }
  return absl::OkStatus();
}

// Removes a stale socket of our own at `path` (a previous daemon that did
// not clean up); refuses anything else that is there.
absl::Status ClearStaleSocket(const std::string& path,
                              const sockaddr_un& address) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot inspect ", path, ": ", Errno(errno)));
  }
  if (!S_ISSOCK(info.st_mode) || info.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " exists and is not a socket of the daemon's user (uid ",
        geteuid(), "); remove it or pick another path"));
  }
  UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&address),
              sizeof(address)) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another server is listening on ", path,
                     " already; stop it or pick another path"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot remove the stale socket ", path, ": ", Errno(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<gid_t> ParseGroup(const std::string& group) {
  uint32_t gid = 0;
  if (absl::SimpleAtoi(group, &gid)) return static_cast<gid_t>(gid);
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int error =
      getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket_group: no group named '", group,
                     "' (give a group name or a numeric gid)"));
  }
  return found->gr_gid;
}

absl::StatusOr<std::unique_ptr<UnixSocketListener>> UnixSocketListener::Create(
    const std::string& path, const UnixSocketOptions& options) {
  if ((options.mode & ~static_cast<mode_t>(0777)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket_mode ", Octal(options.mode), " has bits beyond 0777"));
  }
  absl::StatusOr<sockaddr_un> address = SocketAddress(path);
  if (!address.ok()) return address.status();
  if (absl::Status directory = CheckDirectory(path, options); !directory.ok()) {
    return directory;
  }
  if (absl::Status stale = ClearStaleSocket(path, *address); !stale.ok()) {
    return stale;
  }
  UniqueFd socket_fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket_fd.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", Errno(errno)));
  }
  // bind() creates the file with the process umask applied: under 0177 it
  // is born 0600, open to nobody else until its group and mode are set.
  // The umask is process-wide, which is why this runs at start-up.
  const mode_t previous_umask = umask(0177);
  const int bound =
      bind(socket_fd.get(), reinterpret_cast<const sockaddr*>(&*address),
           sizeof(*address));
  const int bind_errno = errno;
  umask(previous_umask);
  if (bound != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", path, ": ", Errno(bind_errno)));
  }
  auto fail = [&path](absl::string_view what) {
    const int error = errno;
    unlink(path.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, ": ", Errno(error)));
  };
  if (options.group.has_value() &&
      chown(path.c_str(), static_cast<uid_t>(-1), *options.group) != 0) {
    return fail(absl::StrCat("cannot give group ", *options.group, " to"));
  }
  if (chmod(path.c_str(), options.mode) != 0) {
    return fail(absl::StrCat("cannot set mode ", Octal(options.mode), " on"));
  }
  if (listen(socket_fd.get(), SOMAXCONN) != 0) return fail("cannot listen on");
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return fail("eventfd for");
  struct stat bound_file {};
  if (stat(path.c_str(), &bound_file) != 0) return fail("cannot stat");
  return std::unique_ptr<UnixSocketListener>(new UnixSocketListener(
      path, bound_file.st_ino, std::move(socket_fd), std::move(wake)));
}

UnixSocketListener::UnixSocketListener(std::string path, ino_t inode,
                                       UniqueFd socket, UniqueFd wake)
    : path_(std::move(path)),
      inode_(inode),
      socket_(std::move(socket)),
      wake_(std::move(wake)) {}

UnixSocketListener::~UnixSocketListener() { Stop(); }

void UnixSocketListener::Start(std::function<void(int fd)> on_connection) {
  acceptor_ = std::thread([this, on_connection = std::move(on_connection)] {
    AcceptLoop(on_connection);
  });
}

void UnixSocketListener::AcceptLoop(
    const std::function<void(int fd)>& on_connection) {
  while (true) {
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int connection =
        accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection >= 0) {
      on_connection(connection);
    } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
               errno == ENOMEM) {
      // Out of descriptors: back off instead of spinning on a listener
      // that stays readable.
      poll(nullptr, 0, 50);
    }
  }
}

void UnixSocketListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
    acceptor_.join();
  }
  socket_.reset();
  // Only our own socket: a file put there since is someone else's.
  struct stat info {};
  if (lstat(path_.c_str(), &info) == 0 && info.st_ino == inode_) {
    unlink(path_.c_str());
  }
}

}  // namespace matmul
