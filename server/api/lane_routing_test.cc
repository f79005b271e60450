// Which device lane a product runs on, with two fake GPUs behind one
// service (MatmulServiceImpl::LaneFor): region operands go to the GPU
// their regions are on, inline products to the least loaded lane, and
// what cannot run on one of the daemon's GPUs is refused. The response's
// device_index and the per-device metrics say where each product ran.
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/api/matmul_service.h"
#include "server/execution/testing/test_lane.h"
#include "server/metrics/testing/test_exposition.h"
#include "server/regions/testing/test_region.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

const PeerCredentials kOwner{.pid = 41, .uid = 1000, .gid = 1000};

// A GPU as the service sees one (a CUDA ordinal), computing on the CPU:
// its "device" pointers are host memory (TestRegion's device_visible
// regions). While `gate` is set, launches wait until it is notified.
class FakeGpuBackend final : public GemmBackend {
 public:
  explicit FakeGpuBackend(int device) : device_(device) {}

  std::string name() const override { return "fake-gpu"; }
  std::vector<DeviceInfo> devices() const override {
    return {{.name = absl::StrCat("fake GPU ", device_),
             .compute_capability = "9.0"}};
  }
  int cuda_device() const override { return device_; }
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override {
    return Run(problem);
  }
  absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem) override {
    return Run(problem);
  }

  std::unique_ptr<absl::Notification> gate;
  std::atomic<int> launches = 0;

 private:
  absl::StatusOr<GemmRunInfo> Run(const GemmProblem& problem) {
    if (gate) gate->WaitForNotification();
    ++launches;
    return cpu_->RunHost(problem);
  }

  const int device_;
  std::unique_ptr<GemmBackend> cpu_ = CpuBackend::Create(1);
};

struct Answer {
  v1::MatmulRequest request;
  // The same product with every operand inline: what CheckResponse reads.
  v1::MatmulRequest inline_request;
  v1::MatmulResponse response;
  absl::Notification done;
  absl::Status status;
};

class LaneRoutingTest : public ::testing::Test {
 protected:
  static constexpr int kDevices = 2;

  LaneRoutingTest()
      : rng_(std::random_device{}()),
        metrics_(*ServerMetrics::Create("", 16, {})),
        registry_({}),
        session_(registry_.OpenSession("routing", kOwner)) {
    for (int device = 0; device < kDevices; ++device) {
      auto backend = std::make_unique<FakeGpuBackend>(device);
      backends_.push_back(backend.get());
      metrics_->AddDevice(ServerMetrics::DeviceLabel(*backend),
                          backend->devices().front(),
                          [] { return BackendGauges{}; });
      lanes_.push_back(MakeTestLane(std::move(backend), *metrics_, device));
    }
    service_ = std::make_unique<MatmulServiceImpl>(
        lanes_, *metrics_, registry_, in_flight_,
        MatmulServiceOptions{.admission = {.max_in_flight_per_client = 8},
                             .max_concurrent_requests = 64,
                             .shm = {.prefix = "matmul-"}});
  }
  ~LaneRoutingTest() override {
    for (FakeGpuBackend* backend : backends_) {
      if (backend->gate && !backend->gate->HasBeenNotified()) {
        backend->gate->Notify();
      }
    }
    for (DeviceLane& lane : lanes_) lane.executor->Shutdown();
    metrics_->ClearSources();
  }

  // A random inline m x n x k product.
  std::unique_ptr<Answer> InlineProduct(int64_t m, int64_t n, int64_t k) {
    auto answer = std::make_unique<Answer>();
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest({.m = m, .n = n, .k = k}, rng_);
    EXPECT_TRUE(request.ok()) << request.status();
    answer->inline_request = *request;
    answer->request = *std::move(request);
    return answer;
  }

