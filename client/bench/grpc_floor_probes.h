// The measurements grpc-floor makes, each over one channel at concurrency
// 1 with blocking calls: a bare echo's ping-pong latency and large-payload
// throughput, and the same two figures for the daemon's unary Matmul (its
// latency less the kernel time the response reports).
#ifndef MATMUL_CLIENT_BENCH_GRPC_FLOOR_PROBES_H_
#define MATMUL_CLIENT_BENCH_GRPC_FLOOR_PROBES_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_transport_args.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul::bench {

struct LatencyStats {
  int calls = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double mean_us = 0;
};

// Percentiles of `seconds` (nearest rank), in microseconds.
LatencyStats SummarizeLatency(std::vector<double> seconds);

struct ThroughputStats {
  int reps = 0;
  int64_t bytes_in = 0;   // request payload per call
  int64_t bytes_out = 0;  // response payload per call
  double median_seconds = 0;
  double best_seconds = 0;
  // (bytes_in + bytes_out) / median_seconds / 1e9.
  double gb_per_second = 0;
  // Matmul only: the median kernel time the responses report, and the
  // throughput over the median time less that (where the kernel is not
  // negligible, as on a CPU backend).
  double median_kernel_seconds = 0;
  double gb_per_second_without_kernel = 0;
};

struct MatmulLatency {
  // End to end minus the response's timing.kernel_seconds.
  LatencyStats overhead;
  LatencyStats end_to_end;
  // Where the overhead is: inside the daemon (timing.total_seconds, from
  // accepting the request to answering it, minus the kernel) and outside
  // it (end to end minus total_seconds: gRPC both ways and this client).
  LatencyStats in_daemon;
  LatencyStats outside_daemon;
  double median_kernel_us = 0;
};

struct ProbeOptions {
  int calls = 2000;
  int warmup = 200;
  int large_reps = 5;
  absl::Duration timeout = absl::Seconds(120);
};

// A channel to `target` with no message size limit and `transport`
// applied. Each channel gets its own connection.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target,
                                           const GrpcTransportArgs& transport);

// `calls` echoes of `payload_bytes` each way, after `warmup`.
absl::StatusOr<LatencyStats> EchoPingPong(
    const std::shared_ptr<grpc::Channel>& channel, int64_t payload_bytes,
    const ProbeOptions& options);

// An echo that sends payloads of `in_bytes` (one entry each) and gets
// `out_bytes` back, `large_reps` times after one warm-up call.
absl::StatusOr<ThroughputStats> EchoThroughput(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::vector<int64_t>& in_bytes, int64_t out_bytes,
    const ProbeOptions& options);

// `calls` Matmul calls of `request` after `warmup`; every one must succeed.
absl::StatusOr<MatmulLatency> MatmulOverhead(
    const std::shared_ptr<grpc::Channel>& channel,
    const matmul::v1::MatmulRequest& request, const ProbeOptions& options);

// `large_reps` Matmul calls of an inline `request` after one warm-up;
// bytes are its operands' and the response's inline bytes.
absl::StatusOr<ThroughputStats> MatmulThroughput(
    const std::shared_ptr<grpc::Channel>& channel,
    const matmul::v1::MatmulRequest& request, const ProbeOptions& options);

}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_GRPC_FLOOR_PROBES_H_
