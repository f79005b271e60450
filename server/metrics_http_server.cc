#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

// Closes a file descriptor on scope exit unless released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Create(
    const std::string& address, std::function<std::string()> render) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address,
                     "' is not host:port (e.g. 127.0.0.1:9466)"));
  }
  std::string host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                       &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found,
                                                               freeaddrinfo);
  ScopedFd fd(socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      listen(fd.get(), 16) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", strerror(errno),
                     " (pick another address with --metrics_listen)"));
  }
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_size);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd.release(), bound_port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port,
                                     std::function<std::string()> render)
    : listen_fd_(listen_fd), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { ServeLoop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  thread_.join();
  close(listen_fd_);
}

void MetricsHttpServer::ServeLoop() {
  while (!stopping_) {
    // Wake up regularly to notice stopping_.
    pollfd listener{listen_fd_, POLLIN, 0};
    if (poll(&listener, 1, 100) <= 0) continue;
    ScopedFd connection(accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (connection.get() >= 0) ServeConnection(connection.get());
  }
}

void MetricsHttpServer::ServeConnection(int fd) {
  // Read the request head (bounded in size and time), then answer once.
  std::string head;
  char buffer[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
    pollfd client{fd, POLLIN, 0};
    if (poll(&client, 1, 2000) <= 0) return;
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  const bool is_metrics = absl::StartsWith(head, "GET /metrics ") ||
                          absl::StartsWith(head, "GET /metrics?");
  const std::string body =
      is_metrics ? render_() : "not found; metrics are at /metrics\n";
  WriteAll(
      fd, absl::StrCat(
              is_metrics ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n",
              "Content-Type: ",
              is_metrics ? "text/plain; version=0.0.4; charset=utf-8"
                         : "text/plain",
              "\r\nContent-Length: ", body.size(),
              "\r\nConnection: close\r\n\r\n", body));
}

}  // namespace matmul
