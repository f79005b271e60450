// A client that truncates a segment the daemon maps cannot crash it. On the
// CPU backend, through a real in-process daemon under load: shm regions
// truncated (and unlinked) while products read and write them fail those
// products with FAILED_PRECONDITION, and only those (every OK result is
// checked); a request ring truncated under the daemon ends its stream with
// FAILED_PRECONDITION, and other rings go on. The test process is both
// client and daemon: its own mapping of a truncated segment is never read
// unguarded.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <optional>
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
#include "common/request_ring_layout.h"
#include "common/ring/client_protocol.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/regions/sigbus_guard.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr int kRounds = 50;

// What every refusal of a truncated segment says.
constexpr char kTruncated[] = "truncated or otherwise changed while";

UniqueFd OpenShm(const std::string& name) {
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid()) << name << ": " << strerror(errno);
  return fd;
}

// Threads that keep sending checked products on a segment nobody
// truncates, in a session of their own, until destroyed.
class SteadyLoad {
 public:
  SteadyLoad(TestDaemon& daemon, int threads) : daemon_(daemon) {
    auto session = Session::Open(daemon.client(), "steady");
    EXPECT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    for (int t = 0; t < threads; ++t) {
      auto segment = SharedMemorySegment::Create(int64_t{1} << 20);
      EXPECT_TRUE(segment.ok()) << segment.status();
      auto region =
          RegisteredRegion::RegisterShm(daemon.client(), *session_, **segment);
      EXPECT_TRUE(region.ok()) << region.status();
      segments_.push_back(*std::move(segment));
      regions_.push_back(*std::move(region));
    }
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] { Run(t); });
    }
  }
  ~SteadyLoad() {
    stop_.store(true);
    for (std::thread& thread : threads_) thread.join();
  }

  int ok() const { return ok_.load(); }
  int failed() const { return failed_.load(); }

 private:
  void Run(int t) {
    std::mt19937_64 rng(500 + t);
    SharedMemorySegment& segment = *segments_[t];
    for (int i = 0; !stop_.load(); ++i) {
      std::uniform_int_distribution<int64_t> dim(16, 96);
      ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
      spec.transpose_b = i & 1;
      auto request = MakeRandomRequest(spec, rng);
      ASSERT_TRUE(request.ok());
      // Half of them write C in place.
      auto placed = PlaceInRegion(*request, segment.bytes(), regions_[t]->id(),
                                  session_->session_id(),
                                  {.a = true, .b = true, .c = (i & 2) != 0});
      ASSERT_TRUE(placed.ok()) << placed.status();
      auto response = daemon_.client().Matmul(placed->request, kTimeout);
      if (!response.ok()) {
        ADD_FAILURE() << "a product on an untouched segment failed: "
                      << response.status();
        failed_.fetch_add(1);
        continue;
      }
      auto error = CheckRegionResponse(*placed, *response, segment.bytes());
      ASSERT_TRUE(error.ok()) << error.status();
      EXPECT_LT(*error, DefaultTolerance(spec.resolved_out_dtype()));
      ok_.fetch_add(1);
    }
  }

  TestDaemon& daemon_;
  std::unique_ptr<Session> session_;
  std::vector<std::unique_ptr<SharedMemorySegment>> segments_;
  std::vector<std::unique_ptr<RegisteredRegion>> regions_;
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::atomic<int> failed_{0};
  std::vector<std::thread> threads_;
};

ServerOptions LoadedOptions() {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 3;
  return options;
}