  // A registered region on `device` (-1: host memory only).
  std::shared_ptr<TestRegion> AddRegion(int device, std::string& id) {
    auto region = MakeTestRegion({.size = 1 << 16,
                                  .object = absl::StrCat("region", regions_++),
                                  .cuda_device = device,
                                  .host_visible = true,
                                  .device_visible = true});
    absl::StatusOr<std::string> added = registry_.Add(session_, kOwner, region);
    EXPECT_TRUE(added.ok()) << added.status();
    id = added.value_or("");
    return region;
  }

  // A random product whose A sits in `a_region` and B in `b_region` (their
  // bytes copied there), C inline.
  std::unique_ptr<Answer> RegionProduct(int64_t m, int64_t n, int64_t k,
                                        TestRegion& a_region,
                                        const std::string& a_id,
                                        TestRegion& b_region,
                                        const std::string& b_id) {
    std::unique_ptr<Answer> answer = InlineProduct(m, n, k);
    v1::MatmulRequest& request = answer->request;
    request.set_session_id(session_);
    auto move_to = [](v1::Tensor& tensor, TestRegion& region,
                      const std::string& id, uint64_t offset) {
      const std::string& bytes = tensor.inline_data();
      std::memcpy(region.data() + offset, bytes.data(), bytes.size());
      tensor.clear_inline_data();
      tensor.mutable_region()->set_region_id(id);
      tensor.mutable_region()->set_offset_bytes(offset);
    };
    move_to(*request.mutable_a(), a_region, a_id, 0);
    move_to(*request.mutable_b(), b_region, b_id, 1 << 15);
    return answer;
  }

  void Submit(Answer& answer, const std::string& client) {
    ProductSubmitter& submitter = service_->admission();
    submitter.Submit({.caller = kOwner, .client_key = client}, &answer.request,
                     &answer.response, [&answer](absl::Status status) {
                       answer.status = std::move(status);
                       answer.done.Notify();
                     });
  }

