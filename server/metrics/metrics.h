// The daemon's Prometheus metrics: one registry, families created once, label
// sets added once and kept (the hot path only increments and observes).
// Names are in base units with unit suffixes; TFLOPS come from PromQL:
//   served:  rate(matmul_flops_total[1m]) / 1e12
//   kernel:  rate(matmul_flops_total[1m])
//              / rate(matmul_kernel_seconds_total[1m]) / 1e12
// Every per-launch family carries `device`: the CUDA ordinal ("0", "1", ...)
// or "cpu"; matmul_device_info maps it to the GPU's UUID, the label the
// DCGM exporter uses, so dashboards can join the two.
// The `shape` label ("MxNxK:NT", batch appended) is bounded: the first
// `max_shapes` distinct shapes get their own series, later ones share
// shape="other"; a request rejected before it had a shape counts as
// shape="invalid".
// Values owned elsewhere (queue depth, regions, sessions, device memory,
// tuning, the process's /proc figures) are read at scrape time through
// sources, so their owners need not know about metrics.
#ifndef MATMUL_SERVER_METRICS_METRICS_H_
#define MATMUL_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/gemm_backend.h"
#include "kernels/launch_stages.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/metrics_http_server.h"

namespace matmul {

// What one answered request contributes.
struct RequestRecord {
  std::string shape;
  std::string kernel;
  double flops = 0.0;
  // The request's share of its launch's kernel time (by FLOPs), so that
  // kernel_seconds_total and flops_total of a shape stay a matched pair.
  double kernel_seconds = 0.0;
  double queue_seconds = 0.0;
  double total_seconds = 0.0;
  // A product list records each product's FLOPs and kernel time under its
  // shape, and the list's latency once, under kListShape.
  bool observe_latency = true;  // queue_seconds and total_seconds
  bool observe_kernel = true;   // flops and kernel_seconds
};

// The shape label of product lists' requests.
inline constexpr std::string_view kListShape = "list";

// matmul_build_info's labels.
struct BuildInfo {
  std::string version;
  std::string git_commit;
  std::string cuda_runtime;  // "13.0"
  std::string cublas;        // "13.1.0"
};

// What this binary was built from (MATMUL_VERSION, the commit CMake saw)
// and the CUDA runtime and cuBLASLt it runs with.
BuildInfo CurrentBuildInfo();

// Read at each scrape: sessions open and regions registered by kind.
struct RegionGauges {
  int sessions = 0;
  struct Kind {
    std::string kind;  // "shm", "cuda_ipc", "cuda_vmm"
    int regions = 0;
    int64_t bytes = 0;
  };
  std::vector<Kind> kinds;
};

class ServerMetrics {
 public:
  // `listen` is host:port for the /metrics endpoint (port 0 picks one);
  // empty serves nothing (the registry is still readable through Scrape()).
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(
      const std::string& listen, int max_shapes, const BuildInfo& build);

  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // The device label of a backend: its CUDA ordinal, or "cpu".
  static std::string DeviceLabel(const GemmBackend& backend);

  // Adds a device before any request runs on it: its matmul_device_info row
  // and per-device series. `gauges` is read at each scrape (device memory,
  // tuning); it must stay valid until ClearSources(). A label added again
  // (lanes that share a device, as CPU lanes do) keeps its first row and
  // source.
  void AddDevice(const std::string& device, const DeviceInfo& info,
                 std::function<BackendGauges()> gauges);

  // Requests of one launch on `device` answered OK.
  void RecordRequests(const std::string& device,
                      absl::Span<const RequestRecord> records);
  // What one launch on `device`, which served `batch_size` requests, cost.
  struct LaunchRecord {
    int batch_size = 1;
    double kernel_seconds = 0.0;
    // From the launch's start on its worker to its end noticed: staging,
    // copies, kernel, synchronisation.
    double launch_seconds = 0.0;
    // From the launch's end to the last of its requests answered.
    double answer_seconds = 0.0;
    // The backend's laps of the launch on its worker
    // (GemmRunInfo::launch_stages): matmul_launch_stage_seconds.
    absl::Span<const LaunchStage> stages;
  };
  void RecordLaunch(const std::string& device, const std::string& shape,
                    const LaunchRecord& launch);
  // How long one launch on `device` held its worker (less than its
  // launch_seconds where the backend notices the end on a thread of its
  // own).
  void RecordWorkerSeconds(const std::string& device, double seconds);
  // Any request that ended with `code` (OK included): matmul_requests_total.
  // `shape` is empty for a request rejected before it had one.
  void CountRequest(const std::string& shape, absl::StatusCode code);
  void RequestStarted() { in_flight_->Increment(); }
  void RequestFinished() { in_flight_->Decrement(); }
  void RingAttached() { rings_attached_->Increment(); }
  void RingDetached() { rings_attached_->Decrement(); }
  // matmul_serving: 1 while the health service says SERVING.
  void SetServing(bool serving) { serving_->Set(serving ? 1 : 0); }

  // matmul_queue_capacity: the queued requests admitted before
  // RESOURCE_EXHAUSTED, over all devices (--max_queue_size each).
  void SetQueueCapacity(int capacity) { queue_capacity_->Set(capacity); }
  // Where matmul_queue_depth is read from, at each scrape.
  void SetQueueDepthSource(std::function<int()> source);
  // Where matmul_sessions, matmul_regions and matmul_region_bytes are read
  // from, at each scrape.
  void SetRegionSource(std::function<RegionGauges()> source);
  // What GET /debug/requests shows: the requests in flight, one per line
  // (InFlightRequests::Render).
  void SetRequestsInFlightSource(std::function<std::string()> source);
  std::string RenderRequestsInFlight() const;
  // Drops every source (the devices' included): called before what they
  // read goes away, as the endpoint may scrape until this object is gone.
  void ClearSources();

