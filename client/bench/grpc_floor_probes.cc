#include "client/bench/grpc_floor_probes.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "client/bench/grpc_floor_echo.grpc.pb.h"
#include "common/status_macros.h"
#include "matmul/v1/matmul.grpc.pb.h"

namespace matmul::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status CallFailed(const char* what, const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// One unary call of `method` on `stub` with `timeout`: its wall time in
// seconds, or its error (prefixed with `what`).
template <typename Stub, typename Request, typename Response>
absl::StatusOr<double> TimedCall(
    const char* what, Stub& stub,
    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                 Response*),
    const Request& request, Response* response, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const Clock::time_point start = Clock::now();
  const grpc::Status status = (stub.*method)(&context, request, response);
  const double elapsed = SecondsSince(start);
  if (!status.ok()) return CallFailed(what, status);
  return elapsed;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

ThroughputStats SummarizeThroughput(const std::vector<double>& seconds,
                                    int64_t bytes_in, int64_t bytes_out) {
  ThroughputStats stats;
  stats.reps = static_cast<int>(seconds.size());
  stats.bytes_in = bytes_in;
  stats.bytes_out = bytes_out;
  stats.median_seconds = Median(seconds);
  stats.best_seconds = *std::min_element(seconds.begin(), seconds.end());
  stats.gb_per_second =
      static_cast<double>(bytes_in + bytes_out) / stats.median_seconds / 1e9;
  return stats;
}

}  // namespace

LatencyStats SummarizeLatency(std::vector<double> seconds) {
  LatencyStats stats;
  stats.calls = static_cast<int>(seconds.size());
  if (seconds.empty()) return stats;
  std::sort(seconds.begin(), seconds.end());
  auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(q * (seconds.size() - 1) + 0.5);
    return seconds[rank] * 1e6;
  };
  stats.p50_us = at(0.50);
  stats.p90_us = at(0.90);
  stats.p99_us = at(0.99);
  stats.mean_us = std::accumulate(seconds.begin(), seconds.end(), 0.0) /
                  seconds.size() * 1e6;
  return stats;
}

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target,
                                           const GrpcTransportArgs& transport) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A channel of its own, never a subchannel shared with another probe.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ApplyGrpcTransportArgs(transport, args);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<LatencyStats> EchoPingPong(
    const std::shared_ptr<grpc::Channel>& channel, int64_t payload_bytes,
    const ProbeOptions& options) {
  std::unique_ptr<grpc_floor::EchoService::Stub> stub =
      grpc_floor::EchoService::NewStub(channel);
  grpc_floor::EchoRequest request;
  request.add_payload(std::string(static_cast<size_t>(payload_bytes), 'p'));
  request.set_reply_bytes(static_cast<uint64_t>(payload_bytes));
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(options.calls));
  for (int i = 0; i < options.warmup + options.calls; ++i) {
    grpc_floor::EchoResponse response;
    ASSIGN_OR_RETURN(
        const double elapsed,
        TimedCall("echo", *stub, &grpc_floor::EchoService::Stub::Echo, request,
                  &response, options.timeout));
    if (i >= options.warmup) seconds.push_back(elapsed);
  }
  return SummarizeLatency(std::move(seconds));
}

absl::StatusOr<ThroughputStats> EchoThroughput(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::vector<int64_t>& in_bytes, int64_t out_bytes,
    const ProbeOptions& options) {
  std::unique_ptr<grpc_floor::EchoService::Stub> stub =
      grpc_floor::EchoService::NewStub(channel);
  grpc_floor::EchoRequest request;
  int64_t total_in = 0;
  for (int64_t bytes : in_bytes) {
    request.add_payload(std::string(static_cast<size_t>(bytes), 'i'));
    total_in += bytes;
  }
  request.set_reply_bytes(static_cast<uint64_t>(out_bytes));
  std::vector<double> seconds;
  for (int i = 0; i < 1 + options.large_reps; ++i) {
    grpc_floor::EchoResponse response;
    ASSIGN_OR_RETURN(
        const double elapsed,
        TimedCall("large echo", *stub, &grpc_floor::EchoService::Stub::Echo,
                  request, &response, options.timeout));
    if (static_cast<int64_t>(response.payload().size()) != out_bytes) {
      return absl::InternalError(absl::StrCat("the echo answered ",
                                              response.payload().size(),
                                              " bytes; expected ", out_bytes));
    }
    if (i > 0) seconds.push_back(elapsed);
  }
  return SummarizeThroughput(seconds, total_in, out_bytes);
}

absl::StatusOr<MatmulLatency> MatmulOverhead(
    const std::shared_ptr<grpc::Channel>& channel,
    const matmul::v1::MatmulRequest& request, const ProbeOptions& options) {
  std::unique_ptr<matmul::v1::MatmulService::Stub> stub =
      matmul::v1::MatmulService::NewStub(channel);
  std::vector<double> overhead, end_to_end, kernel, in_daemon, outside;
  overhead.reserve(static_cast<size_t>(options.calls));
  for (int i = 0; i < options.warmup + options.calls; ++i) {
    matmul::v1::MatmulResponse response;
    ASSIGN_OR_RETURN(
        const double elapsed,
        TimedCall("Matmul", *stub, &matmul::v1::MatmulService::Stub::Matmul,
                  request, &response, options.timeout));
    if (i < options.warmup) continue;
    const double kernel_seconds = response.timing().kernel_seconds();
    end_to_end.push_back(elapsed);
    kernel.push_back(kernel_seconds);
    overhead.push_back(elapsed - kernel_seconds);
    const double total_seconds = response.timing().total_seconds();
    in_daemon.push_back(total_seconds - kernel_seconds);
    outside.push_back(elapsed - total_seconds);
  }
  MatmulLatency latency;
  latency.overhead = SummarizeLatency(std::move(overhead));
  latency.end_to_end = SummarizeLatency(std::move(end_to_end));
  latency.in_daemon = SummarizeLatency(std::move(in_daemon));
  latency.outside_daemon = SummarizeLatency(std::move(outside));
  latency.median_kernel_us = Median(std::move(kernel)) * 1e6;
  return latency;
}

absl::StatusOr<ThroughputStats> MatmulThroughput(
    const std::shared_ptr<grpc::Channel>& channel,
    const matmul::v1::MatmulRequest& request, const ProbeOptions& options) {
  std::unique_ptr<matmul::v1::MatmulService::Stub> stub =
      matmul::v1::MatmulService::NewStub(channel);
  const int64_t bytes_in = static_cast<int64_t>(
      request.a().inline_data().size() + request.b().inline_data().size() +
      request.c().inline_data().size());
  int64_t bytes_out = 0;
  std::vector<double> seconds, kernel;
  for (int i = 0; i < 1 + options.large_reps; ++i) {
    matmul::v1::MatmulResponse response;
    ASSIGN_OR_RETURN(const double elapsed,
                     TimedCall("large Matmul", *stub,
                               &matmul::v1::MatmulService::Stub::Matmul,
                               request, &response, options.timeout));
    bytes_out = static_cast<int64_t>(response.c().inline_data().size());
    if (i == 0) continue;
    seconds.push_back(elapsed);
    kernel.push_back(response.timing().kernel_seconds());
  }
  ThroughputStats stats = SummarizeThroughput(seconds, bytes_in, bytes_out);
  stats.median_kernel_seconds = Median(std::move(kernel));
  stats.gb_per_second_without_kernel =
      static_cast<double>(bytes_in + bytes_out) /
      (stats.median_seconds - stats.median_kernel_seconds) / 1e9;
  return stats;
}

}  // namespace matmul::bench
