#include "client/client.h"

#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/sync_stream.h"

namespace matmul {
namespace {

// State of one MatmulAsync call: gRPC's callback API needs the context,
// request and response to stay put until the completion callback runs. The
// callback owns it through a shared_ptr (std::function must be copyable).
struct AsyncMatmulCall {
  grpc::ClientContext context;
  v1::MatmulRequest request;
  v1::MatmulResponse response;
  Client::MatmulCallback done;
};

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// gRPC's own round_robin: one subchannel per address the target resolves
// to, calls taken in turn by those that are ready, so a daemon that drains
// (GOAWAY) or goes away stops getting new calls. A Matmul that a draining
// daemon turns away before answering (UNAVAILABLE, or CANCELLED for a call
// that reached it as it shut down) is sent again by gRPC, to another
// daemon: over TCP every product is inline, so sending one twice changes
// nothing.
constexpr char kRoundRobinServiceConfig[] = R"({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "matmul.v1.MatmulService", "method": "Matmul"}],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.01s",
      "maxBackoff": "0.1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]
    }
  }]
})";

}  // namespace

bool IsLocalTarget(absl::string_view target) {
  return absl::StartsWith(target, "unix:");
}

absl::Status TimeoutPassedBeforeSending() {
  return absl::DeadlineExceededError(
      "the call's timeout had passed before it was sent");
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  // grpc::StatusCode and absl::StatusCode share the google.rpc.Code values.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status ResponseStatus(const v1::MatmulResponse& response) {
  return absl::Status(static_cast<absl::StatusCode>(response.status_code()),
                      response.status_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(std::string target,
                                                       ClientOptions options) {
  if (target.empty()) {
    return absl::InvalidArgumentError(
        "empty target; expected unix:/path/to.sock or host:port");
  }
  if (options.max_message_bytes <= 0 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be in [1, 2^31 - 1], got ",
                     options.max_message_bytes));
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("default_timeout must be positive, got ",
                     absl::FormatDuration(options.default_timeout)));
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  arguments.SetMaxReceiveMessageSize(
      static_cast<int>(options.max_message_bytes));
  ApplyServerName(options.tls, arguments);
  if (!IsLocalTarget(target)) {
    arguments.SetServiceConfigJSON(kRoundRobinServiceConfig);
    // gRPC keeps a call's request for a retry only up to this size.
    arguments.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE,
                     static_cast<int>(options.max_message_bytes));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, *credentials, arguments);
  if (channel == nullptr) {
    return absl::InternalError(
        absl::StrCat("could not create a channel to ", target));
  }
  // The constructor is private, so std::make_unique cannot reach it.
  return absl::WrapUnique(
      new Client(std::move(target), options, std::move(channel)));
}

Client::Client(std::string target, ClientOptions options,
               std::shared_ptr<grpc::Channel> channel)
    : target_(std::move(target)),
      options_(options),
      channel_(std::move(channel)),
      stub_(v1::MatmulService::NewStub(channel_)) {}

Client::~Client() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* in_flight) { return *in_flight == 0; },
      &async_calls_in_flight_));
}

absl::Status Client::WaitForConnected(absl::Duration timeout) {
  if (channel_->WaitForConnected(DeadlineAfter(timeout))) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "could not connect to ", target_, " within ",
      absl::FormatDuration(timeout), " (is matmul-server listening there?)"));
}

void Client::PrepareContext(grpc::ClientContext& context,
                            absl::Duration timeout) const {
  context.set_deadline(DeadlineAfter(timeout));
  context.set_wait_for_ready(options_.wait_for_ready);
}

