#include "server/metrics/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "prometheus/text_serializer.h"
#include "server/backends/cuda_versions.h"

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

prometheus::Histogram::BucketBoundaries BatchBuckets() {
  prometheus::Histogram::BucketBoundaries bounds;
  for (double b = 1; b <= 1024; b *= 2) bounds.push_back(b);
  return bounds;
}

// Brings a counter that mirrors a cumulative figure read elsewhere up to
// `value` (counters only go up; a figure that went down is left alone).
void AdvanceTo(prometheus::Counter& counter, double value) {
  const double delta = value - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

// What /proc says about this process; fields it could not read stay < 0.
struct ProcessStats {
  double cpu_seconds = -1;
  double resident_bytes = -1;
  double open_fds = -1;
  double start_time_seconds = -1;
};

ProcessStats ReadProcessStats() {
  ProcessStats stats;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces: count fields after its ')'.
  const size_t close = stat.rfind(')');
  if (close != std::string::npos && ticks > 0) {
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
    // fields[0] is field 3 (state): field n is fields[n - 3].
    double utime, stime, starttime, rss;
    if (fields.size() > 21 && absl::SimpleAtod(fields[11], &utime) &&
        absl::SimpleAtod(fields[12], &stime) &&
        absl::SimpleAtod(fields[19], &starttime) &&
        absl::SimpleAtod(fields[21], &rss)) {
      stats.cpu_seconds = (utime + stime) / ticks;
      stats.resident_bytes = rss * page;
      std::ifstream proc_stat("/proc/stat");
      for (std::string line; std::getline(proc_stat, line);) {
        double boot_time;
        if (absl::StartsWith(line, "btime ") &&
            absl::SimpleAtod(line.substr(6), &boot_time)) {
          stats.start_time_seconds = boot_time + starttime / ticks;
        }
      }
    }
  }
  std::error_code error;
  int fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end;
       !error && it != end; it.increment(error)) {
    ++fds;
  }
  if (!error) stats.open_fds = fds;
  return stats;
}

// The host's memory in use and in all (MemTotal - MemAvailable, MemTotal),
// which the CPU backend computes in; false when /proc/meminfo is unreadable.
bool ReadHostMemory(int64_t& used, int64_t& total) {
  std::ifstream meminfo("/proc/meminfo");
  int64_t total_kib = -1;
  int64_t available_kib = -1;
  for (std::string line; std::getline(meminfo, line);) {
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() < 2) continue;
    if (parts[0] == "MemTotal:") (void)absl::SimpleAtoi(parts[1], &total_kib);
    if (parts[0] == "MemAvailable:") {
      (void)absl::SimpleAtoi(parts[1], &available_kib);
    }
  }
  if (total_kib < 0 || available_kib < 0) return false;
  total = total_kib * 1024;
  used = (total_kib - available_kib) * 1024;
  return true;
}

}  // namespace

BuildInfo CurrentBuildInfo() {
  CudaVersions cuda = LinkedCudaVersions();
  return {.version = MATMUL_VERSION,
          .git_commit = MATMUL_GIT_COMMIT,
          .cuda_runtime = std::move(cuda.runtime),
          .cublas = std::move(cuda.cublas)};
}

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    const std::string& listen, int max_shapes, const BuildInfo& build) {
  if (max_shapes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_shapes is ", max_shapes, "; expected >= 1"));
  }
  std::unique_ptr<ServerMetrics> metrics(new ServerMetrics(max_shapes));
  prometheus::BuildGauge()
      .Name("matmul_build_info")
      .Help("Always 1; the labels say what the daemon was built from")
      .Register(*metrics->registry_)
      .Add({{"version", build.version},
            {"git_commit", build.git_commit},
            {"cuda_runtime", build.cuda_runtime},
            {"cublas", build.cublas}})
      .Set(1);
  if (!listen.empty()) {
    ServerMetrics* raw = metrics.get();
    ASSIGN_OR_RETURN(metrics->http_server_,
                     MetricsHttpServer::Create(
                         listen, [raw] { return raw->Scrape(); }, {},
                         [raw] { return raw->RenderRequestsInFlight(); }));
  }
  return metrics;
}

