// The daemon as a library: backend, batching executor, metrics, the gRPC
// server with
// MatmulService, health (grpc.health.v1) and reflection. main.cc parses
// flags and signals around it; the tests start it in-process.
#ifndef MATMUL_SERVER_MATMUL_SERVER_H_
#define MATMUL_SERVER_MATMUL_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_transport_args.h"
#include "kernels/gemm_backend.h"
#include "server/api/matmul_service.h"
#include "server/execution/device_lane.h"
#include "server/metrics/metrics.h"
#include "server/product/in_flight_requests.h"
#include "server/product/request_validation.h"
#include "server/transport/unix_socket_listener.h"

namespace matmul {

// TLS for TCP listeners (PEM files). Mutual TLS when client_ca_file is set:
// clients must then present a certificate that CA signed.
struct TlsOptions {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

struct ServerOptions {
  // gRPC addresses: "unix:/path" or "host:port" (port 0 picks one).
  std::vector<std::string> listen = {"unix:/run/matmul/matmul.sock"};
  // Who may connect to the unix sockets (mode, group).
  UnixSocketOptions unix_socket;
  TlsOptions tls;
  // Plaintext TCP is refused beyond loopback unless this is set.
  bool allow_insecure_tcp = false;
  // host:port of the Prometheus endpoint; empty serves none.
  std::string metrics_listen = "127.0.0.1:9466";
  int max_metric_shapes = 64;
  ExecutorOptions executor;
  RegionRegistryOptions regions;
  // The gRPC service and what it admits: request limits (also the gRPC
  // message size), per-client quota, shm access (regions use it too),
  // rings, the unary API. Its max_concurrent_requests is the server's to
  // work out.
  MatmulServiceOptions service;
  // HTTP/2 and buffer settings of every connection (--grpc_args).
  GrpcTransportArgs grpc_args;
  // Runs (on a worker thread) once a lane's device is lost (see
  // kernels/device_lost.h), after health has turned NOT_SERVING; from then
  // on that lane answers every request UNAVAILABLE. The daemon stops and
  // exits non-zero from here; may be empty.
  std::function<void(const absl::Status&)> on_device_lost;
};

class MatmulServer {
 public:
  // One lane per backend (a backend per GPU, or the CPU backend): each gets
  // its own executor (options.executor) and region opener. Requests whose
  // operands sit in a GPU's regions run on that GPU; the others go to the
  // least loaded lane.
  static absl::StatusOr<std::unique_ptr<MatmulServer>> Create(
      const ServerOptions& options,
      std::vector<std::unique_ptr<GemmBackend>> backends);
  static absl::StatusOr<std::unique_ptr<MatmulServer>> Create(
      const ServerOptions& options, std::unique_ptr<GemmBackend> backend);
  ~MatmulServer();  // Shutdown(absl::ZeroDuration())

  MatmulServer(const MatmulServer&) = delete;
  MatmulServer& operator=(const MatmulServer&) = delete;

  // Health goes NOT_SERVING, new calls are refused, calls in progress get up
  // to `grace` to finish, and the listeners close. Past the grace, every
  // request still in flight is answered UNAVAILABLE (listed on stderr) and
  // its product, if it has not run, is dropped. Idempotent.
  void Shutdown(absl::Duration grace);

  // The TCP ports actually bound, in `listen` order (0 for unix sockets).
  const std::vector<int>& bound_ports() const { return bound_ports_; }
  ServerMetrics& metrics() { return *metrics_; }
  // The first lane's backend (every lane's has the same name).
  const GemmBackend& backend() const { return *lanes_.front().backend; }
  const std::vector<DeviceLane>& lanes() const { return lanes_; }
  const RegionRegistry& regions() const { return *registry_; }
  const InFlightRequests& in_flight() const { return in_flight_; }
  // Requests accepted and waiting for a worker, over all lanes.
  int queue_depth() const;
  // Requests whose product is running now, over all lanes.
  int running() const;

 private:
  MatmulServer() = default;
  // The lanes' device-lost callback: health NOT_SERVING, then
  // on_device_lost_.
  void DeviceLost(const absl::Status& status);

  std::unique_ptr<ServerMetrics> metrics_;
  // Outlives the lanes: products queued there end their entries.
  InFlightRequests in_flight_;
  // Declared before the registry: regions the lanes' openers opened must
  // go first.
  std::vector<DeviceLane> lanes_;
  std::unique_ptr<RegionRegistry> registry_;
  std::unique_ptr<MatmulServiceImpl> service_;
  std::vector<std::unique_ptr<UnixSocketListener>> unix_listeners_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> bound_ports_;
  bool shut_down_ = false;
  std::function<void(const absl::Status&)> on_device_lost_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_MATMUL_SERVER_H_