TEST(ShmTruncationTest, TruncatedRegionsFailOnlyTheirOwnProducts) {
  TestDaemon daemon(LoadedOptions());
  SteadyLoad load(daemon, /*threads=*/2);
  auto session = Session::Open(daemon.client(), "truncating");
  ASSERT_TRUE(session.ok()) << session.status();
  std::mt19937_64 rng(7);
  int ok = 0, refused = 0, refused_after = 0;
  constexpr int kSenders = 3;
  constexpr int kPerSender = 4;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    auto segment = SharedMemorySegment::Create(int64_t{1} << 20);
    ASSERT_TRUE(segment.ok()) << segment.status();
    // The test reads its own mapping only through a guard: after the
    // truncation, results the daemon wrote in place are checked only
    // when the guard says the read saw the object.
    auto own_guard =
        SigbusGuard::Create((*segment)->data(), (*segment)->bytes().size());
    ASSERT_TRUE(own_guard.ok()) << own_guard.status();
    auto region =
        RegisteredRegion::RegisterShm(daemon.client(), **session, **segment);
    ASSERT_TRUE(region.ok()) << region.status();
    // Each sender's requests, laid out one after another; the last sender
    // writes C in place, the others get it inline.
    std::vector<std::vector<RegionRequest>> requests(kSenders);
    uint64_t offset = 0;
    for (int s = 0; s < kSenders; ++s) {
      for (int i = 0; i < kPerSender; ++i) {
        std::uniform_int_distribution<int64_t> dim(32, 96);
        auto request = MakeRandomRequest(
            {.m = dim(rng), .n = dim(rng), .k = dim(rng)}, rng);
        ASSERT_TRUE(request.ok());
        const RegionPlacement placement{
            .a = true, .b = true, .c = s == kSenders - 1};
        auto placed =
            PlaceInRegion(*request, (*segment)->bytes(), (*region)->id(),
                          (*session)->session_id(), placement, offset);
        ASSERT_TRUE(placed.ok()) << placed.status();
        offset = AlignRegionOffset(placed->end_offset_bytes);
        requests[s].push_back(*std::move(placed));
      }
    }
    UniqueFd fd = OpenShm((*segment)->name());
    ASSERT_TRUE(fd.valid());
    std::atomic<bool> truncated{false};
    std::atomic<int> round_ok{0}, round_refused{0}, round_refused_after{0};
    std::vector<std::thread> senders;
    for (int s = 0; s < kSenders; ++s) {
      senders.emplace_back([&, s] {
        // Goes on until two full passes after the truncation.
        int passes_after = 0;
        for (int pass = 0; passes_after < 2; ++pass) {
          const bool after = truncated.load();
          for (const RegionRequest& placed : requests[s]) {
            auto response = daemon.client().Matmul(placed.request, kTimeout);
            if (!response.ok()) {
              EXPECT_EQ(response.status().code(),
                        absl::StatusCode::kFailedPrecondition)
                  << response.status();
              EXPECT_THAT(std::string(response.status().message()),
                          HasSubstr(kTruncated));
              round_refused.fetch_add(1);
              round_refused_after.fetch_add(after);
              continue;
            }
            // Sent after the truncation: it cannot have read the data.
            EXPECT_FALSE(after) << "a product on a truncated segment was OK";
            absl::StatusOr<v1::Tensor> c =
                ResultTensor(placed, *response, (*segment)->bytes());
            if (placed.output_in_region && (*own_guard)->faulted()) {
              continue;  // what we read may be zeros, not the result
            }
            ASSERT_TRUE(c.ok()) << c.status();
            v1::MatmulResponse with_c = *response;
            *with_c.mutable_c() = *std::move(c);
            auto error = CheckResponse(placed.reference, with_c);
            ASSERT_TRUE(error.ok()) << error.status();
            EXPECT_LT(*error, 1e-2);
            round_ok.fetch_add(1);
          }
          passes_after += after;
        }
      });
    }
    std::thread truncator([&] {
      absl::SleepFor(absl::Microseconds(rng() % 3000));
      // Every other round also removes the name first, as a client that
      // cleans up would.
      if (round % 2 == 1) (*segment)->Unlink();
      EXPECT_EQ(ftruncate(fd.get(), 0), 0) << strerror(errno);
      truncated.store(true);
    });
    truncator.join();
    for (std::thread& sender : senders) sender.join();
    EXPECT_GE(round_refused_after.load(), kSenders * kPerSender);
    ok += round_ok.load();
    refused += round_refused.load();
    refused_after += round_refused_after.load();
    // The region unregisters as usual; the daemon's mapping goes with it.
    EXPECT_TRUE((*region)->Unregister().ok());
    EXPECT_EQ(daemon.server().regions().region_count(), 2);
    own_guard->reset();
  }
  // The steady products all succeeded while this went on.
  EXPECT_GT(load.ok(), 0);
  EXPECT_EQ(load.failed(), 0);
  EXPECT_GE(refused_after, kRounds * kSenders * kPerSender);
  // Each round's products before the truncation ran; what is reported is
  // informational (the split depends on timing).
  RecordProperty("ok_before_truncation", ok);
  RecordProperty("refused", refused);
  EXPECT_EQ(daemon.server().regions().region_count(), 2);  // the steady ones
}

// --- request rings -------------------------------------------------------

constexpr uint32_t kRingSlots = 8;
constexpr uint32_t kRingSlotBytes = 2048;

