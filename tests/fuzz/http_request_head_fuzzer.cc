// The metrics endpoint's request parser on any bytes: it returns a parsed
// head or an error (the endpoint answers 400), never crashes, and gives the
// same answer for the same bytes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/http_request_head.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so a read past the head is an ASan
  // report rather than a read of the fuzzer's buffer.
  const std::string head(reinterpret_cast<const char*>(data), size);
  const auto first = matmul::ParseHttpRequestHead(absl::string_view(head));
  const auto second = matmul::ParseHttpRequestHead(absl::string_view(head));
  FUZZ_CHECK(first.ok() == second.ok());
  if (!first.ok()) FUZZ_CHECK(first.status() == second.status());
  return 0;
}
