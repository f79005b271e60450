#include "server/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A connected client socket whose reads give up after 20 s (so that a
// server that never answers fails the test instead of hanging it).
UniqueFd Connect(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  timeval timeout{.tv_sec = 20, .tv_usec = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(
      connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  return fd;
}

// Everything the server sends until it closes (or the read times out).
std::string ReadAll(int fd) {
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) reply.append(buffer, n);
  return reply;
}

// Sends `request` to 127.0.0.1:port and returns everything the server sent.
std::string Fetch(int port, const std::string& request) {
  UniqueFd fd = Connect(port);
  send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL);
  return ReadAll(fd.get());
}

const char kScrape[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

std::unique_ptr<MetricsHttpServer> Serve(const MetricsHttpOptions& options) {
  auto server = MetricsHttpServer::Create(
      "127.0.0.1:0", [] { return std::string("matmul_up 1\n"); }, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsHttpServerTest, ServesMetricsAnd404) {
  int renders = 0;
  auto server = MetricsHttpServer::Create("127.0.0.1:0", [&renders] {
    ++renders;
    return std::string("matmul_up 1\n");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string reply = Fetch((*server)->port(), kScrape);
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(reply, HasSubstr("Content-Length: 12\r\n"));
  EXPECT_THAT(reply, HasSubstr("\r\n\r\nmatmul_up 1\n"));
  reply = Fetch((*server)->port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 404"));
  EXPECT_EQ(renders, 1);
}

TEST(MetricsHttpServerTest, BadOrBusyAddressesAreErrors) {
  auto render = [] { return std::string(); };
  EXPECT_EQ(MetricsHttpServer::Create("9466", render).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MetricsHttpServer::Create("127.0.0.1:99999", render).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto first = MetricsHttpServer::Create("127.0.0.1:0", render);
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Create(
      "127.0.0.1:" + std::to_string((*first)->port()), render);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
  EXPECT_EQ(
      MetricsHttpServer::Create("127.0.0.1:0", render, {.max_connections = 0})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

// Five clients that connect and say nothing, and one that sends its request
// a byte at a time, do not hold up a scrape: it is answered while the
// trickler is still trickling (the server's deadline for a head is far
// away, so nothing is cut off meanwhile).
TEST(MetricsHttpServerTest, IdleAndTricklingClientsDoNotBlockAScrape) {
  auto server = Serve({.request_timeout = absl::Seconds(120)});
  ASSERT_NE(server, nullptr);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(Connect(server->port()));
  std::atomic<bool> stop{false};
  std::atomic<bool> trickler_done{false};
  std::atomic<int> trickled{0};
  std::thread trickler([&] {
    UniqueFd fd = Connect(server->port());
    const std::string request = std::string("GET /metrics HTTP/1.1\r\n") +
                                "X-Slow: " + std::string(200, 'a') + "\r\n\r\n";
    for (char c : request) {
      if (stop) break;
      if (send(fd.get(), &c, 1, MSG_NOSIGNAL) != 1) break;
      ++trickled;
      absl::SleepFor(absl::Milliseconds(100));
    }
    trickler_done = true;
  });
  // The trickler is connected and under way before the scrape.
  while (trickled < 2) absl::SleepFor(absl::Milliseconds(10));
  const std::string reply = Fetch(server->port(), kScrape);
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(reply, HasSubstr("matmul_up 1\n"));
  // It was answered before the trickler finished (some 20 s of bytes).
  EXPECT_FALSE(trickler_done);
  // And again, on connections 8 and 9 of the same moment.
  EXPECT_THAT(Fetch(server->port(), kScrape), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_FALSE(trickler_done);
  stop = true;
  trickler.join();
}

// A head that has not arrived whole by the deadline closes the connection,
// however steadily its bytes come.
TEST(MetricsHttpServerTest, ASlowHeadIsCutOffAtTheDeadline) {
  auto server = Serve({.request_timeout = absl::Milliseconds(300)});
  ASSERT_NE(server, nullptr);
  UniqueFd fd = Connect(server->port());
  bool cut_off = false;
  // A byte every 50 ms (each one well within the deadline); the server
  // must close the connection long before 2000 bytes have gone.
  for (int i = 0; i < 2000 && !cut_off; ++i) {
    cut_off = send(fd.get(), "a", 1, MSG_NOSIGNAL) != 1;
    absl::SleepFor(absl::Milliseconds(50));
    char byte;
    const ssize_t n = recv(fd.get(), &byte, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      cut_off = true;
    }
  }
  EXPECT_TRUE(cut_off);
  // The server still answers others.
  EXPECT_THAT(Fetch(server->port(), kScrape), StartsWith("HTTP/1.1 200 OK"));
}

TEST(MetricsHttpServerTest, OversizedAndMalformedRequestsGet4xx) {
  auto server = Serve({.max_request_bytes = 1024});
  ASSERT_NE(server, nullptr);
  // A head over the cap, whether or not it ever ends.
  const std::string huge_header = "X-Big: " + std::string(2000, 'b') + "\r\n";
  EXPECT_THAT(
      Fetch(server->port(), "GET /metrics HTTP/1.1\r\n" + huge_header + "\r\n"),
      StartsWith("HTTP/1.1 431 "));
  EXPECT_THAT(Fetch(server->port(), "GET /metrics HTTP/1.1\r\n" + huge_header),
              StartsWith("HTTP/1.1 431 "));
  const std::string bad_requests[] = {
      "GET /metrics\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      "GET metrics HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n",
      std::string("GET /metrics HTTP/1.1\r\nA: \x01\r\n\r\n"),
      "\r\n\r\n",
  };
  for (const std::string& request : bad_requests) {
    const std::string reply = Fetch(server->port(), request);
    EXPECT_THAT(reply, StartsWith("HTTP/1.1 400 Bad Request\r\n")) << request;
    EXPECT_THAT(reply, HasSubstr("Connection: close\r\n")) << request;
  }
  const std::string not_allowed =
      Fetch(server->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(not_allowed, StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(not_allowed, HasSubstr("Allow: GET\r\n"));
  EXPECT_THAT(Fetch(server->port(), "GET /other HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(Fetch(server->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK"));
}

// Past the cap on open connections a new one is refused at once (503 and
// closed); once the others go, scrapes are served again.
TEST(MetricsHttpServerTest, ConnectionsOverTheCapAreClosedAtOnce) {
  auto server =
      Serve({.max_connections = 3, .request_timeout = absl::Seconds(120)});
  ASSERT_NE(server, nullptr);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(Connect(server->port()));
  // The three are accepted before the fourth arrives: one round trip on
  // each makes sure (a 1-byte head start gets no answer).
  for (UniqueFd& fd : idle) send(fd.get(), "G", 1, MSG_NOSIGNAL);
  std::string refused;
  for (int attempt = 0; attempt < 100; ++attempt) {
    refused = Fetch(server->port(), kScrape);
    if (absl::StartsWith(refused, "HTTP/1.1 503")) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503 "));
  idle.clear();
  std::string reply;
  for (int attempt = 0; attempt < 100; ++attempt) {
    reply = Fetch(server->port(), kScrape);
    if (absl::StartsWith(reply, "HTTP/1.1 200")) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200 OK"));
}

}  // namespace
}  // namespace matmul
