#include "server/metrics.h"

#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "prometheus/text_serializer.h"

namespace matmul {
namespace {

// 20 us .. ~10 s, doubling: covers a decode-sized product on a GPU and a
// large one on the CPU.
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  prometheus::Histogram::BucketBoundaries bounds;
  for (double b = 20e-6; b < 12.0; b *= 2.0) bounds.push_back(b);
  return bounds;
}

// 1 us .. ~8 s, doubling: host-side steps of a launch.
prometheus::Histogram::BucketBoundaries FineDurationBuckets() {
  prometheus::Histogram::BucketBoundaries bounds;
  for (double b = 1e-6; b < 10.0; b *= 2.0) bounds.push_back(b);
  return bounds;
}

constexpr absl::StatusCode kAllCodes[] = {
    absl::StatusCode::kOk,
    absl::StatusCode::kCancelled,
    absl::StatusCode::kUnknown,
    absl::StatusCode::kInvalidArgument,
    absl::StatusCode::kDeadlineExceeded,
    absl::StatusCode::kNotFound,
    absl::StatusCode::kAlreadyExists,
    absl::StatusCode::kPermissionDenied,
    absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kFailedPrecondition,
    absl::StatusCode::kAborted,
    absl::StatusCode::kOutOfRange,
    absl::StatusCode::kUnimplemented,
    absl::StatusCode::kInternal,
    absl::StatusCode::kUnavailable,
    absl::StatusCode::kDataLoss,
    absl::StatusCode::kUnauthenticated,
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    const std::string& listen, int max_shapes, const std::string& backend) {
  if (max_shapes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_shapes is ", max_shapes, "; expected >= 1"));
  }
  std::unique_ptr<ServerMetrics> metrics(
      new ServerMetrics(max_shapes, backend));
  if (!listen.empty()) {
    ServerMetrics* raw = metrics.get();
    ASSIGN_OR_RETURN(
        metrics->http_server_,
        MetricsHttpServer::Create(listen, [raw] { return raw->Scrape(); }));
  }
  return metrics;
}

ServerMetrics::ServerMetrics(int max_shapes, const std::string& backend)
    : max_shapes_(max_shapes),
      backend_(backend),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_family_(
          prometheus::BuildCounter()
              .Name("matmul_requests_total")
              .Help("Matmul requests answered, by gRPC status code")
              .Register(*registry_)),
      request_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_request_duration_seconds")
              .Help("Time from accepting a matmul request to answering it")
              .Register(*registry_)),
      kernel_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_kernel_duration_seconds")
              .Help("Compute time of one launch, which the requests of a "
                    "batch share (GPU kernel time measured with events; the "
                    "GEMM call on the CPU)")
              .Register(*registry_)),
      flops_family_(prometheus::BuildCounter()
                        .Name("matmul_flops_total")
                        .Help("Floating-point operations computed (2*M*N*K "
                              "per matrix); rate()/1e12 gives TFLOPS")
                        .Register(*registry_)) {
  queue_duration_ = &prometheus::BuildHistogram()
                         .Name("matmul_queue_duration_seconds")
                         .Help("Time a request waited before its product ran")
                         .Register(*registry_)
                         .Add({{"backend", backend_}}, DurationBuckets());
  prometheus::Histogram::BucketBoundaries batch_bounds;
  for (double b = 1; b <= 1024; b *= 2) batch_bounds.push_back(b);
  batch_size_ = &prometheus::BuildHistogram()
                     .Name("matmul_batch_size")
                     .Help("Requests that shared one launch")
                     .Register(*registry_)
                     .Add({{"backend", backend_}}, batch_bounds);
  launch_duration_ =
      &prometheus::BuildHistogram()
           .Name("matmul_launch_duration_seconds")
           .Help(
               "Wall time of one launch on its worker: staging, copies, "
               "kernel and synchronisation (the kernel alone is "
               "matmul_kernel_duration_seconds)")
           .Register(*registry_)
           .Add({{"backend", backend_}}, FineDurationBuckets());
  answer_duration_ =
      &prometheus::BuildHistogram()
           .Name("matmul_answer_duration_seconds")
           .Help(
               "Time from the end of a launch to the last of its requests "
               "answered (a batch's answers go out one after another)")
           .Register(*registry_)
           .Add({{"backend", backend_}}, FineDurationBuckets());
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("matmul_queue_depth")
                      .Help("Requests accepted and waiting to run")
                      .Register(*registry_)
                      .Add({{"backend", backend_}});
  in_flight_ = &prometheus::BuildGauge()
                    .Name("matmul_requests_in_flight")
                    .Help("Matmul requests accepted and not yet answered")
                    .Register(*registry_)
                    .Add({{"backend", backend_}});
  rings_attached_ = &prometheus::BuildGauge()
                         .Name("matmul_rings_attached")
                         .Help("Shared-memory request rings being polled")
                         .Register(*registry_)
                         .Add({{"backend", backend_}});
  for (absl::StatusCode code : kAllCodes) {
    requests_by_code_[code] = &requests_family_.Add(
        {{"code", absl::AsciiStrToLower(absl::StatusCodeToString(code))}});
  }
}