  // The text exposition format, as /metrics serves it.
  std::string Scrape() const;
  // The port /metrics is served on; 0 when it is not served.
  int http_port() const { return http_server_ ? http_server_->port() : 0; }

 private:
  struct ShapeSeries {
    prometheus::Histogram* request_duration;
    prometheus::Histogram* queue_duration;
    prometheus::Histogram* kernel_duration;
  };
  struct KernelSeries {
    prometheus::Counter* flops;
    prometheus::Counter* kernel_seconds;
  };
  struct DeviceSeries {
    prometheus::Histogram* batch_size;
    prometheus::Histogram* launch_duration;
    prometheus::Histogram* worker_duration;
    prometheus::Histogram* answer_duration;
    // By stage name (a fixed set: the backend's string literals).
    absl::flat_hash_map<std::string, prometheus::Histogram*> stages;
    // By shape label; by "shape|kernel".
    absl::flat_hash_map<std::string, ShapeSeries> shapes;
    absl::flat_hash_map<std::string, KernelSeries> kernels;
  };

  explicit ServerMetrics(int max_shapes);
  // The label `shape` is counted under: itself while fewer than
  // max_shapes_ shapes have a label, else "other"; "invalid" when empty.
  std::string ShapeLabel(const std::string& shape)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DeviceSeries* FindDevice(const std::string& device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShapeSeries& SeriesFor(DeviceSeries& device_series, const std::string& device,
                         const std::string& shape_label)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  KernelSeries& KernelSeriesFor(DeviceSeries& device_series,
                                const std::string& device,
                                const std::string& shape_label,
                                const std::string& kernel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the scrape-time gauges and counters from their sources and /proc.
  void UpdateFromSources() const;

  const int max_shapes_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> http_server_;

  prometheus::Family<prometheus::Counter>& requests_family_;
  prometheus::Family<prometheus::Histogram>& request_duration_family_;
  prometheus::Family<prometheus::Histogram>& queue_duration_family_;
  prometheus::Family<prometheus::Histogram>& kernel_duration_family_;
  prometheus::Family<prometheus::Counter>& flops_family_;
  prometheus::Family<prometheus::Counter>& kernel_seconds_family_;
  prometheus::Family<prometheus::Histogram>& batch_size_family_;
  prometheus::Family<prometheus::Histogram>& launch_duration_family_;
  prometheus::Family<prometheus::Histogram>& worker_duration_family_;
  prometheus::Family<prometheus::Histogram>& answer_duration_family_;
  prometheus::Family<prometheus::Histogram>& launch_stage_family_;
  prometheus::Family<prometheus::Gauge>& device_info_family_;
  prometheus::Family<prometheus::Gauge>& mps_client_family_;
  prometheus::Family<prometheus::Gauge>& memory_used_family_;
  prometheus::Family<prometheus::Gauge>& memory_total_family_;
  prometheus::Family<prometheus::Gauge>& regions_family_;
  prometheus::Family<prometheus::Gauge>& region_bytes_family_;
  prometheus::Family<prometheus::Counter>& completion_thread_family_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* rings_attached_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* queue_capacity_;
  prometheus::Gauge* serving_;
  prometheus::Gauge* sessions_;
  prometheus::Gauge* tuned_shapes_;
  prometheus::Counter* tunings_succeeded_;
  prometheus::Counter* tunings_failed_;
  prometheus::Counter* process_cpu_seconds_;
  prometheus::Gauge* process_resident_bytes_;
  prometheus::Gauge* process_open_fds_;
  prometheus::Gauge* process_start_time_;

  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> shape_labels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, DeviceSeries> devices_ ABSL_GUARDED_BY(mu_);
  // By "shape|code".
  absl::flat_hash_map<std::string, prometheus::Counter*> requests_
      ABSL_GUARDED_BY(mu_);

  // Held while a scrape reads the sources (apart from mu_, so that a slow
  // source never stalls the hot path).
  mutable absl::Mutex source_mu_;
  std::function<int()> queue_depth_source_ ABSL_GUARDED_BY(source_mu_);
  std::function<std::string()> requests_in_flight_source_
      ABSL_GUARDED_BY(source_mu_);
  std::function<RegionGauges()> region_source_ ABSL_GUARDED_BY(source_mu_);
  struct DeviceSource {
    prometheus::Gauge* memory_used;
    prometheus::Gauge* memory_total;
    std::function<BackendGauges()> gauges;
    // A GPU's completion thread (BackendGauges): polling, completing.
    prometheus::Counter* completion_polling = nullptr;
    prometheus::Counter* completion_completing = nullptr;
  };
  std::vector<DeviceSource> device_sources_ ABSL_GUARDED_BY(source_mu_);
  // Region kinds seen so far: a kind whose last region went keeps its row
  // at 0 rather than vanishing.
  mutable absl::flat_hash_map<std::string,
                              std::pair<prometheus::Gauge*, prometheus::Gauge*>>
      region_kinds_ ABSL_GUARDED_BY(source_mu_);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_METRICS_H_