ServerMetrics::ServerMetrics(int max_shapes)
    : max_shapes_(max_shapes),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_family_(
          prometheus::BuildCounter()
              .Name("matmul_requests_total")
              .Help("Matmul requests answered, by shape and gRPC status code")
              .Register(*registry_)),
      request_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_request_duration_seconds")
              .Help("Time from accepting a matmul request to answering it "
                    "(requests answered OK)")
              .Register(*registry_)),
      queue_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_queue_duration_seconds")
              .Help("Time a request waited before its product ran")
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
                              "per matrix); rate()/1e12 gives served TFLOPS")
                        .Register(*registry_)),
      kernel_seconds_family_(
          prometheus::BuildCounter()
              .Name("matmul_kernel_seconds_total")
              .Help("Kernel time behind matmul_flops_total (a launch's time "
                    "shared among its requests by FLOPs); rate(flops) / "
                    "rate(kernel_seconds) / 1e12 gives kernel TFLOPS")
              .Register(*registry_)),
      batch_size_family_(prometheus::BuildHistogram()
                             .Name("matmul_batch_size")
                             .Help("Requests that shared one launch")
                             .Register(*registry_)),
      launch_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_launch_duration_seconds")
              .Help("Wall time of one launch, from its start on a worker "
                    "to its end noticed: staging, copies, kernel and "
                    "synchronisation (the kernel alone is "
                    "matmul_kernel_duration_seconds)")
              .Register(*registry_)),
      worker_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_launch_worker_duration_seconds")
              .Help("Time one launch held its worker: until it was queued "
                    "on the GPU where the daemon notices its end on another "
                    "thread (launches on a GPU), until it was "
                    "complete otherwise")
              .Register(*registry_)),
      answer_duration_family_(
          prometheus::BuildHistogram()
              .Name("matmul_answer_duration_seconds")
              .Help("Time from the end of a launch to the last of its "
                    "requests answered (a batch's answers go out one after "
                    "another)")
              .Register(*registry_)),
      launch_stage_family_(
          prometheus::BuildHistogram()
              .Name("matmul_launch_stage_seconds")
              .Help("Host time of one step of a launch on its worker "
                    "(stage: validate, await_stream, slot, stream_wait, "
                    "pointer_arrays, stack_in, gather, kernel, scatter, "
                    "stack_out, signal, end_mark, restore_device), for "
                    "launches the CUDA backend queues and watches; what a "
                    "launch's matmul_launch_worker_duration_seconds holds "
                    "beyond their sum is the daemon's own")
              .Register(*registry_)),
      device_info_family_(
          prometheus::BuildGauge()
              .Name("matmul_device_info")
              .Help("Always 1; maps the device label to the GPU's UUID (the "
                    "DCGM exporter's UUID label), name, compute capability "
                    "and SM count (cores on the CPU)")
              .Register(*registry_)),
      mps_client_family_(
          prometheus::BuildGauge()
              .Name("matmul_mps_client")
              .Help("1 when the daemon's CUDA context on the device is a "
                    "client of an MPS server (NVIDIA's Multi-Process "
                    "Service: kernels of all its clients share the GPU "
                    "without context switches), else 0")
              .Register(*registry_)),
      memory_used_family_(
          prometheus::BuildGauge()
              .Name("matmul_device_memory_used_bytes")
              .Help("Device memory in use, all processes (cudaMemGetInfo; "
                    "the host's memory for device=\"cpu\")")
              .Register(*registry_)),
      memory_total_family_(
          prometheus::BuildGauge()
              .Name("matmul_device_memory_total_bytes")
              .Help("Device memory in all (cudaMemGetInfo; the host's memory "
                    "for device=\"cpu\")")
              .Register(*registry_)),
      regions_family_(prometheus::BuildGauge()
                          .Name("matmul_regions")
                          .Help("Regions registered, by kind")
                          .Register(*registry_)),
      region_bytes_family_(prometheus::BuildGauge()
                               .Name("matmul_region_bytes")
                               .Help("Bytes of the regions registered, by "
                                     "kind")
                               .Register(*registry_)),
      completion_thread_family_(
          prometheus::BuildCounter()
              .Name("matmul_completion_thread_seconds_total")
              .Help("Time the thread that notices a GPU's launches end "
                    "spent polling for their ends (work=polling) and "
                    "completing them, answers included (work=completing); "
                    "the two rates summing near 1 mean that thread is "
                    "saturated")
              .Register(*registry_)) {
  auto gauge = [this](const char* name, const char* help) {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Register(*registry_)
                .Add({});
  };
  queue_depth_ =
      gauge("matmul_queue_depth", "Requests accepted and waiting to run");
  queue_capacity_ =
      gauge("matmul_queue_capacity",
            "Requests the queues admit before refusing with "
            "RESOURCE_EXHAUSTED (--max_queue_size per device, summed)");
  in_flight_ = gauge("matmul_requests_in_flight",
                     "Matmul requests accepted and not yet answered");
  rings_attached_ = gauge("matmul_rings_attached",
                          "Shared-memory request rings being polled");
  serving_ = gauge("matmul_serving",
                   "1 while the health service says SERVING, else 0");
  sessions_ = gauge("matmul_sessions", "Client sessions open");
  tuned_shapes_ = gauge("matmul_tuned_shapes",
                        "Shapes whose kernel choice has been timed (summed "
                        "over devices)");
  process_resident_bytes_ =
      gauge("process_resident_memory_bytes", "Resident memory size in bytes");
  process_open_fds_ = gauge("process_open_fds", "Open file descriptors");
  process_start_time_ =
      gauge("process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds");
  prometheus::Family<prometheus::Counter>& tunings =
      prometheus::BuildCounter()
          .Name("matmul_tuning_total")
          .Help(
              "Background kernel tunings finished, by outcome (summed "
              "over devices)")
          .Register(*registry_);
  tunings_succeeded_ = &tunings.Add({{"outcome", "succeeded"}});
  tunings_failed_ = &tunings.Add({{"outcome", "failed"}});
  process_cpu_seconds_ =
      &prometheus::BuildCounter()
           .Name("process_cpu_seconds_total")
           .Help("Total user and system CPU time spent in seconds")
           .Register(*registry_)
           .Add({});
  // The kinds Region::kind() names get rows from the start, so that a
  // dashboard shows 0 rather than no data before the first registration.
  for (const char* kind : {"shm", "cuda_ipc", "cuda_vmm", "shared"}) {
    const prometheus::Labels labels = {{"kind", kind}};
    region_kinds_.emplace(kind,
                          std::make_pair(&regions_family_.Add(labels),
                                         &region_bytes_family_.Add(labels)));
  }
}

