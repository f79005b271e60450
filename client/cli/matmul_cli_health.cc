#include "client/cli/matmul_cli_health.h"

#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/exit_codes.h"
#include "client/cli/matmul_cli_flags.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace matmul::cli {
namespace {

// grpc.health.v1 Check for the whole server (service ""). A plain channel
// without wait-for-ready: a probe must fail fast when nothing listens.
int RunHealth(absl::string_view target, absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      std::string(target), grpc::InsecureChannelCredentials());
  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return RpcError(
        "health check",
        absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                     status.error_message()),
        target);
  }
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    std::cerr << "matmul-cli: the daemon at " << target << " is " << name
              << ", not SERVING (draining after SIGTERM, or stopped serving "
                 "after a fault; its supervisor should restart it)\n";
    return kExitFailure;
  }
  std::cout << name << "\n";
  return kExitOk;
}

}  // namespace

int RunHealthCommand() {
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout must be positive");
  }
  return RunHealth(absl::GetFlag(FLAGS_target), timeout);
}

}  // namespace matmul::cli
