// The metrics endpoint's request parser on any bytes, as the endpoint uses
// it: HttpRequestHeadLength finds the end of the head in what was read,
// and ParseHttpRequestHead parses exactly that. Neither may crash or read
// past its input; a parsed head is consistent (the target splits into path
// and query, an origin-form target, HTTP/1.0 or 1.1, at most
// kMaxHttpHeaderFields fields), and parsing is a function of the bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "server/metrics/http_request_head.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that a read past it is an ASan
  // report rather than a read of the fuzzer's buffer.
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t length = matmul::HttpRequestHeadLength(bytes);
  const absl::string_view head =
      length == absl::string_view::npos
          ? absl::string_view(bytes)
          : absl::string_view(bytes).substr(0, length);
  FUZZ_CHECK(length == absl::string_view::npos || length <= size);
  const auto parsed = matmul::ParseHttpRequestHead(head);
  const auto again = matmul::ParseHttpRequestHead(head);
  FUZZ_CHECK(parsed.ok() == again.ok());
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status() == again.status());
    FUZZ_CHECK(!parsed.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(!parsed->method.empty());
  FUZZ_CHECK(!parsed->target.empty() && parsed->target[0] == '/');
  FUZZ_CHECK(parsed->target == parsed->path ||
             parsed->target == parsed->path + "?" + parsed->query);
  FUZZ_CHECK(parsed->minor_version == 0 || parsed->minor_version == 1);
  FUZZ_CHECK(parsed->headers.size() <=
             static_cast<size_t>(matmul::kMaxHttpHeaderFields));
  FUZZ_CHECK(parsed->headers.size() == again->headers.size());
  return 0;
}
