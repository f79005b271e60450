// `matmul-cli health`: whether the daemon serves (grpc.health.v1), the probe
// of the container and Kubernetes manifests in deploy/.
#ifndef MATMUL_CLIENT_CLI_MATMUL_CLI_HEALTH_H_
#define MATMUL_CLIENT_CLI_MATMUL_CLI_HEALTH_H_

namespace matmul::cli {

// Reads --target and --timeout and asks the daemon's health service.
// Returns the exit code: 0 SERVING, 1 not serving or no answer, 2 usage
// error.
int RunHealthCommand();

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_MATMUL_CLI_HEALTH_H_
