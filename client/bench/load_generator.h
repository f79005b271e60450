// matmul::bench::LoadGenerator: drives a daemon with a fixed set of
// prepared requests at one concurrency level (closed loop) or at a fixed
// request rate (open loop, at most `concurrency` outstanding), in the
// manner of Triton's perf_analyzer. Measurement runs in windows (a span of
// time, or a count of requests); a level ends when the last
// `stable_windows` windows agree on throughput and p50 latency within
// `stability`, or after `max_windows` (then it is reported unstable).
// The statistics cover the requests of those last windows.
//
// Calls go through the gRPC callback API on `channels` connections, as
// unary calls or over one MatmulStream per slot, or through a request ring;
// each slot reuses its own
// request message (no copy per call), so the client's own cost per
// request stays small next to the server's.
#ifndef MATMUL_CLIENT_BENCH_LOAD_GENERATOR_H_
#define MATMUL_CLIENT_BENCH_LOAD_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "matmul/v1/matmul.grpc.pb.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {
class RequestRing;
}  // namespace matmul

namespace matmul::bench {

struct LoadOptions {
  int concurrency = 1;
  // Requests per second over all slots; 0: closed loop (each slot sends
  // its next request as soon as the previous one is answered).
  double request_rate = 0;
  // A window is `window` long, or `window_requests` answers when > 0.
  absl::Duration window = absl::Seconds(2);
  int64_t window_requests = 0;
  int stable_windows = 3;
  double stability = 0.10;  // relative spread allowed across those windows
  int max_windows = 10;
  // Run before the first window and not measured (connections, tuning,
  // caches).
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration timeout = absl::Seconds(60);  // per request
  // Each slot keeps one MatmulStream open and sends its requests over it
  // (no per-call set-up), instead of one unary Matmul call per request.
  bool stream = false;
  // When not empty, requests go through these shared-memory request rings
  // (slot i through rings[i % size]; asynchronous calls, answered on each
  // ring's completion thread) instead of gRPC.
  std::vector<RequestRing*> rings;
};

// What a window or a level measured.
struct WindowStats {
  int64_t requests = 0;  // answered OK
  int64_t errors = 0;
  double seconds = 0;
  double requests_per_second = 0;
  double p50_latency = 0;  // seconds, client-side (send to answer)
};

struct LevelResult {
  int concurrency = 0;
  double request_rate = 0;
  int windows = 0;
  bool stable = false;
  int64_t requests = 0;
  int64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double requests_per_second = 0;
  double tflops = 0;
  // Client-side latency, seconds.
  double latency_mean = 0;
  double latency_p50 = 0;
  double latency_p90 = 0;
  double latency_p95 = 0;
  double latency_p99 = 0;
  // The server's split, from the responses (medians, seconds).
  double server_queue_p50 = 0;
  double server_kernel_p50 = 0;
  double server_total_p50 = 0;
  // Latency minus the request's kernel time: what the service adds.
  double overhead_p50 = 0;
  double overhead_p99 = 0;
  double mean_batch_size = 0;
  std::string kernel;  // what the last answer said ran
};

// The q-quantile (0..1) of `sorted` by nearest rank; 0 when empty.
double Quantile(const std::vector<double>& sorted, double q);

// True when every window's throughput and p50 latency lie within
// `stability` (relative) of their mean over the windows.
bool WindowsAgree(const std::vector<WindowStats>& windows, double stability);

class LoadGenerator {
 public:
  // One prepared request per slot is cycled through: slot i sends
  // requests[i % requests.size()]. `flops_per_request` gives TFLOPS.
  // `channels` >= 1 connections to `target`, each given `connect_timeout`
  // to come up (UNAVAILABLE otherwise).
  static absl::StatusOr<std::unique_ptr<LoadGenerator>> Create(
      const std::string& target, int channels,
      std::vector<v1::MatmulRequest> requests, double flops_per_request,
      absl::Duration connect_timeout = absl::Seconds(10));
  ~LoadGenerator();

  // Runs one level. `progress` (may be empty) is called after each window
  // with the windows so far.
  absl::StatusOr<LevelResult> RunLevel(
      const LoadOptions& options,
      const std::function<void(const std::vector<WindowStats>&)>& progress);

 private:
  class Run;
  LoadGenerator(std::vector<std::unique_ptr<v1::MatmulService::Stub>> stubs,
                std::vector<v1::MatmulRequest> requests,
                double flops_per_request);

  std::vector<std::unique_ptr<v1::MatmulService::Stub>> stubs_;
  std::vector<v1::MatmulRequest> requests_;
  const double flops_per_request_;
};

}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_LOAD_GENERATOR_H_
