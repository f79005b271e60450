#include "server/matmul_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/regions/shm_region.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<MatmulServer>> MatmulServer::Create(
    const ServerOptions& options, std::unique_ptr<GemmBackend> backend) {
  std::vector<std::unique_ptr<GemmBackend>> backends;
  backends.push_back(std::move(backend));
  return Create(options, std::move(backends));
}

absl::StatusOr<std::unique_ptr<MatmulServer>> MatmulServer::Create(
    const ServerOptions& options,
    std::vector<std::unique_ptr<GemmBackend>> backends) {
  if (backends.empty() || backends.front() == nullptr) {
    return absl::InvalidArgumentError("no compute backend");
  }
  if (options.listen.empty()) {
    return absl::InvalidArgumentError("no listen address; give --listen");
  }
  if (options.limits.max_message_bytes < 1024 ||
      options.limits.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes is ", options.limits.max_message_bytes,
                     "; expected 1024 to ", INT32_MAX));
  }
  if (absl::Status prefix = CheckShmName(options.shm_prefix, "");
      !prefix.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shm_prefix: ", prefix.message()));
  }
  std::unique_ptr<MatmulServer> server(new MatmulServer());
  server->on_device_lost_ = options.on_device_lost;
  MatmulServer* raw = server.get();
  ASSIGN_OR_RETURN(
      server->metrics_,
      ServerMetrics::Create(options.metrics_listen, options.max_metric_shapes,
                            backends.front()->name()));
  for (std::unique_ptr<GemmBackend>& backend : backends) {
    DeviceLane lane;
    lane.backend = std::move(backend);
    RegionOpenOptions region_options;
    region_options.shm_prefix = options.shm_prefix;
    region_options.cuda_device = lane.backend->cuda_device();
    lane.region_opener = std::make_unique<RegionOpener>(region_options);
    // One device per backend (backend_factory), listed by GetServerInfo in
    // lane order.
    lane.runner = std::make_unique<MatmulRunner>(
        *lane.backend, *server->metrics_,
        static_cast<int>(server->lanes_.size()),
        [raw](const absl::Status& status) { raw->DeviceLost(status); });
    MatmulRunner* runner = lane.runner.get();
    ASSIGN_OR_RETURN(
        lane.executor,
        ProductExecutor::Create(
            options.executor,
            [runner](std::vector<std::unique_ptr<PendingProduct>> batch) {
              runner->RunBatch(std::move(batch));
            }));
    server->lanes_.push_back(std::move(lane));
  }
  server->metrics_->SetQueueDepthSource([raw] { return raw->queue_depth(); });
  const int max_concurrent = static_cast<int>(server->lanes_.size()) *
                             (options.executor.worker_threads *
                                  options.executor.batching.max_batch_size +
                              options.executor.batching.max_queue_size);
  server->registry_ = std::make_unique<RegionRegistry>(options.regions);
  server->service_ = std::make_unique<MatmulServiceImpl>(
      server->lanes_, *server->metrics_, *server->registry_, options.limits,
      max_concurrent, options.shm_prefix, options.rings);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  server->bound_ports_.assign(options.listen.size(), 0);
  for (size_t i = 0; i < options.listen.size(); ++i) {
    // Unix sockets and loopback use no TLS; TLS for TCP arrives with the
    // deployment work.
    int* port = absl::StartsWith(options.listen[i], "unix:")
                    ? nullptr
                    : &server->bound_ports_[i];
    builder.AddListeningPort(options.listen[i],
                             grpc::InsecureServerCredentials(), port);
  }
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(options.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(
      static_cast<int>(options.limits.max_message_bytes));
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", absl::StrJoin(options.listen, ", "),
        " (address in use, bad address, or no permission for the socket "
        "path?)"));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

int MatmulServer::queue_depth() const {
  int depth = 0;
  for (const DeviceLane& lane : lanes_) depth += lane.executor->queue_depth();
  return depth;
}

int MatmulServer::running() const {
  int running = 0;
  for (const DeviceLane& lane : lanes_) running += lane.executor->running();
  return running;
}

void MatmulServer::DeviceLost(const absl::Status& status) {
  // Requests keep coming until the process stops: the lane answers them
  // UNAVAILABLE, and health tells load balancers and supervisors why.
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  if (on_device_lost_) on_device_lost_(status);
}

MatmulServer::~MatmulServer() {
  Shutdown(absl::ZeroDuration());
  // The metrics endpoint outlives the executor it reads the depth from.
  if (metrics_ != nullptr) metrics_->SetQueueDepthSource(nullptr);
}

void MatmulServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    service_->CloseAllSessions();
    // Waits for calls in progress (whose products the executor is still
    // running) until the deadline, then cancels what remains.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  }
  for (DeviceLane& lane : lanes_) lane.executor->Shutdown();
  if (server_ != nullptr) server_->Wait();
}

}  // namespace matmul
