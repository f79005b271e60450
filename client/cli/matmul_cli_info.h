// `matmul-cli info`: what the daemon is (GetServerInfo), as text or JSON.
#ifndef MATMUL_CLIENT_CLI_MATMUL_CLI_INFO_H_
#define MATMUL_CLIENT_CLI_MATMUL_CLI_INFO_H_

namespace matmul::cli {

// Reads --target, --timeout, --json and the TLS flags, asks the daemon and
// prints the answer. Returns the exit code: 0 ok, 1 RPC failure, 2 usage
// error.
int RunInfoCommand();

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_MATMUL_CLI_INFO_H_
