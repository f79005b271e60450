// The shared-memory request ring on the CPU backend, end to end: products
// sent through a ring by several threads match FP64, requests the ring
// cannot carry go over gRPC, bad requests get their status in the slot,
// a request that times out gives its slot back once the daemon answers it,
// --max_rings, and what happens when either side goes away.
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

// A session and a registered shm segment of its own: one per thread.
struct Workspace {
  std::unique_ptr<SharedMemorySegment> segment;
  std::unique_ptr<RegisteredRegion> region;
};

Workspace MakeWorkspace(TestDaemon& daemon, Session& session) {
  Workspace w;
  auto segment = SharedMemorySegment::Create(int64_t{4} << 20);
  EXPECT_TRUE(segment.ok()) << segment.status();
  w.segment = *std::move(segment);
  auto region =
      RegisteredRegion::RegisterShm(daemon.client(), session, *w.segment);
  EXPECT_TRUE(region.ok()) << region.status();
  w.region = *std::move(region);
  return w;
}

class RingTest : public ::testing::Test {
 protected:
  explicit RingTest(ServerOptions options = TestDaemon::DefaultOptions())
      : daemon_(options) {}

  void SetUp() override {
    auto session = Session::Open(daemon_.client(), "ring_test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    workspace_ = MakeWorkspace(daemon_, *session_);
  }

  absl::StatusOr<std::unique_ptr<RequestRing>> Attach(int slots) {
    RequestRingOptions options;
    options.slots = slots;
    return RequestRing::Attach(daemon_.client(), *session_, options);
  }

  RegionRequest Small(std::mt19937_64& rng, RegionPlacement placement = {}) {
    auto request = MakeRandomRequest({.m = 9, .n = 10, .k = 11}, rng);
    EXPECT_TRUE(request.ok());
    auto placed = PlaceInRegion(*request, workspace_.segment->bytes(),
                                workspace_.region->id(), session_->session_id(),
                                placement);
    EXPECT_TRUE(placed.ok()) << placed.status();
    return *placed;
  }

  void TearDown() override {
    workspace_ = {};
    session_.reset();
  }

  TestDaemon daemon_;
  std::unique_ptr<Session> session_;
  Workspace workspace_;
};

TEST_F(RingTest, ProductsFromSeveralThreadsMatchFp64) {
  auto ring = Attach(/*slots=*/3);  // fewer slots than threads: they wait
  ASSERT_TRUE(ring.ok()) << ring.status();
  constexpr int kThreads = 5;
  constexpr int kPerThread = 12;
  std::vector<Workspace> workspaces;
  for (int t = 0; t < kThreads; ++t) {
    workspaces.push_back(MakeWorkspace(daemon_, *session_));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      Workspace& w = workspaces[t];
      for (int i = 0; i < kPerThread; ++i) {
        std::uniform_int_distribution<int64_t> dim(1, 96);
        ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
        spec.transpose_a = i & 1;
        spec.transpose_b = i & 2;
        if (i % 3 == 2) spec.batch = 2;
        if (i % 4 == 1) spec.beta = 0.5f;
        if (i % 2 == 1) spec.out_dtype = DType::kFP32;
        auto request = MakeRandomRequest(spec, rng);
        ASSERT_TRUE(request.ok());
        request->set_request_id(t * 1000 + i);
        auto placed =
            PlaceInRegion(*request, w.segment->bytes(), w.region->id(),
                          session_->session_id(), RegionPlacement{});
        ASSERT_TRUE(placed.ok()) << placed.status();
        auto response = (*ring)->Matmul(placed->request, kTimeout);
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_EQ(response->request_id(), static_cast<uint64_t>(t * 1000 + i));
        EXPECT_EQ(response->backend(), "cpu");
        auto error =
            CheckRegionResponse(*placed, *response, w.segment->bytes());
        ASSERT_TRUE(error.ok()) << error.status();
        EXPECT_LT(*error, DefaultTolerance(spec.resolved_out_dtype()));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string scrape = daemon_.server().metrics().Scrape();
  EXPECT_GE(MetricValue(scrape, "matmul_requests_total{code=\"ok\"}"),
            kThreads * kPerThread);
}

TEST_F(RingTest, AsyncCallsKeepManyInFlightFromOneThread) {
  auto ring = Attach(/*slots=*/8);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(11);
  constexpr int kCalls = 40;
  constexpr int64_t kSlice = int64_t{64} << 10;  // per call in the segment
  struct Sent {
    RegionRequest placed;
    v1::MatmulResponse response;
    absl::Status status;
  };
  std::vector<Sent> sent(kCalls);
  absl::Mutex mu;
  int answered = 0;
  for (int i = 0; i < kCalls; ++i) {
    ProblemSpec spec{.m = 17, .n = 20, .k = 23, .transpose_b = i % 2 == 1};
    auto request = MakeRandomRequest(spec, rng);
    ASSERT_TRUE(request.ok());
    request->set_request_id(i);
    // The last call's output is inline: it goes over gRPC, same callback.
    const RegionPlacement placement{.c = i != kCalls - 1};
    auto placed = PlaceInRegion(*request, workspace_.segment->bytes(),
                                workspace_.region->id(), session_->session_id(),
                                placement, i * kSlice);
    ASSERT_TRUE(placed.ok()) << placed.status();
    sent[i].placed = *std::move(placed);
    (*ring)->CallAsync(sent[i].placed.request, &sent[i].response, kTimeout,
                       [&, i](absl::Status status) {
                         absl::MutexLock lock(&mu);
                         sent[i].status = std::move(status);
                         ++answered;
                       });
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](int* n) { return *n == kCalls; }, &answered),
        kTimeout));
  }
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(sent[i].status.ok()) << i << ": " << sent[i].status;
    EXPECT_EQ(sent[i].response.request_id(), static_cast<uint64_t>(i));
    auto error = CheckRegionResponse(sent[i].placed, sent[i].response,
                                     workspace_.segment->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2) << i;
  }
}

