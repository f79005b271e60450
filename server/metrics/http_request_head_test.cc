#include "server/metrics/http_request_head.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

TEST(HttpRequestHeadLengthTest, FindsTheFirstEmptyLine) {
  EXPECT_EQ(HttpRequestHeadLength(""), absl::string_view::npos);
  EXPECT_EQ(HttpRequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n"),
            absl::string_view::npos);
  EXPECT_EQ(HttpRequestHeadLength("GET / HTTP/1.1\r\n\r\nbody"), 18u);
  EXPECT_EQ(HttpRequestHeadLength("\r\n\r\n\r\n\r\n"), 4u);
}

TEST(ParseHttpRequestHeadTest, ParsesARequestWithHeaders) {
  absl::StatusOr<HttpRequestHead> head = ParseHttpRequestHead(
      "GET /metrics?name[]=up HTTP/1.1\r\nHost: 127.0.0.1:9466\r\n"
      "User-Agent:Prometheus/2.45\r\nAccept:  text/plain \t\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->method, "GET");
  EXPECT_EQ(head->target, "/metrics?name[]=up");
  EXPECT_EQ(head->path, "/metrics");
  EXPECT_EQ(head->query, "name[]=up");
  EXPECT_EQ(head->minor_version, 1);
  ASSERT_EQ(head->headers.size(), 3u);
  EXPECT_EQ(head->headers[0].name, "Host");
  EXPECT_EQ(head->headers[0].value, "127.0.0.1:9466");
  EXPECT_EQ(head->headers[1].value, "Prometheus/2.45");
  EXPECT_EQ(head->headers[2].value, "text/plain");
}

TEST(ParseHttpRequestHeadTest, AcceptsHttp10AndOtherMethods) {
  absl::StatusOr<HttpRequestHead> head =
      ParseHttpRequestHead("POST / HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->method, "POST");
  EXPECT_EQ(head->path, "/");
  EXPECT_EQ(head->query, "");
  EXPECT_EQ(head->minor_version, 0);
  EXPECT_TRUE(head->headers.empty());
}

struct Malformed {
  std::string head;
  std::string why;  // a part of the expected message
};

TEST(ParseHttpRequestHeadTest, RefusesMalformedHeads) {
  const Malformed cases[] = {
      {"", "does not end"},
      {"\r\n\r\n", "empty line"},
      {"\r\nGET / HTTP/1.1\r\n\r\n", "empty line"},
      {"GET / HTTP/1.1\r\n", "does not end"},
      {"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", "does not end"},
      {"GET /  HTTP/1.1\r\n\r\n", "three parts"},
      {"GET / HTTP/1.1 \r\n\r\n", "three parts"},
      {"GET /\r\n\r\n", "three parts"},
      {"G(T / HTTP/1.1\r\n\r\n", "not a token"},
      {"GET metrics HTTP/1.1\r\n\r\n", "does not start with '/'"},
      {"GET http://x/metrics HTTP/1.1\r\n\r\n", "does not start with '/'"},
      {std::string("GET /a\x7f HTTP/1.1\r\n\r\n"), "control character"},
      {"GET / HTTP/2.0\r\n\r\n", "not HTTP/1.0 or HTTP/1.1"},
      {"GET / http/1.1\r\n\r\n", "not HTTP/1.0 or HTTP/1.1"},
      {"GET / HTTP/1.1\nHost: x\r\n\r\n", "bare CR, LF or NUL"},
      {"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", "bare CR, LF or NUL"},
      {std::string("GET / HTTP/1.1\r\nHost: a") + '\0' + "b\r\n\r\n",
       "bare CR, LF or NUL"},
      {"GET / HTTP/1.1\r\nHost x\r\n\r\n", "has no ':'"},
      {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", "is not a token"},
      {"GET / HTTP/1.1\r\n: x\r\n\r\n", "is not a token"},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", "line folding"},
      {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", "control character"},
  };
  for (const Malformed& c : cases) {
    absl::StatusOr<HttpRequestHead> head = ParseHttpRequestHead(c.head);
    EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument)
        << "head: " << c.head;
    EXPECT_THAT(std::string(head.status().message()), HasSubstr(c.why))
        << "head: " << c.head;
  }
}

TEST(ParseHttpRequestHeadTest, CapsTheNumberOfHeaderFields) {
  std::string head = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < kMaxHttpHeaderFields; ++i) head += "X-A: b\r\n";
  EXPECT_TRUE(ParseHttpRequestHead(head + "\r\n").ok());
  absl::StatusOr<HttpRequestHead> over =
      ParseHttpRequestHead(head + "X-A: b\r\n\r\n");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("header fields"));
}

// Random bytes and random edits of a valid head never crash the parser,
// and whatever it accepts is consistent with its input (the fuzzer's
// property, run here on a fixed budget).
TEST(ParseHttpRequestHeadTest, RandomInputsAreParsedOrRefused) {
  std::mt19937_64 rng(18);
  const std::string valid = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string input = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % input.size();
      switch (rng() % 3) {
        case 0:
          input[at] = static_cast<char>(rng());
          break;
        case 1:
          input.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          input.erase(at, 1);
          break;
      }
      if (input.empty()) input = "x";
    }
    const size_t length = HttpRequestHeadLength(input);
    absl::StatusOr<HttpRequestHead> head =
        ParseHttpRequestHead(length == absl::string_view::npos
                                 ? input
                                 : absl::string_view(input).substr(0, length));
    if (head.ok()) {
      ++accepted;
      EXPECT_FALSE(head->method.empty());
      EXPECT_EQ(head->target.front(), '/');
      EXPECT_NE(input.find(head->target), std::string::npos);
    } else {
      EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // Edits inside header values or the target keep many heads valid.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace matmul
