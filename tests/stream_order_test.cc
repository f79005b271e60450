// Stream-ordered products (MatmulRequest.stream_order, client/
// stream_ordered_calls.h) through a real daemon: on the CUDA backend (GPU
// tests, skipped without one) a product waits for the work queued on the
// caller's stream before it, the work queued after it waits for the
// product, and a stream that never gets there is given up at the
// request's deadline without holding the daemon's worker; on the CPU
// backend, and for requests that cannot be stream-ordered, the refusals.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "client/regions/cuda_memory.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "client/stream_order/stream_ordered_calls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/testing/gpu_test_util.h"
#include "tests/cuda_backend_maker.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr uint16_t kBf16Nan = 0x7fc0;

// A session with one registered shm segment for operands (and words).
class StreamOrderTest : public ::testing::Test {
 protected:
  // Starts `daemon` (kept until TearDown) and opens the session.
  void Start(std::unique_ptr<TestDaemon> daemon) {
    daemon_ = std::move(daemon);
    auto session = Session::Open(daemon_->client(), "stream_order_test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    auto segment = SharedMemorySegment::Create(int64_t{8} << 20);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    auto region =
        RegisteredRegion::RegisterShm(daemon_->client(), *session_, *segment_);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
  }

  RegionRequest Random(std::mt19937_64& rng, ProblemSpec spec,
                       RegionPlacement placement = {}) {
    auto placed =
        MakeRandomRegionRequest(spec, rng, segment_->bytes(), region_->id(),
                                session_->session_id(), placement);
    EXPECT_TRUE(placed.ok()) << placed.status();
    return *placed;
  }

  // A stream order whose words sit at the segment's last bytes.
  v1::StreamOrder WordsAtTheEnd() const {
    v1::StreamOrder order;
    order.set_region_id(region_->id());
    order.set_wait_offset_bytes(segment_->size_bytes() - 8);
    order.set_wait_value(1);
    order.set_signal(true);
    order.set_signal_offset_bytes(segment_->size_bytes() - 4);
    order.set_signal_value(1);
    return order;
  }

  void TearDown() override {
    region_.reset();
    segment_.reset();
    session_.reset();
    daemon_.reset();
  }

  std::unique_ptr<TestDaemon> daemon_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SharedMemorySegment> segment_;
  std::unique_ptr<RegisteredRegion> region_;
};

TEST_F(StreamOrderTest, RefusedOnTheCpuBackend) {
  Start(std::make_unique<TestDaemon>());
  std::mt19937_64 rng(5);
  RegionRequest placed = Random(rng, {.m = 8, .n = 8, .k = 8});
  *placed.request.mutable_stream_order() = WordsAtTheEnd();
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_->client().Matmul(placed.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("stream_order needs the CUDA backend"));
}

TEST_F(StreamOrderTest, RequestsThatCannotBeOrderedAreRefused) {
  Start(std::make_unique<TestDaemon>());
  std::mt19937_64 rng(7);
  // An inline output: nothing for the caller's stream to read after.
  RegionRequest inline_c =
      Random(rng, {.m = 8, .n = 8, .k = 8}, {.a = true, .b = true, .c = false});
  *inline_c.request.mutable_stream_order() = WordsAtTheEnd();
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_->client().Matmul(inline_c.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("stream_order needs A, B and C all in regions"));

  RegionRequest placed = Random(rng, {.m = 8, .n = 8, .k = 8});
  v1::StreamOrder misaligned = WordsAtTheEnd();
  misaligned.set_wait_offset_bytes(misaligned.wait_offset_bytes() - 2);
  *placed.request.mutable_stream_order() = misaligned;
  response = daemon_->client().Matmul(placed.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("must be 4-byte aligned"));

  v1::StreamOrder no_region = WordsAtTheEnd();
  no_region.clear_region_id();
  *placed.request.mutable_stream_order() = no_region;
  response = daemon_->client().Matmul(placed.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("stream_order.region_id is empty"));
}

// --- on the GPU ------------------------------------------------------------

// A CUDA daemon in this process with one worker, so that a worker held by
// a product waiting for its client's stream would block every other one;
// the parameter: the daemon waits for the client's stream on the GPU
// (--stream_order_wait=gpu), else on its CPU.
class CudaStreamOrderTest : public StreamOrderTest,
                            public ::testing::WithParamInterface<bool> {
 protected:
  static ServerOptions OneWorker() {
    ServerOptions options = TestDaemon::DefaultOptions();
    options.executor.worker_threads = 1;
    return options;
  }

  void SetUp() override {
    MATMUL_SKIP_WITHOUT_GPU();
    cuda::CudaBackendOptions cuda;
    cuda.selector.background_tuning = false;
    cuda.stream_order_waits_on_gpu = GetParam();
    Start(std::make_unique<TestDaemon>(OneWorker(), 1, CudaBackendMaker(cuda)));
    auto ring = RequestRing::Attach(daemon_->client(), *session_);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ring_ = *std::move(ring);
    auto calls =
        StreamOrderedCalls::Create(daemon_->client(), *session_, *ring_);
    ASSERT_TRUE(calls.ok()) << calls.status();
    calls_ = *std::move(calls);
    // The operands are written and read by this process's GPU too.
    ASSERT_EQ(cudaHostRegister(segment_->data(), segment_->size_bytes(),
                               cudaHostRegisterMapped),
              cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              cudaSuccess);
  }

  void TearDown() override {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
      cudaHostUnregister(segment_->data());
    }
    calls_.reset();
    ring_.reset();
    StreamOrderTest::TearDown();
  }