std::string ServerMetrics::DeviceLabel(const GemmBackend& backend) {
  const int device = backend.cuda_device();
  return device >= 0 ? absl::StrCat(device) : "cpu";
}

void ServerMetrics::AddDevice(const std::string& device, const DeviceInfo& info,
                              std::function<BackendGauges()> gauges) {
  {
    absl::MutexLock lock(&mu_);
    if (devices_.contains(device)) return;
    FindDevice(device);
  }
  device_info_family_
      .Add({{"device", device},
            {"uuid", info.uuid},
            {"name", info.name},
            {"compute_capability", info.compute_capability},
            {"sm_count", absl::StrCat(info.multiprocessors)}})
      .Set(1);
  mps_client_family_.Add({{"device", device}}).Set(info.mps_client ? 1 : 0);
  DeviceSource source{&memory_used_family_.Add({{"device", device}}),
                      &memory_total_family_.Add({{"device", device}}),
                      std::move(gauges)};
  if (!info.compute_capability.empty()) {  // a GPU
    source.completion_polling = &completion_thread_family_.Add(
        {{"device", device}, {"work", "polling"}});
    source.completion_completing = &completion_thread_family_.Add(
        {{"device", device}, {"work", "completing"}});
  }
  absl::MutexLock lock(&source_mu_);
  device_sources_.push_back(std::move(source));
}

std::string ServerMetrics::ShapeLabel(const std::string& shape) {
  if (shape.empty()) return "invalid";
  if (shape_labels_.contains(shape)) return shape;
  if (static_cast<int>(shape_labels_.size()) >= max_shapes_) return "other";
  shape_labels_.insert(shape);
  return shape;
}

