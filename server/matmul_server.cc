#include "server/matmul_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_posix.h>

#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/pem_file.h"
#include "common/status_macros.h"
#include "server/regions/shm_region.h"

namespace matmul {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsCredentials(
    const TlsOptions& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(tls.cert_file, "--tls_cert"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(tls.key_file, "--tls_key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadPemFile(tls.client_ca_file, "--tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// "127.0.0.1:50051", "localhost:0", "[::1]:50051": only this host can
// reach it.
bool IsLoopback(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = address.substr(0, colon);
  return absl::StartsWith(host, "127.") || host == "localhost" ||
         host == "[::1]";
}

// The credentials a TCP listener gets: TLS when configured; plaintext only
// on loopback (or when the operator insists).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const std::string& address, const ServerOptions& options) {
  if (options.tls.enabled()) return TlsCredentials(options.tls);
  if (!IsLoopback(address) && !options.allow_insecure_tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", address,
        " is reachable beyond this host, and without TLS every tensor and "
        "result would cross the network in the clear: give --tls_cert and "
        "--tls_key (and --tls_client_ca to require client certificates), "
        "listen on loopback, or pass --allow_insecure_tcp"));
  }
  return grpc::InsecureServerCredentials();
}

}  // namespace

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
  if (options.service.admission.limits.max_message_bytes < 1024 ||
      options.service.admission.limits.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes is ",
                     options.service.admission.limits.max_message_bytes,
                     "; expected 1024 to ", INT32_MAX));
  }
  if (absl::Status prefix = CheckShmName(options.service.shm.prefix, "");
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
                            CurrentBuildInfo()));
  for (std::unique_ptr<GemmBackend>& backend : backends) {
    DeviceLane lane;
    lane.backend = std::move(backend);
    const GemmBackend* gauged = lane.backend.get();
    server->metrics_->AddDevice(ServerMetrics::DeviceLabel(*gauged),
                                gauged->devices().front(),
                                [gauged] { return gauged->Gauges(); });
    RegionOpenOptions region_options;
    region_options.shm = options.service.shm;
    region_options.cuda_device = lane.backend->cuda_device();
    lane.region_opener = std::make_unique<RegionOpener>(region_options);
    // One device per backend (backend_factory), listed by GetServerInfo in
    // lane order.
    lane.runner = std::make_unique<MatmulRunner>(
        *lane.backend, *server->metrics_,
        static_cast<int>(server->lanes_.size()),
        [raw](const absl::Status& status) { raw->DeviceLost(status); });
    MatmulRunner* runner = lane.runner.get();
    ExecutorOptions executor_options = options.executor;
    // The CPU backend runs each launch on its worker: the workers already
    // bound what runs at once.
    if (lane.backend->cuda_device() < 0) {
      executor_options.batching.launches_in_flight_per_key = 0;
    }
    ASSIGN_OR_RETURN(
        lane.executor,
        ProductExecutor::Create(
            executor_options,
            [runner](std::vector<std::unique_ptr<PendingProduct>> batch,
                     LaunchHold hold) {
              runner->RunBatch(std::move(batch), std::move(hold));
            }));
    server->lanes_.push_back(std::move(lane));
  }
  server->metrics_->SetQueueDepthSource([raw] { return raw->queue_depth(); });
  server->metrics_->SetRequestsInFlightSource(
      [raw] { return raw->in_flight_.Render(); });
  server->metrics_->SetQueueCapacity(static_cast<int>(server->lanes_.size()) *
                                     options.executor.batching.max_queue_size);
  const int max_concurrent = static_cast<int>(server->lanes_.size()) *
                             (options.executor.worker_threads *
                                  options.executor.batching.max_batch_size +
                              options.executor.batching.max_queue_size);
  server->registry_ = std::make_unique<RegionRegistry>(options.regions);
  const RegionRegistry* regions = server->registry_.get();
  server->metrics_->SetRegionSource([regions] {
    RegionGauges gauges;
    gauges.sessions = regions->session_count();
    for (const auto& [kind, totals] : regions->TotalsByKind()) {
      gauges.kinds.push_back({kind, totals.regions, totals.bytes});
    }
    return gauges;
  });
  MatmulServiceOptions service = options.service;
  service.max_concurrent_requests = max_concurrent;
  server->service_ = std::make_unique<MatmulServiceImpl>(
      server->lanes_, *server->metrics_, *server->registry_, server->in_flight_,
      service);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  server->bound_ports_.assign(options.listen.size(), 0);
  for (size_t i = 0; i < options.listen.size(); ++i) {
    absl::string_view address = options.listen[i];
    if (absl::ConsumePrefix(&address, "unix:")) {
      // Bound now, so that a bad path fails start-up; connections are
      // taken once the gRPC server runs.
      ASSIGN_OR_RETURN(std::unique_ptr<UnixSocketListener> listener,
                       UnixSocketListener::Create(std::string(address),
                                                  options.unix_socket));
      server->unix_listeners_.push_back(std::move(listener));
      continue;
    }
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                     TcpCredentials(options.listen[i], options));
    builder.AddListeningPort(options.listen[i], credentials,
                             &server->bound_ports_[i]);
  }
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(options.service.admission.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(
      static_cast<int>(options.service.admission.limits.max_message_bytes));
  // Connections from the unix listeners take the server's arguments too
  // (AddInsecureChannelFromFd).
  ApplyGrpcTransportArgs(options.grpc_args, builder);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", absl::StrJoin(options.listen, ", "),
        " (address in use, bad address, or no permission for the socket "
        "path?)"));
  }
  for (std::unique_ptr<UnixSocketListener>& listener :
       server->unix_listeners_) {
    grpc::Server* grpc_server = server->server_.get();
    listener->Start([grpc_server](int fd) {
      grpc::AddInsecureChannelFromFd(grpc_server, fd);
    });
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  server->metrics_->SetServing(true);
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
  metrics_->SetServing(false);
  if (on_device_lost_) on_device_lost_(status);
}