  // Runs a plain product of `spec`'s shape through the ring first: the
  // daemon and the test share one CUDA context here, so a first-use call of
  // the daemon's that synchronizes the context (a module load, an
  // allocation) would wait for the test's stream, which waits for the
  // product. Across processes, as in use, contexts do not wait for each
  // other.
  void WarmUp(std::mt19937_64& rng, ProblemSpec spec) {
    RegionRequest plain = Random(rng, spec);
    absl::StatusOr<v1::MatmulResponse> response =
        ring_->Matmul(plain.request, kTimeout);
    ASSERT_TRUE(response.ok()) << response.status();
  }

  // Queues `request` on the stream; the future gets the daemon's answer.
  std::future<absl::Status> Queue(const v1::MatmulRequest& request,
                                  absl::Duration timeout = kTimeout) {
    auto answer = std::make_shared<std::promise<absl::Status>>();
    std::future<absl::Status> future = answer->get_future();
    absl::Status queued = calls_->Matmul(
        request, stream_, timeout,
        [answer](absl::Status status) { answer->set_value(status); });
    EXPECT_TRUE(queued.ok()) << queued;
    return future;
  }

  std::unique_ptr<RequestRing> ring_;
  std::unique_ptr<StreamOrderedCalls> calls_;
  cudaStream_t stream_ = nullptr;
};

