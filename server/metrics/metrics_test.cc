#include "server/metrics/metrics.h"

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/testing/test_exposition.h"

namespace matmul {
namespace {

BuildInfo TestBuild() {
  return {.version = "1.2.3",
          .git_commit = "abcdef012345",
          .cuda_runtime = "13.0",
          .cublas = "13.1.0"};
}

DeviceInfo TestGpu() {
  DeviceInfo info;
  info.name = "NVIDIA GB10";
  info.compute_capability = "12.1";
  info.multiprocessors = 48;
  info.uuid = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
  return info;
}

TEST(ServerMetricsTest, RejectsNoShapes) {
  EXPECT_EQ(ServerMetrics::Create("", 0, TestBuild()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServerMetricsTest, EveryFamilyHasItsType) {
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  (*metrics)->AddDevice("0", TestGpu(), [] { return BackendGauges{}; });
  (*metrics)->RecordRequests("0", {{.shape = "8x8x8:NN", .kernel = "k"}});
  const LaunchStage stages[] = {{"slot", 1e-6}};
  (*metrics)->RecordLaunch("0", "8x8x8:NN", {.stages = stages});
  (*metrics)->CountRequest("8x8x8:NN", absl::StatusCode::kOk);
  const Exposition exposition = Parse((*metrics)->Scrape());
  const std::map<std::string, std::string> expected = {
      {"matmul_requests_total", "counter"},
      {"matmul_flops_total", "counter"},
      {"matmul_kernel_seconds_total", "counter"},
      {"matmul_tuning_total", "counter"},
      {"process_cpu_seconds_total", "counter"},
      {"matmul_completion_thread_seconds_total", "counter"},
      {"matmul_request_duration_seconds", "histogram"},
      {"matmul_queue_duration_seconds", "histogram"},
      {"matmul_kernel_duration_seconds", "histogram"},
      {"matmul_batch_size", "histogram"},
      {"matmul_launch_duration_seconds", "histogram"},
      {"matmul_launch_worker_duration_seconds", "histogram"},
      {"matmul_answer_duration_seconds", "histogram"},
      {"matmul_launch_stage_seconds", "histogram"},
      {"matmul_build_info", "gauge"},
      {"matmul_device_info", "gauge"},
      {"matmul_mps_client", "gauge"},
      {"matmul_device_memory_used_bytes", "gauge"},
      {"matmul_device_memory_total_bytes", "gauge"},
      {"matmul_regions", "gauge"},
      {"matmul_region_bytes", "gauge"},
      {"matmul_sessions", "gauge"},
      {"matmul_queue_depth", "gauge"},
      {"matmul_queue_capacity", "gauge"},
      {"matmul_requests_in_flight", "gauge"},
      {"matmul_rings_attached", "gauge"},
      {"matmul_serving", "gauge"},
      {"matmul_tuned_shapes", "gauge"},
      {"process_resident_memory_bytes", "gauge"},
      {"process_open_fds", "gauge"},
      {"process_start_time_seconds", "gauge"},
  };
  for (const auto& [name, type] : expected) {
    auto it = exposition.types.find(name);
    ASSERT_NE(it, exposition.types.end()) << name << " is not exported";
    EXPECT_EQ(it->second, type) << name;
  }
  // Nothing exported that this list (and so the README's table) lacks.
  for (const auto& [name, type] : exposition.types) {
    EXPECT_TRUE(expected.contains(name)) << name << " is not in the list";
  }
}

TEST(ServerMetricsTest, LaunchesCountPerShapeKernelAndDevice) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> flops(1e6, 1e12);
  std::uniform_real_distribution<double> seconds(1e-5, 1e-1);
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok());
  ServerMetrics& m = **metrics;
  m.AddDevice("0", TestGpu(), [] { return BackendGauges{}; });
  m.AddDevice("1", TestGpu(), [] { return BackendGauges{}; });

  // Two launches of one shape on device 0 with two kernels, one on device 1.
  std::map<std::string, double> want_flops;
  std::map<std::string, double> want_seconds;
  std::map<std::string, double> want_stage_seconds;  // by "device|stage"
  const std::vector<std::pair<std::string, std::string>> launches = {
      {"0", "mma_a"}, {"0", "mma_a"}, {"0", "cublaslt_algo0"}, {"1", "mma_a"}};
  for (const auto& [device, kernel] : launches) {
    std::vector<RequestRecord> records;
    for (int i = 0; i < 3; ++i) {
      records.push_back({.shape = "64x128x256:NT",
                         .kernel = kernel,
                         .flops = flops(rng),
                         .kernel_seconds = seconds(rng),
                         .queue_seconds = seconds(rng),
                         .total_seconds = seconds(rng)});
      const std::string key = absl::StrCat(device, "|", kernel);
      want_flops[key] += records.back().flops;
      want_seconds[key] += records.back().kernel_seconds;
    }
    m.RecordRequests(device, records);
    const LaunchStage stages[] = {{"slot", seconds(rng)},
                                  {"kernel", seconds(rng)}};
    want_stage_seconds[absl::StrCat(device, "|slot")] += stages[0].seconds;
    want_stage_seconds[absl::StrCat(device, "|kernel")] += stages[1].seconds;
    m.RecordLaunch(device, "64x128x256:NT",
                   {.batch_size = 3,
                    .kernel_seconds = seconds(rng),
                    .launch_seconds = seconds(rng),
                    .answer_seconds = seconds(rng),
                    .stages = stages});
  }
  const Exposition e = Parse(m.Scrape());
  for (const auto& [key, value] : want_flops) {
    const std::vector<std::string> parts = absl::StrSplit(key, '|');
    const std::string labels =
        absl::StrCat("{device=\"", parts[0], "\",kernel=\"", parts[1],
                     "\",shape=\"64x128x256:NT\"}");
    EXPECT_NEAR(Sample(e, "matmul_flops_total" + labels), value, value * 1e-9)
        << labels;
    EXPECT_NEAR(Sample(e, "matmul_kernel_seconds_total" + labels),
                want_seconds[key], want_seconds[key] * 1e-9)
        << labels;
  }
  // Each stage a series per device, observed once per launch.
  for (const auto& [key, value] : want_stage_seconds) {
    const std::vector<std::string> parts = absl::StrSplit(key, '|');
    const std::string labels =
        absl::StrCat("{device=\"", parts[0], "\",stage=\"", parts[1], "\"}");
    EXPECT_NEAR(Sample(e, "matmul_launch_stage_seconds_sum" + labels), value,
                value * 1e-9)
        << labels;
    EXPECT_EQ(Sample(e, "matmul_launch_stage_seconds_count" + labels),
              parts[0] == "0" ? 3 : 1)
        << labels;
  }
  EXPECT_EQ(Sample(e, "matmul_batch_size_count{device=\"0\"}"), 3);
  EXPECT_EQ(Sample(e, "matmul_batch_size_sum{device=\"0\"}"), 9);
  EXPECT_EQ(Sample(e, "matmul_batch_size_count{device=\"1\"}"), 1);
  EXPECT_EQ(Sample(e, "matmul_launch_duration_seconds_count{device=\"1\"}"), 1);
  EXPECT_EQ(Sample(e, "matmul_answer_duration_seconds_count{device=\"0\"}"), 3);
  EXPECT_EQ(Sample(e,
                   "matmul_kernel_duration_seconds_count{device=\"0\","
                   "shape=\"64x128x256:NT\"}"),
            3);
  EXPECT_EQ(Sample(e,
                   "matmul_request_duration_seconds_count{device=\"0\","
                   "shape=\"64x128x256:NT\"}"),
            9);
  EXPECT_EQ(Sample(e,
                   "matmul_queue_duration_seconds_count{device=\"1\","
                   "shape=\"64x128x256:NT\"}"),
            3);
}

TEST(ServerMetricsTest, RequestsCountByShapeAndCodeWithBoundedShapes) {
  auto metrics = ServerMetrics::Create("", 2, TestBuild());
  ASSERT_TRUE(metrics.ok());
  ServerMetrics& m = **metrics;
  m.CountRequest("1x2x3:NN", absl::StatusCode::kOk);
  m.CountRequest("1x2x3:NN", absl::StatusCode::kOk);
  m.CountRequest("1x2x3:NN", absl::StatusCode::kResourceExhausted);
  m.CountRequest("4x5x6:NN", absl::StatusCode::kNotFound);
  // The third and fourth distinct shapes share "other"; a malformed
  // request counts as "invalid" without using up a shape.
  m.CountRequest("7x8x9:NN", absl::StatusCode::kOk);
  m.CountRequest("9x9x9:TT", absl::StatusCode::kOk);
  m.CountRequest("", absl::StatusCode::kInvalidArgument);
  const Exposition e = Parse(m.Scrape());
  EXPECT_EQ(Sample(e, "matmul_requests_total{code=\"ok\",shape=\"1x2x3:NN\"}"),
            2);
  EXPECT_EQ(Sample(e,
                   "matmul_requests_total{code=\"resource_exhausted\","
                   "shape=\"1x2x3:NN\"}"),
            1);
  EXPECT_EQ(
      Sample(e, "matmul_requests_total{code=\"not_found\",shape=\"4x5x6:NN\"}"),
      1);
  EXPECT_EQ(Sample(e, "matmul_requests_total{code=\"ok\",shape=\"other\"}"), 2);
  EXPECT_EQ(Sample(e,
                   "matmul_requests_total{code=\"invalid_argument\","
                   "shape=\"invalid\"}"),
            1);
  // Rows exist only once used.
  EXPECT_EQ(Sample(e, "matmul_requests_total{code=\"ok\",shape=\"4x5x6:NN\"}"),
            -1);
}

TEST(ServerMetricsTest, InfoRowsCarryTheirLabels) {
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok());
  int first_reads = 0;
  int second_reads = 0;
  (*metrics)->AddDevice("0", TestGpu(), [&] {
    ++first_reads;
    return BackendGauges{};
  });
  // A second lane on the same device shares its rows and source.
  DeviceInfo other = TestGpu();
  other.name = "another name";
  (*metrics)->AddDevice("0", other, [&] {
    ++second_reads;
    return BackendGauges{};
  });
  const Exposition e = Parse((*metrics)->Scrape());
  EXPECT_EQ(first_reads, 1);
  EXPECT_EQ(second_reads, 0);
  int info_rows = 0;
  for (const auto& [series, value] : e.samples) {
    info_rows += absl::StartsWith(series, "matmul_device_info{");
  }
  EXPECT_EQ(info_rows, 1);
  EXPECT_EQ(Sample(e,
                   "matmul_device_info{compute_capability=\"12.1\",device="
                   "\"0\",name=\"NVIDIA GB10\",sm_count=\"48\",uuid=\"GPU-"
                   "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\"}"),
            1);
  EXPECT_EQ(Sample(e,
                   "matmul_build_info{cublas=\"13.1.0\",cuda_runtime=\"13.0\","
                   "git_commit=\"abcdef012345\",version=\"1.2.3\"}"),
            1);
}

TEST(ServerMetricsTest, SourcesAreReadAtScrapeTime) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> bytes(1, int64_t{1} << 40);
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok());
  ServerMetrics& m = **metrics;
  BackendGauges gauges{.memory_used_bytes = bytes(rng),
                       .memory_total_bytes = bytes(rng),
                       .tuned_shapes = 3,
                       .tunings_succeeded = 4,
                       .tunings_failed = 1,
                       .completion_polling_seconds = 0.25,
                       .completion_completing_seconds = 0.5};
  std::atomic<int> reads{0};
  m.AddDevice("0", TestGpu(), [&] {
    ++reads;
    return gauges;
  });
  const int depth = static_cast<int>(bytes(rng) % 1000);
  m.SetQueueDepthSource([depth] { return depth; });
  RegionGauges regions{
      .sessions = 5,
      .kinds = {{"shm", 2, bytes(rng)}, {"cuda_vmm", 1, bytes(rng)}}};
  m.SetRegionSource([&] { return regions; });
  m.SetServing(true);

  Exposition e = Parse(m.Scrape());
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(Sample(e, "matmul_queue_depth"), depth);
  EXPECT_EQ(Sample(e, "matmul_serving"), 1);
  EXPECT_EQ(Sample(e, "matmul_sessions"), 5);
  EXPECT_EQ(Sample(e, "matmul_regions{kind=\"shm\"}"), 2);
  EXPECT_EQ(Sample(e, "matmul_region_bytes{kind=\"shm\"}"),
            static_cast<double>(regions.kinds[0].bytes));
  EXPECT_EQ(Sample(e, "matmul_regions{kind=\"cuda_vmm\"}"), 1);
  // A kind with no regions shows 0, not nothing.
  EXPECT_EQ(Sample(e, "matmul_regions{kind=\"cuda_ipc\"}"), 0);
  EXPECT_EQ(Sample(e, "matmul_regions{kind=\"shared\"}"), 0);
  EXPECT_EQ(Sample(e, "matmul_device_memory_used_bytes{device=\"0\"}"),
            static_cast<double>(gauges.memory_used_bytes));
  EXPECT_EQ(Sample(e, "matmul_device_memory_total_bytes{device=\"0\"}"),
            static_cast<double>(gauges.memory_total_bytes));
  EXPECT_EQ(Sample(e, "matmul_tuned_shapes"), 3);
  EXPECT_EQ(Sample(e, "matmul_tuning_total{outcome=\"succeeded\"}"), 4);
  EXPECT_EQ(Sample(e, "matmul_tuning_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(Sample(e,
                   "matmul_completion_thread_seconds_total{device=\"0\","
                   "work=\"polling\"}"),
            0.25);
  EXPECT_EQ(Sample(e,
                   "matmul_completion_thread_seconds_total{device=\"0\","
                   "work=\"completing\"}"),
            0.5);

  // The next scrape follows the sources; the shm regions went away.
  gauges.tunings_succeeded = 9;
  gauges.completion_completing_seconds = 1.5;
  regions.kinds = {{"cuda_vmm", 2, 100}};
  m.SetServing(false);
  e = Parse(m.Scrape());
  EXPECT_EQ(Sample(e, "matmul_tuning_total{outcome=\"succeeded\"}"), 9);
  EXPECT_EQ(Sample(e,
                   "matmul_completion_thread_seconds_total{device=\"0\","
                   "work=\"completing\"}"),
            1.5);
  EXPECT_EQ(Sample(e, "matmul_regions{kind=\"shm\"}"), 0);
  EXPECT_EQ(Sample(e, "matmul_region_bytes{kind=\"shm\"}"), 0);
  EXPECT_EQ(Sample(e, "matmul_region_bytes{kind=\"cuda_vmm\"}"), 100);
  EXPECT_EQ(Sample(e, "matmul_serving"), 0);

  // Once cleared, no source is called again.
  m.ClearSources();
  m.Scrape();
  EXPECT_EQ(reads.load(), 2);
}