ServerMetrics::ShapeSeries& ServerMetrics::SeriesFor(const std::string& shape) {
  auto it = shapes_.find(shape);
  if (it != shapes_.end()) return it->second;
  const bool bounded_out = static_cast<int>(shapes_.size()) >= max_shapes_;
  const std::string label = bounded_out ? "other" : shape;
  it = shapes_.find(label);
  if (it != shapes_.end()) return it->second;
  ShapeSeries series{
      &request_duration_family_.Add({{"shape", label}}, DurationBuckets()),
      &kernel_duration_family_.Add({{"shape", label}}, DurationBuckets())};
  return shapes_.emplace(label, series).first->second;
}

prometheus::Counter& ServerMetrics::FlopsFor(const std::string& shape,
                                             const std::string& kernel) {
  const std::string key = absl::StrCat(shape, "|", kernel);
  auto it = flops_.find(key);
  if (it != flops_.end()) return *it->second;
  prometheus::Counter* counter = &flops_family_.Add(
      {{"shape", shape}, {"kernel", kernel}, {"backend", backend_}});
  flops_.emplace(key, counter);
  return *counter;
}

void ServerMetrics::RecordRequests(absl::Span<const RequestRecord> records) {
  absl::MutexLock lock(&mu_);
  for (const RequestRecord& record : records) {
    queue_duration_->Observe(record.queue_seconds);
    ShapeSeries& series = SeriesFor(record.shape);
    series.request_duration->Observe(record.total_seconds);
    // The flops series uses the same bounded shape label as the histograms.
    const std::string shape =
        shapes_.contains(record.shape) ? record.shape : "other";
    FlopsFor(shape, record.kernel).Increment(record.flops);
  }
}

void ServerMetrics::RecordLaunch(const std::string& shape,
                                 const LaunchRecord& launch) {
  batch_size_->Observe(launch.batch_size);
  launch_duration_->Observe(launch.launch_seconds);
  answer_duration_->Observe(launch.answer_seconds);
  absl::MutexLock lock(&mu_);
  SeriesFor(shape).kernel_duration->Observe(launch.kernel_seconds);
}

void ServerMetrics::SetQueueDepthSource(std::function<int()> source) {
  absl::MutexLock lock(&source_mu_);
  queue_depth_source_ = std::move(source);
}

void ServerMetrics::UpdateQueueDepth() const {
  absl::MutexLock lock(&source_mu_);
  if (queue_depth_source_) queue_depth_->Set(queue_depth_source_());
}

void ServerMetrics::CountRequest(absl::StatusCode code) {
  auto it = requests_by_code_.find(code);
  if (it == requests_by_code_.end()) {
    it = requests_by_code_.find(absl::StatusCode::kUnknown);
  }
  it->second->Increment();
}

std::string ServerMetrics::Scrape() const {
  UpdateQueueDepth();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace matmul
