// The daemon's Prometheus metrics: one registry, families created once, label
// sets added once and kept (the hot path only increments and observes).
// Names are in base units with unit suffixes; TFLOPS come from PromQL:
//   rate(matmul_flops_total[1m]) / 1e12
// The `shape` label ("MxNxK:NT", batch appended) is bounded: the first
// `max_shapes` distinct shapes get their own series, later ones share
// shape="other".
#ifndef MATMUL_SERVER_METRICS_H_
#define MATMUL_SERVER_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics_http_server.h"

namespace matmul {

// What one answered request contributes.
struct RequestRecord {
  std::string shape;
  std::string kernel;
  double flops = 0.0;
  double queue_seconds = 0.0;
  double total_seconds = 0.0;
};

class ServerMetrics {
 public:
  // `listen` is host:port for the /metrics endpoint (port 0 picks one);
  // empty serves nothing (the registry is still readable through Scrape()).
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(
      const std::string& listen, int max_shapes, const std::string& backend);

  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Requests answered OK.
  void RecordRequests(absl::Span<const RequestRecord> records);
  // What one launch, which served `batch_size` requests of `shape`, cost.
  struct LaunchRecord {
    int batch_size = 1;
    double kernel_seconds = 0.0;
    // The launch on its worker: staging, copies, kernel, synchronisation.
    double launch_seconds = 0.0;
    // From the launch's end to the last of its requests answered.
    double answer_seconds = 0.0;
  };
  void RecordLaunch(const std::string& shape, const LaunchRecord& launch);
  // Where matmul_queue_depth is read from, at each scrape.
  void SetQueueDepthSource(std::function<int()> source);
  // Any request that ended with `code` (OK included): matmul_requests_total.
  void CountRequest(absl::StatusCode code);
  void RequestStarted() { in_flight_->Increment(); }
  void RequestFinished() { in_flight_->Decrement(); }
  void RingAttached() { rings_attached_->Increment(); }
  void RingDetached() { rings_attached_->Decrement(); }

  // The text exposition format, as /metrics serves it.
  std::string Scrape() const;
  // The port /metrics is served on; 0 when it is not served.
  int http_port() const { return http_server_ ? http_server_->port() : 0; }

 private:
  struct ShapeSeries {
    prometheus::Histogram* request_duration;
    prometheus::Histogram* kernel_duration;
  };

  ServerMetrics(int max_shapes, const std::string& backend);
  void UpdateQueueDepth() const;
  ShapeSeries& SeriesFor(const std::string& shape)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Counter& FlopsFor(const std::string& shape,
                                const std::string& kernel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_shapes_;
  const std::string backend_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> http_server_;

  prometheus::Family<prometheus::Counter>& requests_family_;
  prometheus::Family<prometheus::Histogram>& request_duration_family_;
  prometheus::Family<prometheus::Histogram>& kernel_duration_family_;
  prometheus::Family<prometheus::Counter>& flops_family_;
  prometheus::Histogram* queue_duration_;
  prometheus::Histogram* batch_size_;
  prometheus::Histogram* launch_duration_;
  prometheus::Histogram* answer_duration_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* rings_attached_;
  prometheus::Gauge* queue_depth_;
  std::map<absl::StatusCode, prometheus::Counter*> requests_by_code_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, ShapeSeries> shapes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Counter*> flops_
      ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex source_mu_;
  std::function<int()> queue_depth_source_ ABSL_GUARDED_BY(source_mu_);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_H_