// A ring laid out by hand (the client library's ring would read its own
// mapping after the truncation), attached through the raw AttachRing call.
class RawRing {
 public:
  explicit RawRing(TestDaemon& daemon, const std::string& session_id) {
    static std::atomic<int> counter{0};
    name_ =
        absl::StrCat("matmul-truncring-", getpid(), "-", counter.fetch_add(1));
    fd_.reset(shm_open(("/" + name_).c_str(),
                       O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd_.valid()) << strerror(errno);
    bytes_ = ring::RingBytes(kRingSlots, kRingSlotBytes);
    EXPECT_EQ(ftruncate(fd_.get(), static_cast<off_t>(bytes_)), 0);
    base_ =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    EXPECT_NE(base_, MAP_FAILED);
    auto guard = SigbusGuard::Create(base_, bytes_);
    EXPECT_TRUE(guard.ok()) << guard.status();
    guard_ = *std::move(guard);
    client_.emplace(ring::RingView(base_, kRingSlots, kRingSlotBytes));
    client_->view().WriteRingHeader();

    v1::AttachRingRequest request;
    request.set_session_id(session_id);
    request.set_shm_name(name_);
    request.set_slot_count(kRingSlots);
    request.set_slot_bytes(kRingSlotBytes);
    context_.set_deadline(absl::ToChronoTime(absl::Now() + kTimeout));
    stream_ = daemon.client().stub().AttachRing(&context_, request);
  }
  ~RawRing() {
    context_.TryCancel();
    guard_.reset();
    munmap(base_, bytes_);
    shm_unlink(("/" + name_).c_str());
  }

  // True once the daemon said it polls the ring.
  bool WaitAttached() {
    v1::RingEvent event;
    return stream_->Read(&event) && event.slot_count() == kRingSlots;
  }

  // Puts `request` into `slot` and publishes it, as the client library
  // does (answers are never read: the ring is about to be truncated).
  void Submit(uint32_t slot, const v1::MatmulRequest& request) {
    const std::string bytes = request.SerializeAsString();
    ASSERT_LE(bytes.size(), client_->view().payload_bytes());
    std::memcpy(client_->view().payload(slot), bytes.data(), bytes.size());
    client_->Submit(slot, static_cast<uint32_t>(bytes.size()),
                    /*timeout_ns=*/0, /*notify=*/true);
  }

  void Truncate(bool unlink_first) {
    if (unlink_first) shm_unlink(("/" + name_).c_str());
    ASSERT_EQ(ftruncate(fd_.get(), 0), 0) << strerror(errno);
  }

  // Waits for the stream's end and returns its status.
  grpc::Status Finish() {
    v1::RingEvent event;
    while (stream_->Read(&event)) {
    }
    return stream_->Finish();
  }

 private:
  std::string name_;
  UniqueFd fd_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  std::unique_ptr<SigbusGuard> guard_;
  std::optional<ring::ClientProtocol> client_;  // on the mapping
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::RingEvent>> stream_;
};

TEST(ShmTruncationTest, ATruncatedRingEndsItsStreamAndOthersGoOn) {
  TestDaemon daemon(LoadedOptions());
  SteadyLoad load(daemon, /*threads=*/1);
  auto session = Session::Open(daemon.client(), "rings");
  ASSERT_TRUE(session.ok()) << session.status();
  auto segment = SharedMemorySegment::Create(int64_t{1} << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto region =
      RegisteredRegion::RegisterShm(daemon.client(), **session, **segment);
  ASSERT_TRUE(region.ok()) << region.status();
  // A ring of the client library beside them, in use throughout.
  auto steady_ring = RequestRing::Attach(daemon.client(), **session);
  ASSERT_TRUE(steady_ring.ok()) << steady_ring.status();
  std::mt19937_64 rng(8);
  auto steady_product = [&] {
    auto request = MakeRandomRequest({.m = 24, .n = 40, .k = 56}, rng);
    ASSERT_TRUE(request.ok());
    auto placed = PlaceInRegion(*request, (*segment)->bytes(), (*region)->id(),
                                (*session)->session_id(), RegionPlacement{});
    ASSERT_TRUE(placed.ok()) << placed.status();
    auto response = (*steady_ring)->Matmul(placed->request, kTimeout);
    ASSERT_TRUE(response.ok()) << response.status();
    auto error = CheckRegionResponse(*placed, *response, (*segment)->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  };
  auto rings_attached = [&] {
    return MetricValue(daemon.server().metrics().Scrape(),
                       "matmul_rings_attached");
  };
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    RawRing raw(daemon, (*session)->session_id());
    ASSERT_TRUE(raw.WaitAttached());
    // Some rounds truncate with requests queued or running, some with an
    // idle ring (the poller faults on its own).
    const int queued = round % 3 == 0 ? 0 : static_cast<int>(rng() % 6) + 1;
    for (int i = 0; i < queued; ++i) {
      auto request = MakeRandomRequest({.m = 64, .n = 64, .k = 64}, rng);
      ASSERT_TRUE(request.ok());
      request->set_session_id((*session)->session_id());
      // Operands in the region's second half (the steady products use the
      // first); the answers (too large for a slot, or never written) are
      // not read.
      auto placed = PlaceInRegion(*request, (*segment)->bytes(),
                                  (*region)->id(), (*session)->session_id(),
                                  {.a = true, .b = true, .c = false},
                                  /*base_offset=*/uint64_t{512} << 10);
      ASSERT_TRUE(placed.ok()) << placed.status();
      raw.Submit(static_cast<uint32_t>(i), placed->request);
    }
    absl::SleepFor(absl::Microseconds(rng() % 2000));
    raw.Truncate(/*unlink_first=*/round % 2 == 1);
    const grpc::Status status = raw.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(kTruncated));
    // The daemon lets go of the ring and the other one goes on.
    EXPECT_TRUE(WaitFor([&] { return rings_attached() == 1; }));
    steady_product();
  }
  // A ring attached afterwards works too.
  steady_ring->reset();
  steady_ring = RequestRing::Attach(daemon.client(), **session);
  ASSERT_TRUE(steady_ring.ok()) << steady_ring.status();
  steady_product();
  EXPECT_GT(load.ok(), 0);
  EXPECT_EQ(load.failed(), 0);
}

}  // namespace
}  // namespace matmul
