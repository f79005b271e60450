// The bare echo servers grpc-floor measures the daemon against: one on the
// synchronous API and one on the callback API, each on its own unix socket,
// in the benchmark's own process. A reply of N bytes is built once and
// reused, so a call costs gRPC and protobuf their work and nothing else.
#ifndef MATMUL_CLIENT_BENCH_GRPC_FLOOR_ECHO_SERVER_H_
#define MATMUL_CLIENT_BENCH_GRPC_FLOOR_ECHO_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc_transport_args.h"

namespace matmul::bench {

enum class EchoApi { kSync, kCallback };

const char* EchoApiName(EchoApi api);

class EchoServer {
 public:
  // Listens on `socket_path` (removed first if it exists, and again when
  // the server goes).
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(
      EchoApi api, const std::string& socket_path,
      const GrpcTransportArgs& transport);
  ~EchoServer();

  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

  // "unix:<socket_path>".
  const std::string& target() const { return target_; }

 private:
  EchoServer() = default;

  std::string socket_path_;
  std::string target_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_GRPC_FLOOR_ECHO_SERVER_H_