// Blocks the stream it is queued on until `*release` is set.
void HoldStream(void* release) {
  auto* flag = static_cast<std::atomic<bool>*>(release);
  while (!flag->load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_P(CudaStreamOrderTest, ProductRunsBetweenTheWorkBeforeAndAfterIt) {
  std::mt19937_64 rng(11);
  WarmUp(rng, {.m = 192, .n = 160, .k = 256});
  RegionRequest placed = Random(rng, {.m = 192, .n = 160, .k = 256});
  char* base = segment_->data();
  const size_t a_bytes = size_t{192} * 256 * 2;
  const size_t c_bytes = size_t{192} * 160 * 2;
  // The real A waits in GPU memory; the region holds NaN until the
  // stream's copy puts A there, and so does C until the product. (GPU
  // memory, because a copy between two host buffers is done by the CPU
  // once the stream gets there, and the call would wait for that.)
  auto real_a = CudaMemory::Create(CudaMemory::Kind::kIpc, a_bytes);
  auto c_after = CudaMemory::Create(CudaMemory::Kind::kIpc, c_bytes);
  ASSERT_TRUE(real_a.ok() && c_after.ok());
  ASSERT_TRUE(
      (*real_a)->CopyFromHost({base + placed.a_offset_bytes, a_bytes}).ok());
  std::vector<uint16_t> nan_a(a_bytes / 2, kBf16Nan);
  std::memcpy(base + placed.a_offset_bytes, nan_a.data(), a_bytes);
  std::vector<uint16_t> nan_c(c_bytes / 2, kBf16Nan);
  std::memcpy(base + placed.c_offset_bytes, nan_c.data(), c_bytes);

  // Before: the stream is held, then A is copied in. After: C is copied
  // out. No synchronize in between.
  std::atomic<bool> release{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream_, HoldStream, &release), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(base + placed.a_offset_bytes, (*real_a)->data(),
                            a_bytes, cudaMemcpyDefault, stream_),
            cudaSuccess);
  std::future<absl::Status> answer = Queue(placed.request);
  ASSERT_EQ(cudaMemcpyAsync((*c_after)->data(), base + placed.c_offset_bytes,
                            c_bytes, cudaMemcpyDefault, stream_),
            cudaSuccess);
  // The daemon has the request but may not run it yet.
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  release = true;
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_TRUE(answer.get().ok());

  // What the stream read after the product is the product.
  std::vector<char> memory(base, base + segment_->size_bytes());
  ASSERT_TRUE((*c_after)
                  ->CopyToHost({memory.data() + placed.c_offset_bytes, c_bytes})
                  .ok());
  absl::StatusOr<double> error =
      CheckRegionResponse(placed, v1::MatmulResponse(), memory);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_P(CudaStreamOrderTest, ProductsBackToBackEachReadTheLastOnesOutput) {
  // C1 = A B, C2 = C1 B, ...: each product reads the previous one's output,
  // ordered by the stream alone. Every C starts as NaN, so a product that
  // ran early reads NaN.
  std::mt19937_64 rng(13);
  const int64_t n = 128;
  WarmUp(rng, {.m = n, .n = n, .k = n});
  const size_t c_bytes = n * n * 2;
  RegionRequest first = Random(rng, {.m = n, .n = n, .k = n});
  char* base = segment_->data();
  std::vector<uint16_t> nan_c(c_bytes / 2, kBf16Nan);
  std::vector<RegionRequest> links = {first};
  uint64_t free_offset = AlignRegionOffset(first.c_offset_bytes + c_bytes);
  for (int i = 0; i < 12; ++i) {
    RegionRequest link = links.back();
    link.request.mutable_a()->mutable_region()->set_offset_bytes(
        link.c_offset_bytes);
    link.a_offset_bytes = link.c_offset_bytes;
    link.request.mutable_c()->mutable_region()->set_offset_bytes(free_offset);
    link.c_offset_bytes = free_offset;
    free_offset = AlignRegionOffset(free_offset + c_bytes);
    links.push_back(link);
  }
  std::vector<std::future<absl::Status>> answers;
  for (const RegionRequest& link : links) {
    std::memcpy(base + link.c_offset_bytes, nan_c.data(), c_bytes);
  }
  for (const RegionRequest& link : links)
    answers.push_back(Queue(link.request));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  for (auto& answer : answers) EXPECT_TRUE(answer.get().ok());
  // Each link against its input as it ended up in memory.
  for (size_t i = 0; i < links.size(); ++i) {
    SCOPED_TRACE(i);
    RegionRequest& link = links[i];
    if (i > 0) {
      link.reference.mutable_a()->set_inline_data(
          std::string(base + link.a_offset_bytes, c_bytes));
    }
    absl::StatusOr<double> error =
        CheckRegionResponse(link, v1::MatmulResponse(), segment_->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }
}

TEST_P(CudaStreamOrderTest, AStreamThatNeverGetsThereIsGivenUp) {
  std::mt19937_64 rng(17);
  WarmUp(rng, {.m = 64, .n = 64, .k = 64});
  RegionRequest held = Random(rng, {.m = 64, .n = 64, .k = 64});
  std::atomic<bool> release{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream_, HoldStream, &release), cudaSuccess);
  std::future<absl::Status> answer = Queue(held.request, absl::Seconds(2));
  const absl::Status status = answer.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // The daemon's only worker serves again: a plain product through the
  // ring runs.
  RegionRequest plain = Random(rng, {.m = 64, .n = 64, .k = 64});
  absl::StatusOr<v1::MatmulResponse> response =
      ring_->Matmul(plain.request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  absl::StatusOr<double> error =
      CheckRegionResponse(plain, *response, segment_->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
  // And the caller's stream was released too (its signal written here).
  release = true;
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Waits, CudaStreamOrderTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OnTheGpu" : "OnTheCpu";
                         });

}  // namespace
}  // namespace matmul
