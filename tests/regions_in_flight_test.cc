// Unregistering a region while a product still reads it (running or
// queued) is deferred until the product is done; requests in flight count
// requests, not regions.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "client/regions/region_request_builder.h"
#include "client/request_builder.h"
#include "gtest/gtest.h"
#include "tests/regions_fixture.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using region_tests::kTimeout;
using region_tests::RegionTest;

class InFlightTest : public RegionTest {
 protected:
  static ServerOptions Options() {
    ServerOptions options = TestDaemon::DefaultOptions();
    options.executor.worker_threads = 1;  // the CPU backend runs 1 thread
    return options;
  }
  // Room for the slow product's 40 MiB of operands.
  InFlightTest() : RegionTest(Options(), int64_t{48} << 20) {}
};

// Relative error of the product at `samples` random (batch 0) elements:
// the full FP64 reference of a product big enough to be slow is slower
// still.
double SampledError(const v1::MatmulRequest& reference, const v1::Tensor& c,
                    int samples, std::mt19937_64& rng) {
  absl::StatusOr<GemmProblem> problem = GemmProblemFromRequest(reference);
  absl::StatusOr<HostMatrix> a = ReadHostMatrix(reference.a());
  absl::StatusOr<HostMatrix> b = ReadHostMatrix(reference.b());
  absl::StatusOr<HostMatrix> result = ReadHostMatrix(c);
  if (!problem.ok() || !a.ok() || !b.ok() || !result.ok()) return INFINITY;
  double error = 0, norm = 0;
  for (int s = 0; s < samples; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % problem->m);
    const int64_t j = static_cast<int64_t>(rng() % problem->n);
    double sum = 0;
    for (int64_t k = 0; k < problem->k; ++k) {
      const double x =
          reference.transpose_a() ? a->at(0, k, i) : a->at(0, i, k);
      const double y =
          reference.transpose_b() ? b->at(0, j, k) : b->at(0, k, j);
      sum += x * y;
    }
    const double got = result->at(0, i, j);
    error += (got - sum) * (got - sum);
    norm += sum * sum;
  }
  return std::sqrt(error / norm);
}

TEST_F(InFlightTest, UnregisterWhileAProductReadsTheRegionIsDeferred) {
  // ~34 GFLOP on one OpenBLAS thread: about a second (more on a loaded
  // machine), while the steps below take milliseconds. Operands and output
  // all in the region.
  auto request = MakeRandomRequest(
      {.m = 2048, .n = 2048, .k = 4096, .transpose_b = true}, rng_);
  ASSERT_TRUE(request.ok());
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(MappingsOf(segment_->name()), 2);
  auto running = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  // >= 1, not == 1: the daemon counts one reference per operand in the
  // region (3 here); see RequestsInFlightCountsRequests below.
  EXPECT_GE(listed->regions(0).requests_in_flight(), 1);

  absl::StatusOr<bool> deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(*deferred);
  // Gone from the session at once...
  listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  EXPECT_EQ(daemon_.server().regions().region_count(), 0);
  auto refused = daemon_.client().Matmul(SmallInRegion().request, kTimeout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  // ...while the product still has the memory, and completes correctly.
  EXPECT_EQ(MappingsOf(segment_->name()), 2);
  absl::StatusOr<v1::MatmulResponse> response = running.get();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_FALSE(response->has_c());
  auto c = ResultTensor(*placed, *response, segment_->bytes());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LT(SampledError(placed->reference, *c, 200, rng_), 1e-2);
  // Then the daemon lets go of the mapping.
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(segment_->name()) == 1; }));
}

TEST_F(InFlightTest, UnregisterOfAQueuedRequestsRegionIsDeferred) {
  // A slow inline product holds the only worker; a checked region product
  // waits behind it, holding its region, while the region is unregistered.
  auto slow = MakeRandomRequest({.m = 2048, .n = 2048, .k = 4096}, rng_);
  ASSERT_TRUE(slow.ok());
  auto blocker = daemon_.client().MatmulFuture(*slow, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto request = MakeRandomRequest(
      {.m = 64, .n = 96, .k = 80, .transpose_a = true, .beta = -0.5f}, rng_);
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok());
  auto queued = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().queue_depth() == 1; }));
  absl::StatusOr<bool> deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(*deferred);
  ASSERT_TRUE(blocker.get().ok());
  auto response = queued.get();
  ASSERT_TRUE(response.ok()) << response.status();
  auto error = CheckRegionResponse(*placed, *response, segment_->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(segment_->name()) == 1; }));
}

// One request with A, B and C in the same region is one request in flight.
TEST_F(InFlightTest, RequestsInFlightCountsRequests) {
  auto request = MakeRandomRequest({.m = 2048, .n = 2048, .k = 4096}, rng_);
  ASSERT_TRUE(request.ok());
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto running = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).requests_in_flight(), 1);
  ASSERT_TRUE(running.get().ok());
}

}  // namespace
}  // namespace matmul