ServerMetrics::DeviceSeries* ServerMetrics::FindDevice(
    const std::string& device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return &it->second;
  // A device recorded without AddDevice still gets its series (with no
  // matmul_device_info row), so that nothing it did goes uncounted.
  const prometheus::Labels labels = {{"device", device}};
  DeviceSeries series{
      &batch_size_family_.Add(labels, BatchBuckets()),
      &launch_duration_family_.Add(labels, FineDurationBuckets()),
      &worker_duration_family_.Add(labels, FineDurationBuckets()),
      &answer_duration_family_.Add(labels, FineDurationBuckets()),
      {},
      {},
      {}};
  return &devices_.emplace(device, std::move(series)).first->second;
}

ServerMetrics::ShapeSeries& ServerMetrics::SeriesFor(
    DeviceSeries& device_series, const std::string& device,
    const std::string& shape_label) {
  auto it = device_series.shapes.find(shape_label);
  if (it != device_series.shapes.end()) return it->second;
  const prometheus::Labels labels = {{"shape", shape_label},
                                     {"device", device}};
  ShapeSeries series{&request_duration_family_.Add(labels, DurationBuckets()),
                     &queue_duration_family_.Add(labels, DurationBuckets()),
                     &kernel_duration_family_.Add(labels, DurationBuckets())};
  return device_series.shapes.emplace(shape_label, series).first->second;
}

ServerMetrics::KernelSeries& ServerMetrics::KernelSeriesFor(
    DeviceSeries& device_series, const std::string& device,
    const std::string& shape_label, const std::string& kernel) {
  const std::string key = absl::StrCat(shape_label, "|", kernel);
  auto it = device_series.kernels.find(key);
  if (it != device_series.kernels.end()) return it->second;
  const prometheus::Labels labels = {
      {"shape", shape_label}, {"kernel", kernel}, {"device", device}};
  KernelSeries series{&flops_family_.Add(labels),
                      &kernel_seconds_family_.Add(labels)};
  return device_series.kernels.emplace(key, series).first->second;
}

void ServerMetrics::RecordRequests(const std::string& device,
                                   absl::Span<const RequestRecord> records) {
  absl::MutexLock lock(&mu_);
  DeviceSeries& device_series = *FindDevice(device);
  for (const RequestRecord& record : records) {
    const std::string shape = ShapeLabel(record.shape);
    ShapeSeries& series = SeriesFor(device_series, device, shape);
    if (record.observe_latency) {
      series.request_duration->Observe(record.total_seconds);
      series.queue_duration->Observe(record.queue_seconds);
    }
    if (!record.observe_kernel) continue;
    KernelSeries& kernel =
        KernelSeriesFor(device_series, device, shape, record.kernel);
    kernel.flops->Increment(record.flops);
    kernel.kernel_seconds->Increment(record.kernel_seconds);
  }
}

void ServerMetrics::RecordLaunch(const std::string& device,
                                 const std::string& shape,
                                 const LaunchRecord& launch) {
  absl::MutexLock lock(&mu_);
  DeviceSeries& device_series = *FindDevice(device);
  device_series.batch_size->Observe(launch.batch_size);
  device_series.launch_duration->Observe(launch.launch_seconds);
  device_series.answer_duration->Observe(launch.answer_seconds);
  SeriesFor(device_series, device, ShapeLabel(shape))
      .kernel_duration->Observe(launch.kernel_seconds);
  for (const LaunchStage& stage : launch.stages) {
    prometheus::Histogram*& series = device_series.stages[stage.name];
    if (series == nullptr) {
      series = &launch_stage_family_.Add(
          {{"device", device}, {"stage", stage.name}}, FineDurationBuckets());
    }
    series->Observe(stage.seconds);
  }
}

void ServerMetrics::RecordWorkerSeconds(const std::string& device,
                                        double seconds) {
  absl::MutexLock lock(&mu_);
  FindDevice(device)->worker_duration->Observe(seconds);
}

