// matmul-cli's exit codes, shared by its subcommands, and the error
// messages that go with them.
#ifndef MATMUL_CLIENT_CLI_EXIT_CODES_H_
#define MATMUL_CLIENT_CLI_EXIT_CODES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace matmul::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // an RPC failed, or a --check mismatch
constexpr int kExitUsage = 2;    // a usage error

// Prints `message` and where to find the usage; returns kExitUsage.
int UsageError(absl::string_view message);

// Prints that `what` failed (and, when nothing answered, asks whether the
// daemon listens on `target`); returns kExitFailure.
int RpcError(absl::string_view what, const absl::Status& status,
             absl::string_view target);

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_EXIT_CODES_H_
