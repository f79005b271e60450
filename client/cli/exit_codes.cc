#include "client/cli/exit_codes.h"

#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace matmul::cli {

int UsageError(absl::string_view message) {
  std::cerr << "matmul-cli: " << message
            << "\nRun 'matmul-cli --help' for usage.\n";
  return kExitUsage;
}

int RpcError(absl::string_view what, const absl::Status& status,
             absl::string_view target) {
  std::cerr << "matmul-cli: " << what << " failed: " << status;
  if (status.code() == absl::StatusCode::kUnavailable) {
    std::cerr << " (is matmul-server listening on " << target << "?)";
  }
  std::cerr << "\n";
  return kExitFailure;
}

}  // namespace matmul::cli