void ServerMetrics::CountRequest(const std::string& shape,
                                 absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  const std::string label = ShapeLabel(shape);
  const std::string code_name =
      absl::AsciiStrToLower(absl::StatusCodeToString(code));
  const std::string key = absl::StrCat(label, "|", code_name);
  auto it = requests_.find(key);
  if (it == requests_.end()) {
    it = requests_
             .emplace(key, &requests_family_.Add(
                               {{"shape", label}, {"code", code_name}}))
             .first;
  }
  it->second->Increment();
}

void ServerMetrics::SetQueueDepthSource(std::function<int()> source) {
  absl::MutexLock lock(&source_mu_);
  queue_depth_source_ = std::move(source);
}

void ServerMetrics::SetRegionSource(std::function<RegionGauges()> source) {
  absl::MutexLock lock(&source_mu_);
  region_source_ = std::move(source);
}

void ServerMetrics::SetRequestsInFlightSource(
    std::function<std::string()> source) {
  absl::MutexLock lock(&source_mu_);
  requests_in_flight_source_ = std::move(source);
}

std::string ServerMetrics::RenderRequestsInFlight() const {
  absl::MutexLock lock(&source_mu_);
  if (!requests_in_flight_source_) return "this daemon traces no requests\n";
  return requests_in_flight_source_();
}

void ServerMetrics::ClearSources() {
  absl::MutexLock lock(&source_mu_);
  queue_depth_source_ = nullptr;
  requests_in_flight_source_ = nullptr;
  region_source_ = nullptr;
  for (DeviceSource& source : device_sources_) source.gauges = nullptr;
}

void ServerMetrics::UpdateFromSources() const {
  absl::MutexLock lock(&source_mu_);
  if (queue_depth_source_) queue_depth_->Set(queue_depth_source_());
  if (region_source_) {
    const RegionGauges regions = region_source_();
    sessions_->Set(regions.sessions);
    for (auto& [kind, rows] : region_kinds_) {
      rows.first->Set(0);
      rows.second->Set(0);
    }
    for (const RegionGauges::Kind& kind : regions.kinds) {
      auto it = region_kinds_.find(kind.kind);
      if (it == region_kinds_.end()) {
        const prometheus::Labels labels = {{"kind", kind.kind}};
        it = region_kinds_
                 .emplace(kind.kind,
                          std::make_pair(&regions_family_.Add(labels),
                                         &region_bytes_family_.Add(labels)))
                 .first;
      }
      it->second.first->Set(kind.regions);
      it->second.second->Set(static_cast<double>(kind.bytes));
    }
  }
  int64_t tuned_shapes = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  for (const DeviceSource& source : device_sources_) {
    if (!source.gauges) continue;
    const BackendGauges gauges = source.gauges();
    int64_t used = gauges.memory_used_bytes;
    int64_t total = gauges.memory_total_bytes;
    if (total >= 0 || ReadHostMemory(used, total)) {
      source.memory_used->Set(static_cast<double>(used));
      source.memory_total->Set(static_cast<double>(total));
    }
    if (source.completion_polling != nullptr &&
        gauges.completion_polling_seconds >= 0) {
      AdvanceTo(*source.completion_polling, gauges.completion_polling_seconds);
      AdvanceTo(*source.completion_completing,
                gauges.completion_completing_seconds);
    }
    tuned_shapes += std::max<int64_t>(gauges.tuned_shapes, 0);
    succeeded += std::max<int64_t>(gauges.tunings_succeeded, 0);
    failed += std::max<int64_t>(gauges.tunings_failed, 0);
  }
  tuned_shapes_->Set(static_cast<double>(tuned_shapes));
  AdvanceTo(*tunings_succeeded_, static_cast<double>(succeeded));
  AdvanceTo(*tunings_failed_, static_cast<double>(failed));

  const ProcessStats process = ReadProcessStats();
  if (process.cpu_seconds >= 0) {
    AdvanceTo(*process_cpu_seconds_, process.cpu_seconds);
  }
  if (process.resident_bytes >= 0) {
    process_resident_bytes_->Set(process.resident_bytes);
  }
  if (process.open_fds >= 0) process_open_fds_->Set(process.open_fds);
  if (process.start_time_seconds >= 0) {
    process_start_time_->Set(process.start_time_seconds);
  }
}

std::string ServerMetrics::Scrape() const {
  UpdateFromSources();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace matmul
