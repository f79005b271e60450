#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` to 127.0.0.1:port and returns everything the server sent.
std::string Fetch(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
      0) {
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0)
      reply.append(buffer, n);
  }
  close(fd);
  return reply;
}

TEST(MetricsHttpServerTest, ServesMetricsAnd404) {
  int renders = 0;
  auto server = MetricsHttpServer::Create("127.0.0.1:0", [&renders] {
    ++renders;
    return std::string("matmul_up 1\n");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string reply =
      Fetch((*server)->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
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
}

}  // namespace
}  // namespace matmul