TEST(ServerMetricsTest, ACpuDeviceReportsTheHostsMemory) {
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok());
  DeviceInfo cpu;
  cpu.name = "cpu";
  (*metrics)->AddDevice("cpu", cpu, [] { return BackendGauges{}; });
  const Exposition e = Parse((*metrics)->Scrape());
  const double used =
      Sample(e, "matmul_device_memory_used_bytes{device=\"cpu\"}");
  const double total =
      Sample(e, "matmul_device_memory_total_bytes{device=\"cpu\"}");
  EXPECT_GT(used, 0);
  EXPECT_GT(total, used);
  EXPECT_EQ(Sample(e, "matmul_tuned_shapes"), 0);
  // The CPU backend completes on its callers: no completion thread.
  EXPECT_FALSE(e.samples.contains(
      "matmul_completion_thread_seconds_total{device=\"cpu\","
      "work=\"polling\"}"));
}

TEST(ServerMetricsTest, ProcessFamiliesComeFromProc) {
  auto metrics = ServerMetrics::Create("", 8, TestBuild());
  ASSERT_TRUE(metrics.ok());
  // Burn some CPU so the counter has something to show.
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + i * 1e-9;
  const Exposition e = Parse((*metrics)->Scrape());
  EXPECT_GT(Sample(e, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(e, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(Sample(e, "process_open_fds"), 3);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const double started = Sample(e, "process_start_time_seconds");
  EXPECT_LE(started, now + 1);
  EXPECT_GT(started, now - 24 * 3600);
}

}  // namespace
}  // namespace matmul
