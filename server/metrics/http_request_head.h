// The head of an HTTP/1.x request (request line and header fields), as the
// metrics endpoint reads it. A pure function of its input, so that it can
// be fuzzed on its own: no I/O, no allocation beyond the result, every
// malformed input an INVALID_ARGUMENT whose message says what was wrong.
#ifndef MATMUL_SERVER_METRICS_HTTP_REQUEST_HEAD_H_
#define MATMUL_SERVER_METRICS_HTTP_REQUEST_HEAD_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace matmul {

struct HttpHeaderField {
  std::string name;   // as sent (compare case-insensitively)
  std::string value;  // without surrounding spaces and tabs
};

struct HttpRequestHead {
  std::string method;     // e.g. "GET" (case-sensitive, as RFC 9110 says)
  std::string target;     // the request-target as sent: "/metrics?name[]=x"
  std::string path;       // target up to '?'
  std::string query;      // after '?', empty if none
  int minor_version = 1;  // HTTP/1.<minor_version>: 0 or 1
  std::vector<HttpHeaderField> headers;  // in the order sent
};

// Most header fields ParseHttpRequestHead accepts.
inline constexpr int kMaxHttpHeaderFields = 100;

// The length of the request head at the start of `data` (the bytes read
// from a connection so far), up to and including the empty line that ends
// it ("\r\n\r\n"); absl::string_view::npos while it is incomplete.
size_t HttpRequestHeadLength(absl::string_view data);

// Parses `head`: a request line ("GET /metrics HTTP/1.1"), header fields
// ("Name: value"), and the empty line, every line ended by CRLF, exactly as
// HttpRequestHeadLength delimits it. Accepts origin-form targets only (they
// start with '/'), HTTP/1.0 and HTTP/1.1, no obsolete line folding, no
// control characters. INVALID_ARGUMENT otherwise.
absl::StatusOr<HttpRequestHead> ParseHttpRequestHead(absl::string_view head);

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_HTTP_REQUEST_HEAD_H_