  // Waits for `answer`, which must be right and have run on `device`.
  void ExpectRanOn(Answer& answer, int device) {
    ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(answer.status.ok()) << answer.status;
    EXPECT_EQ(answer.response.device_index(), device);
    absl::StatusOr<double> error =
        CheckResponse(answer.inline_request, answer.response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }

  // Launches on `device`, which its metrics must count too (a launch is
  // recorded there once all its products are answered).
  int Launches(int device) const {
    const int launches = backends_[device]->launches;
    const std::string series = absl::StrCat(
        "matmul_launch_duration_seconds_count{device=\"", device, "\"}");
    auto counted = [&] { return Sample(Parse(metrics_->Scrape()), series); };
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (counted() != launches && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(counted(), launches) << "device " << device;
    return launches;
  }

  std::mt19937_64 rng_;
  std::unique_ptr<ServerMetrics> metrics_;
  RegionRegistry registry_;
  const std::string session_;
  int regions_ = 0;  // names their memory apart
  std::vector<FakeGpuBackend*> backends_;
  InFlightRequests in_flight_;
  std::vector<DeviceLane> lanes_;
  std::unique_ptr<MatmulServiceImpl> service_;
};

TEST_F(LaneRoutingTest, RegionOperandsRunOnTheGpuTheyAreOn) {
  std::string on_0, on_1;
  std::shared_ptr<TestRegion> region_0 = AddRegion(0, on_0);
  std::shared_ptr<TestRegion> region_1 = AddRegion(1, on_1);
  const int64_t m = 1 + rng_() % 30, n = 1 + rng_() % 30, k = 1 + rng_() % 30;

  std::unique_ptr<Answer> second =
      RegionProduct(m, n, k, *region_1, on_1, *region_1, on_1);
  Submit(*second, "a");
  ExpectRanOn(*second, 1);
  EXPECT_EQ(Launches(1), 1);
  EXPECT_EQ(Launches(0), 0);

  std::unique_ptr<Answer> first =
      RegionProduct(m, n, k, *region_0, on_0, *region_0, on_0);
  Submit(*first, "a");
  ExpectRanOn(*first, 0);
  EXPECT_EQ(Launches(0), 1);
  EXPECT_EQ(Launches(1), 1);
}

TEST_F(LaneRoutingTest, AGpuRegionWinsOverAHostRegion) {
  std::string on_host, on_1;
  std::shared_ptr<TestRegion> host = AddRegion(-1, on_host);
  std::shared_ptr<TestRegion> region_1 = AddRegion(1, on_1);
  std::unique_ptr<Answer> answer =
      RegionProduct(5, 7, 9, *host, on_host, *region_1, on_1);
  Submit(*answer, "a");
  ExpectRanOn(*answer, 1);
}

TEST_F(LaneRoutingTest, WhatNoGpuOfTheDaemonCanRunIsRefused) {
  std::string on_0, on_1, on_2;
  std::shared_ptr<TestRegion> region_0 = AddRegion(0, on_0);
  std::shared_ptr<TestRegion> region_1 = AddRegion(1, on_1);
  std::shared_ptr<TestRegion> region_2 = AddRegion(2, on_2);

  std::unique_ptr<Answer> split =
      RegionProduct(4, 4, 4, *region_0, on_0, *region_1, on_1);
  Submit(*split, "a");
  ASSERT_TRUE(split->done.HasBeenNotified());
  EXPECT_EQ(split->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(split->status.message(), HasSubstr("one GPU"));

  std::unique_ptr<Answer> elsewhere =
      RegionProduct(4, 4, 4, *region_2, on_2, *region_2, on_2);
  Submit(*elsewhere, "a");
  ASSERT_TRUE(elsewhere->done.HasBeenNotified());
  EXPECT_EQ(elsewhere->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(elsewhere->status.message(),
              HasSubstr("device 2, which this daemon does not run on"));
  EXPECT_EQ(Launches(0) + Launches(1), 0);
}

TEST_F(LaneRoutingTest, InlineProductsGoToTheLeastLoadedGpu) {
  // GPU 0 holds two products (its regions' own, one running, one queued):
  // inline products go to GPU 1, which never has more than one.
  backends_[0]->gate = std::make_unique<absl::Notification>();
  std::vector<std::unique_ptr<Answer>> held;
  std::vector<std::shared_ptr<TestRegion>> regions;
  for (int i = 0; i < 2; ++i) {
    std::string on_0;
    regions.push_back(AddRegion(0, on_0));
    TestRegion& region = *regions.back();
    held.push_back(RegionProduct(6, 6, 6, region, on_0, region, on_0));
    Submit(*held.back(), "a");
  }
  // Until GPU 0's worker has taken the first, the count dips as it does.
  while (lanes_[0].executor->running() == 0)
    absl::SleepFor(absl::Milliseconds(1));
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Answer> answer =
        InlineProduct(1 + rng_() % 20, 1 + rng_() % 20, 1 + rng_() % 20);
    Submit(*answer, "b");
    ExpectRanOn(*answer, 1);
  }
  EXPECT_EQ(Launches(1), 3);
  EXPECT_FALSE(held[0]->done.HasBeenNotified());

  // With GPU 0 free again and GPU 1 busy, inline products go to GPU 0.
  backends_[0]->gate->Notify();
  for (std::unique_ptr<Answer>& answer : held) ExpectRanOn(*answer, 0);
  backends_[1]->gate = std::make_unique<absl::Notification>();
  std::string on_1;
  std::shared_ptr<TestRegion> region_1 = AddRegion(1, on_1);
  std::unique_ptr<Answer> busy =
      RegionProduct(6, 6, 6, *region_1, on_1, *region_1, on_1);
  Submit(*busy, "a");
  std::unique_ptr<Answer> answer = InlineProduct(3, 5, 7);
  Submit(*answer, "b");
  ExpectRanOn(*answer, 0);
  backends_[1]->gate->Notify();
  ExpectRanOn(*busy, 1);
}

}  // namespace
}  // namespace matmul
