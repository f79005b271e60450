#include "server/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/metrics/http_request_head.h"

namespace matmul {
namespace {

// After the answer, how long a connection is kept to read (and drop) what
// the client still sends: closing with unread input would reset the
// connection, and the client could lose the answer.
constexpr absl::Duration kLinger = absl::Milliseconds(500);

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body,
                     absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n",
                      extra_headers, "Connection: close\r\n\r\n", body);
}

std::string PlainResponse(absl::string_view status, absl::string_view body,
                          absl::string_view extra_headers = "") {
  return Response(status, "text/plain; charset=utf-8", absl::StrCat(body, "\n"),
                  extra_headers);
}

int PollTimeoutMs(absl::Time now, absl::Time next) {
  if (next == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(
      std::max(next - now, absl::ZeroDuration()), absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, 60000));
}

}  // namespace

struct MetricsHttpServer::Connection {
  enum class State { kReading, kWriting, kLingering };
  UniqueFd fd;
  State state = State::kReading;
  absl::Time deadline;  // of the current state
  std::string in;
  std::string out;
  size_t sent = 0;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Create(
    const std::string& address, std::function<std::string()> render,
    const MetricsHttpOptions& options,
    std::function<std::string()> render_requests) {
  if (options.max_connections < 1 || options.max_request_bytes < 64 ||
      options.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "metrics endpoint options: max_connections must be >= 1, "
        "max_request_bytes >= 64 and request_timeout > 0");
  }
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
  UniqueFd fd(
      socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      listen(fd.get(), 64) != 0) {
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
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(
      std::move(fd), std::move(wake), bound_port, std::move(render),
      std::move(render_requests), options));
}

MetricsHttpServer::MetricsHttpServer(
    UniqueFd listener, UniqueFd wake, int port,
    std::function<std::string()> render,
    std::function<std::string()> render_requests,
    const MetricsHttpOptions& options)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      port_(port),
      render_(std::move(render)),
      render_requests_(std::move(render_requests)),
      options_(options) {
  thread_ = std::thread([this] { ServeLoop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  const uint64_t one = 1;
  // A full counter still wakes the loop, so the result does not matter.
  (void)!write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

void MetricsHttpServer::ServeLoop() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const std::unique_ptr<Connection>& c : connections) {
      const short events =
          c->state == Connection::State::kWriting ? POLLOUT : POLLIN;
      fds.push_back({c->fd.get(), events, 0});
      next = std::min(next, c->deadline);
    }
    if (poll(fds.data(), fds.size(), PollTimeoutMs(absl::Now(), next)) < 0 &&
        errno != EINTR) {
      return;  // cannot happen with valid descriptors
    }
    if (stopping_) return;
    const absl::Time now = absl::Now();
    // Connections first (fds[2 + i] is connections[i]), then new ones.
    std::vector<std::unique_ptr<Connection>> kept;
    kept.reserve(connections.size());
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = *connections[i];
      const short revents = fds[2 + i].revents;
      bool keep = true;
      if (revents & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (c.state == Connection::State::kWriting) {
        if (revents & (POLLOUT | POLLHUP)) keep = OnWritable(c);
      } else if (revents & (POLLIN | POLLHUP)) {
        keep = OnReadable(c);
      }
      // A connection past its deadline is dropped: a head that never
      // completes, an answer never taken, or the end of the linger.
      if (keep && now >= c.deadline) keep = false;
      if (keep) kept.push_back(std::move(connections[i]));
    }
    connections = std::move(kept);
    if (fds[1].revents & POLLIN) AcceptAll(connections);
  }
}

void MetricsHttpServer::AcceptAll(
    std::vector<std::unique_ptr<Connection>>& connections) {
  while (true) {
    UniqueFd fd(accept4(listener_.get(), nullptr, nullptr,
                        SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;  // EAGAIN: none left (or a transient error)
    if (static_cast<int>(connections.size()) >= options_.max_connections) {
      // Refused at once; the answer goes only if the socket takes it now.
      const std::string busy =
          PlainResponse("503 Service Unavailable",
                        "too many connections to the metrics endpoint");
      (void)!send(fd.get(), busy.data(), busy.size(),
                  MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = std::move(fd);
    connection->deadline = absl::Now() + options_.request_timeout;
    connections.push_back(std::move(connection));
  }
}

bool MetricsHttpServer::OnReadable(Connection& c) {
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(c.fd.get(), buffer, sizeof(buffer), 0);
    if (n == 0) return false;  // the client hung up
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    if (c.state == Connection::State::kLingering) continue;  // dropped
    c.in.append(buffer, static_cast<size_t>(n));
    const size_t head_length = HttpRequestHeadLength(c.in);
    if (head_length != absl::string_view::npos &&
        head_length <= options_.max_request_bytes) {
      c.out = Answer(c.in.substr(0, head_length));
    } else if (c.in.size() > options_.max_request_bytes) {
      c.out = PlainResponse("431 Request Header Fields Too Large",
                            absl::StrCat("the request head is over ",
                                         options_.max_request_bytes, " bytes"));
    } else {
      continue;  // the head is not complete yet
    }
    c.in.clear();
    c.state = Connection::State::kWriting;
    c.deadline = absl::Now() + options_.request_timeout;
    return OnWritable(c);
  }
}

bool MetricsHttpServer::OnWritable(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = send(c.fd.get(), c.out.data() + c.sent,
                           c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    c.sent += static_cast<size_t>(n);
  }
  // All sent: end our side and wait briefly for the client's end.
  shutdown(c.fd.get(), SHUT_WR);
  c.out.clear();
  c.state = Connection::State::kLingering;
  c.deadline = std::min(c.deadline, absl::Now() + kLinger);
  return true;
}

std::string MetricsHttpServer::Answer(const std::string& head) {
  absl::StatusOr<HttpRequestHead> request = ParseHttpRequestHead(head);
  if (!request.ok()) {
    return PlainResponse(
        "400 Bad Request",
        absl::StrCat("bad request: ", request.status().message()));
  }
  const bool requests_page =
      render_requests_ != nullptr && request->path == "/debug/requests";
  if (request->path != "/metrics" && !requests_page) {
    return PlainResponse("404 Not Found", "not found; metrics are at /metrics");
  }
  if (request->method != "GET") {
    return PlainResponse(
        "405 Method Not Allowed",
        absl::StrCat("method ", request->method, " not allowed; use GET"),
        "Allow: GET\r\n");
  }
  if (requests_page) {
    return Response("200 OK", "text/plain; charset=utf-8", render_requests_());
  }
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                  render_());
}

}  // namespace matmul
