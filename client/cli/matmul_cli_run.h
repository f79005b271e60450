// `matmul-cli run`: one random product through the daemon, timed, with its
// operands inline or in a registered region, optionally checked against the
// FP64 reference.
#ifndef MATMUL_CLIENT_CLI_MATMUL_CLI_RUN_H_
#define MATMUL_CLIENT_CLI_MATMUL_CLI_RUN_H_

namespace matmul::cli {

// Reads and validates the flags, runs the product --iterations times and
// prints the report. Returns the exit code: 0 ok, 1 RPC failure or --check
// mismatch, 2 usage error.
int RunProductCommand();

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_MATMUL_CLI_RUN_H_
