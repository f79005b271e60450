#include "server/metrics/http_request_head.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace matmul {
namespace {

constexpr absl::string_view kCrlf = "\r\n";

// RFC 9110 token characters.
bool IsTokenChar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return absl::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) !=
         absl::string_view::npos;
}

bool IsToken(absl::string_view text) {
  if (text.empty()) return false;
  for (unsigned char c : text) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// Printable ASCII except space: what a request-target may hold.
bool IsTargetChar(unsigned char c) { return c > 0x20 && c < 0x7f; }

// Visible ASCII, space, tab and obs-text: what a field value may hold.
bool IsFieldValueChar(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

absl::string_view TrimSpaceAndTab(absl::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

// A printable rendering of a short prefix of `text` for error messages.
std::string Excerpt(absl::string_view text) {
  std::string out;
  for (unsigned char c : text.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (text.size() > 40) out += "...";
  return out;
}

absl::Status ParseRequestLine(absl::string_view line, HttpRequestHead& head) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request line '", Excerpt(line),
        "' is not 'METHOD /target HTTP/1.x' (three parts, one space apart)"));
  }
  if (!IsToken(parts[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("method '", Excerpt(parts[0]), "' is not a token"));
  }
  const absl::string_view target = parts[1];
  if (target.empty() || target.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("request target '", Excerpt(target),
                     "' does not start with '/' (origin form expected)"));
  }
  for (unsigned char c : target) {
    if (!IsTargetChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("request target '", Excerpt(target),
                       "' holds a space or control character"));
    }
  }
  if (parts[2] == "HTTP/1.1") {
    head.minor_version = 1;
  } else if (parts[2] == "HTTP/1.0") {
    head.minor_version = 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "version '", Excerpt(parts[2]), "' is not HTTP/1.0 or HTTP/1.1"));
  }
  head.method = std::string(parts[0]);
  head.target = std::string(target);
  const size_t question = target.find('?');
  head.path = std::string(target.substr(0, question));
  if (question != absl::string_view::npos) {
    head.query = std::string(target.substr(question + 1));
  }
  return absl::OkStatus();
}

absl::Status ParseHeaderField(absl::string_view line, HttpRequestHead& head) {
  if (line.front() == ' ' || line.front() == '\t') {
    return absl::InvalidArgumentError(
        "a header line starts with a space or tab (obsolete line folding is "
        "not accepted)");
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header line '", Excerpt(line), "' has no ':' (Name: value expected)"));
  }
  const absl::string_view name = line.substr(0, colon);
  if (!IsToken(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header name '", Excerpt(name),
        "' is not a token (no spaces before the ':', no control characters)"));
  }
  const absl::string_view value = TrimSpaceAndTab(line.substr(colon + 1));
  for (unsigned char c : value) {
    if (!IsFieldValueChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header '", Excerpt(name), "' has a control character in its value"));
    }
  }
  if (static_cast<int>(head.headers.size()) >= kMaxHttpHeaderFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxHttpHeaderFields, " header fields"));
  }
  head.headers.push_back({std::string(name), std::string(value)});
  return absl::OkStatus();
}

}  // namespace

size_t HttpRequestHeadLength(absl::string_view data) {
  const size_t end = data.find("\r\n\r\n");
  return end == absl::string_view::npos ? absl::string_view::npos : end + 4;
}

absl::StatusOr<HttpRequestHead> ParseHttpRequestHead(absl::string_view head) {
  if (HttpRequestHeadLength(head) != head.size()) {
    return absl::InvalidArgumentError(
        "the request head does not end at its first empty line (CRLF CRLF)");
  }
  // What precedes the terminating CRLF CRLF: the request line and the
  // header lines, one CRLF apart (none of them empty, since the first CRLF
  // CRLF ends the head).
  const absl::string_view lines = head.substr(0, head.size() - 4);
  HttpRequestHead parsed;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(lines, kCrlf)) {
    if (line.empty()) {
      return absl::InvalidArgumentError(
          "the request head starts with an empty line");
    }
    for (unsigned char c : line) {
      if (c == '\r' || c == '\n' || c == '\0') {
        return absl::InvalidArgumentError(
            "a line holds a bare CR, LF or NUL (lines must end in CRLF)");
      }
    }
    if (first) {
      if (absl::Status status = ParseRequestLine(line, parsed); !status.ok()) {
        return status;
      }
      first = false;
    } else if (absl::Status status = ParseHeaderField(line, parsed);
               !status.ok()) {
      return status;
    }
  }
  return parsed;
}

}  // namespace matmul
