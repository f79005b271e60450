// matmul-cli's exit codes, shared by its subcommands.
#ifndef MATMUL_CLIENT_CLI_EXIT_CODES_H_
#define MATMUL_CLIENT_CLI_EXIT_CODES_H_

namespace matmul::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // an RPC failed, or a --check mismatch
constexpr int kExitUsage = 2;    // a usage error

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_EXIT_CODES_H_