absl::StatusOr<v1::MatmulResponse> Client::Matmul(
    const v1::MatmulRequest& request, absl::Duration timeout) {
  // gRPC would send it anyway and race its own deadline timer against the
  // answer; say so at once, as the request ring does.
  if (timeout <= absl::ZeroDuration()) return TimeoutPassedBeforeSending();
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::MatmulResponse response;
  grpc::Status status = stub_->Matmul(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::MatmulResponse> Client::Matmul(
    const v1::MatmulRequest& request) {
  return Matmul(request, options_.default_timeout);
}

void Client::MatmulAsync(v1::MatmulRequest request, absl::Duration timeout,
                         MatmulCallback done) {
  if (timeout <= absl::ZeroDuration()) {
    std::move(done)(TimeoutPassedBeforeSending());
    return;
  }
  auto call = std::make_shared<AsyncMatmulCall>();
  call->request = std::move(request);
  call->done = std::move(done);
  PrepareContext(call->context, timeout);
  {
    absl::MutexLock lock(&mu_);
    ++async_calls_in_flight_;
  }
  stub_->async()->Matmul(&call->context, &call->request, &call->response,
                         [this, call](grpc::Status status) mutable {
                           // Take the state out of the std::function so it is
                           // released here, before the destructor may be
                           // unblocked, not whenever gRPC drops its copy of the
                           // functor.
                           std::shared_ptr<AsyncMatmulCall> finished =
                               std::move(call);
                           MatmulCallback done = std::move(finished->done);
                           if (status.ok()) {
                             std::move(done)(std::move(finished->response));
                           } else {
                             std::move(done)(FromGrpcStatus(status));
                           }
                           finished.reset();
                           FinishAsyncCall();
                         });
}

void Client::FinishAsyncCall() {
  absl::MutexLock lock(&mu_);
  --async_calls_in_flight_;
}

std::future<absl::StatusOr<v1::MatmulResponse>> Client::MatmulFuture(
    v1::MatmulRequest request, absl::Duration timeout) {
  std::promise<absl::StatusOr<v1::MatmulResponse>> promise;
  std::future<absl::StatusOr<v1::MatmulResponse>> future = promise.get_future();
  MatmulAsync(std::move(request), timeout,
              [promise = std::move(promise)](
                  absl::StatusOr<v1::MatmulResponse> result) mutable {
                promise.set_value(std::move(result));
              });
  return future;
}

absl::StatusOr<std::vector<v1::MatmulResponse>> Client::MatmulStream(
    absl::Span<const v1::MatmulRequest> requests, absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::MatmulRequest, v1::MatmulResponse>>
      stream = stub_->MatmulStream(&context);

  // Write on a second thread while this one reads: the server may answer
  // (and fill its send window) before it has read every request, so writing
  // everything first could deadlock on flow control.
  bool all_written = true;
  std::jthread writer([&stream, &requests, &all_written] {
    for (const v1::MatmulRequest& request : requests) {
      if (!stream->Write(request)) {
        all_written = false;  // The stream broke; Finish says why.
        break;
      }
    }
    stream->WritesDone();
  });
  std::vector<v1::MatmulResponse> responses;
  responses.reserve(requests.size());
  v1::MatmulResponse response;
  while (stream->Read(&response)) responses.push_back(std::move(response));
  writer.join();
  grpc::Status status = stream->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!all_written) {
    return absl::UnavailableError(
        "MatmulStream closed before every request was sent");
  }
  if (responses.size() != requests.size()) {
    return absl::DataLossError(absl::StrCat("MatmulStream answered ",
                                            responses.size(), " of ",
                                            requests.size(), " requests"));
  }
  return responses;
}

absl::StatusOr<v1::GetServerInfoResponse> Client::GetServerInfo(
    absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::GetServerInfoResponse response;
  grpc::Status status =
      stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::GetServerInfoResponse> Client::GetServerInfo() {
  return GetServerInfo(options_.default_timeout);
}

absl::StatusOr<v1::RegisterRegionResponse> Client::RegisterRegion(
    const v1::RegisterRegionRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::RegisterRegionResponse response;
  grpc::Status status = stub_->RegisterRegion(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::UnregisterRegionResponse> Client::UnregisterRegion(
    const v1::UnregisterRegionRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::UnregisterRegionResponse response;
  grpc::Status status = stub_->UnregisterRegion(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::ShareRegionResponse> Client::ShareRegion(
    const v1::ShareRegionRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::ShareRegionResponse response;
  grpc::Status status = stub_->ShareRegion(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::ListRegionsResponse> Client::ListRegions(
    const std::string& session_id, absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareContext(context, timeout);
  v1::ListRegionsRequest request;
  request.set_session_id(session_id);
  v1::ListRegionsResponse response;
  grpc::Status status = stub_->ListRegions(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace matmul
