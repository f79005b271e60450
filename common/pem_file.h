// Reads a PEM file (a certificate, key or CA bundle) for TLS set-up; the
// daemon and the clients share it.
#ifndef MATMUL_COMMON_PEM_FILE_H_
#define MATMUL_COMMON_PEM_FILE_H_

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace matmul {

// INVALID_ARGUMENT naming `what` (e.g. "--tls_cert") when the file cannot
// be read or is empty.
inline absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                               absl::string_view what) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  if (!file || contents.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot read a PEM file at '", path, "'"));
  }
  return contents.str();
}

}  // namespace matmul

#endif  // MATMUL_COMMON_PEM_FILE_H_