MatmulServer::~MatmulServer() {
  Shutdown(absl::ZeroDuration());
  // The metrics endpoint outlives the executors, backends and registry it
  // reads from.
  if (metrics_ != nullptr) metrics_->ClearSources();
}

void MatmulServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // The drain ends with the grace: what is still in flight then is
  // answered UNAVAILABLE, which ends its call and lets gRPC's shutdown
  // return; a product still queued or running finds its answer given and
  // is dropped.
  absl::Notification drained;
  std::thread give_up([this, grace, &drained] {
    if (drained.WaitForNotificationWithTimeout(grace)) return;
    const std::string given_up = in_flight_.GiveUpAll(absl::UnavailableError(
        absl::StrCat("the daemon is stopping and its shutdown grace (",
                     absl::FormatDuration(grace),
                     ") ran out before this request was answered; retry "
                     "on the daemon that replaces it")));
    if (!given_up.empty()) {
      std::fprintf(stderr,
                   "matmul-server: the shutdown grace of %s ran out; "
                   "answered these UNAVAILABLE:\n%s",
                   absl::FormatDuration(grace).c_str(), given_up.c_str());
    }
  });
  // New clients fail fast at connect; connections already open drain.
  for (std::unique_ptr<UnixSocketListener>& listener : unix_listeners_) {
    listener->Stop();
  }
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    metrics_->SetServing(false);
    service_->CloseAllSessions();
    // Waits for calls in progress (whose products the executor is still
    // running); past its deadline gRPC cancels what remains. The give-up
    // above answers them first, and the answers get two seconds to leave
    // (a loaded machine needs them), so that their clients read why.
    server_->Shutdown(
        absl::ToChronoTime(absl::Now() + grace + absl::Seconds(2)));
  }
  for (DeviceLane& lane : lanes_) lane.executor->Shutdown();
  if (server_ != nullptr) server_->Wait();
  drained.Notify();
  give_up.join();
}

}  // namespace matmul
