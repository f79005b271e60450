// `matmul-cli bench`: the load generator subcommand (client/bench does the
// work; this file owns its flags, the operands' set-up and the output).
#ifndef MATMUL_CLIENT_CLI_MATMUL_CLI_BENCH_H_
#define MATMUL_CLIENT_CLI_MATMUL_CLI_BENCH_H_

namespace matmul::cli {

// Reads the flags, runs the sweep, prints and writes the reports. Returns
// the exit code: 0 ok, 1 failure, 2 usage error.
int RunBenchCommand();

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_MATMUL_CLI_BENCH_H_