TEST_F(RingTest, InlineOutputsGoOverGrpc) {
  auto ring = Attach(2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(7);
  RegionRequest placed = Small(rng, {.a = true, .b = true, .c = false});
  auto response = (*ring)->Matmul(placed.request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(response->has_c());
  auto error =
      CheckRegionResponse(placed, *response, workspace_.segment->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_F(RingTest, BadRequestsGetTheirStatusAndTheRingGoesOn) {
  auto ring = Attach(2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(8);
  RegionRequest unknown = Small(rng);
  unknown.request.mutable_a()->mutable_region()->set_region_id("no-such-id");
  auto response = (*ring)->Matmul(unknown.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound)
      << response.status();

  RegionRequest outside = Small(rng);
  outside.request.mutable_b()->mutable_region()->set_offset_bytes(uint64_t{1}
                                                                  << 40);
  response = (*ring)->Matmul(outside.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
      << response.status();

  // A ring acts in its own session, whatever session id a request names.
  RegionRequest good = Small(rng);
  good.request.set_session_id("someone-else");
  response = (*ring)->Matmul(good.request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  auto error =
      CheckRegionResponse(good, *response, workspace_.segment->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_F(RingTest, BadRingOptionsAreRefused) {
  RequestRingOptions options;
  options.slot_bytes = 1000;  // not a multiple of 64
  auto ring = RequestRing::Attach(daemon_.client(), *session_, options);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.slots = 0;
  ring = RequestRing::Attach(daemon_.client(), *session_, options);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.shm_prefix = "elsewhere";  // the daemon's prefix is "matmul"
  ring = RequestRing::Attach(daemon_.client(), *session_, options);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument)
      << ring.status();
  EXPECT_THAT(std::string(ring.status().message()), HasSubstr("ring"));
}

ServerOptions OneWorkerOneRing() {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  options.service.rings.max_rings = 1;
  return options;
}

class LimitedRingTest : public RingTest {
 protected:
  LimitedRingTest() : RingTest(OneWorkerOneRing()) {}
};

TEST_F(LimitedRingTest, MaxRingsIsEnforced) {
  auto first = Attach(1);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Attach(1);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted)
      << second.status();
  first->reset();  // detached: its place is free again
  EXPECT_TRUE(WaitFor([&] { return Attach(1).ok(); }));
}

TEST_F(LimitedRingTest, ATimedOutRequestGivesItsSlotBackOnceAnswered) {
  auto ring = Attach(1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(9);
  // The only worker is busy with a big product sent over gRPC.
  auto slow = MakeRandomRequest({.m = 2000, .n = 2000, .k = 2000}, rng);
  ASSERT_TRUE(slow.ok());
  auto running = daemon_.client().MatmulFuture(*slow, absl::Seconds(120));
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; }));

  RegionRequest late = Small(rng);
  auto response = (*ring)->Matmul(late.request, absl::Milliseconds(1));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded)
      << response.status();
  // An asynchronous call times out the same way, on the completion thread;
  // it waits for the ring's only slot first.
  std::promise<absl::Status> late_async;
  v1::MatmulResponse late_response;
  (*ring)->CallAsync(
      late.request, &late_response, absl::Milliseconds(20),
      [&](absl::Status status) { late_async.set_value(std::move(status)); });
  EXPECT_EQ(late_async.get_future().get().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The ring's one slot is the daemon's until it drops that request; the
  // next call waits for it, then runs.
  RegionRequest next = Small(rng);
  response = (*ring)->Matmul(next.request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  auto error =
      CheckRegionResponse(next, *response, workspace_.segment->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
  ASSERT_TRUE(running.get().ok());
  const std::string scrape = daemon_.server().metrics().Scrape();
  EXPECT_GE(
      MetricValue(scrape, "matmul_requests_total{code=\"deadline_exceeded\"}"),
      1);
}

TEST_F(LimitedRingTest, ACallbackThatFindsNoFreeSlotIsSentWhenOneFrees) {
  auto ring = Attach(1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(12);
  auto slow = MakeRandomRequest({.m = 2000, .n = 2000, .k = 2000}, rng);
  ASSERT_TRUE(slow.ok());
  auto running = daemon_.client().MatmulFuture(*slow, absl::Seconds(120));
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; }));
  // The first call times out while its slot is still the daemon's; its
  // callback (on the completion thread) sends the next one, which must
  // wait for that slot without blocking the thread that frees it.
  RegionRequest first = Small(rng);
  RegionRequest second = Small(rng);
  v1::MatmulResponse first_response, second_response;
  std::promise<absl::Status> first_done, second_done;
  (*ring)->CallAsync(first.request, &first_response, absl::Milliseconds(20),
                     [&](absl::Status status) {
                       first_done.set_value(status);
                       (*ring)->CallAsync(
                           second.request, &second_response, kTimeout,
                           [&](absl::Status second_status) {
                             second_done.set_value(std::move(second_status));
                           });
                     });
  EXPECT_EQ(first_done.get_future().get().code(),
            absl::StatusCode::kDeadlineExceeded);
  const absl::Status second_status = second_done.get_future().get();
  ASSERT_TRUE(second_status.ok()) << second_status;
  auto error =
      CheckRegionResponse(second, second_response, workspace_.segment->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
  ASSERT_TRUE(running.get().ok());
}

TEST_F(RingTest, DestroyingARingWithCallsInFlightAnswersEveryCall) {
  std::mt19937_64 rng(13);
  constexpr int kCalls = 24;
  std::vector<v1::MatmulResponse> responses(kCalls);
  absl::Mutex mu;
  int answered = 0, ok = 0;
  {
    auto ring = Attach(/*slots=*/6);
    ASSERT_TRUE(ring.ok()) << ring.status();
    for (int i = 0; i < kCalls; ++i) {
      RegionRequest placed = Small(rng);
      (*ring)->CallAsync(placed.request, &responses[i], kTimeout,
                         [&](absl::Status status) {
                           absl::MutexLock lock(&mu);
                           ++answered;
                           ok += status.ok();
                         });
    }
  }  // the ring goes while some calls are still out
  absl::MutexLock lock(&mu);
  EXPECT_EQ(answered, kCalls);
  EXPECT_GE(ok, 1);
  // The daemon dropped or finished the rest and serves a new ring.
  auto again = Attach(2);
  ASSERT_TRUE(again.ok()) << again.status();
  RegionRequest placed = Small(rng);
  auto response = (*again)->Matmul(placed.request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
}

TEST_F(RingTest, ClientDetachUnmapsTheRing) {
  auto ring = Attach(2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  const std::string name = (*ring)->shm_name();
  EXPECT_EQ(MappingsOf(name), 2);  // the client's and the daemon's
  auto rings_attached = [&] {
    return MetricValue(daemon_.server().metrics().Scrape(),
                       "matmul_rings_attached");
  };
  EXPECT_EQ(rings_attached(), 1);
  ring->reset();
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(name) == 0; }));
  EXPECT_EQ(rings_attached(), 0);
}

TEST(RingShutdownTest, DaemonShutdownDetachesTheRing) {
  TestDaemon daemon;
  auto session = Session::Open(daemon.client(), "ring_test");
  ASSERT_TRUE(session.ok()) << session.status();
  Workspace w = MakeWorkspace(daemon, **session);
  auto ring = RequestRing::Attach(daemon.client(), **session);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937_64 rng(10);
  auto request = MakeRandomRequest({.m = 4, .n = 4, .k = 4}, rng);
  ASSERT_TRUE(request.ok());
  auto placed = PlaceInRegion(*request, w.segment->bytes(), w.region->id(),
                              (*session)->session_id(), RegionPlacement{});
  ASSERT_TRUE(placed.ok());
  ASSERT_TRUE((*ring)->Matmul(placed->request, kTimeout).ok());

  // Unregistered now: its destructor would call a daemon that is gone.
  ASSERT_TRUE(w.region->Unregister().ok());
  daemon.server().Shutdown(absl::Seconds(5));
  EXPECT_TRUE(WaitFor([&] { return !(*ring)->attached(); }));
  auto after = (*ring)->Matmul(placed->request, kTimeout);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable)
      << after.status();
}

}  // namespace
}  // namespace matmul
