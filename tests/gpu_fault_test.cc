// GPU faults through a real daemon on the CUDA backend (skipped without a
// GPU): a fault that poisons the CUDA context (the test-only out-of-range
// write; launches' ends noticed either way, --completion_poll) turns health
// NOT_SERVING and answers the product that hit it, those queued behind it
// and every later one UNAVAILABLE; a product whose staging cannot be
// allocated fails alone with RESOURCE_EXHAUSTED and the daemon goes on
// serving.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <vector>

#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "kernels/cuda/backend/cuda_backend.h"
#include "kernels/cuda/testing/gpu_test_util.h"
#include "tests/cuda_backend_maker.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

HealthStatus Health(const std::string& target) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;  // "" = the whole server
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  return status.ok() ? response.status()
                     : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

const char* CodeName(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return "OK";
    case absl::StatusCode::kUnavailable:
      return "UNAVAILABLE";
    default:
      return "OTHER";
  }
}

// Runs in a child process: the fault poisons its CUDA context for good.
// Prints what it saw on stderr (the parent matches it) and exits 3, the
// daemon's device-lost code, once the server reported the loss.
// With `completion_by_word`, the completion thread reads launches' ends
// from a word the faulted stream never writes, and must ask the stream.
void FaultScenario(bool completion_by_word) {
  cuda::CudaBackendOptions cuda;
  cuda.selector.background_tuning = false;
  cuda.streams = 1;
  cuda.test_only_inject_fault_after = 2;
  cuda.completion_by_word = completion_by_word;
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  std::atomic<int> lost{0};
  options.on_device_lost = [&lost](const absl::Status&) { ++lost; };
  TestDaemon daemon(options, 1, CudaBackendMaker(cuda));
  std::mt19937_64 rng(23);
  auto request = MakeRandomRequest({.m = 96, .n = 80, .k = 64}, rng);
  if (!request.ok()) std::_Exit(1);
  // Launch 1 runs; launch 2 is the fault, and whatever queued with or
  // behind it is answered too.
  const absl::Status first =
      daemon.client().Matmul(*request, absl::Seconds(60)).status();
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> burst;
  for (int i = 0; i < 8; ++i) {
    burst.push_back(daemon.client().MatmulFuture(*request, absl::Seconds(60)));
  }
  int burst_unavailable = 0;
  std::string message;
  for (auto& response : burst) {
    absl::Status status = response.get().status();
    if (status.code() == absl::StatusCode::kUnavailable) ++burst_unavailable;
    if (message.empty()) message = std::string(status.message());
  }
  const absl::Status later =
      daemon.client().Matmul(*request, absl::Seconds(60)).status();
  const bool not_serving = Health(daemon.target()) ==
                           grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  std::fprintf(stderr,
               "first=%s burst_unavailable=%d lost=%d later=%s health=%s "
               "message=%s\n",
               CodeName(first), burst_unavailable, lost.load(), CodeName(later),
               not_serving ? "NOT_SERVING" : "other", message.c_str());
  std::fflush(stderr);
  std::_Exit(lost.load() == 1 ? 3 : 1);
}

TEST(GpuFaultTest, APoisonedContextStopsServingAndAnswersUnavailable) {
  MATMUL_SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (bool by_word : {false, true}) {
    SCOPED_TRACE(by_word ? "ends read from a mapped word"
                         : "ends asked of the stream");
    EXPECT_EXIT(FaultScenario(by_word), ::testing::ExitedWithCode(3),
                "first=OK burst_unavailable=8 lost=1 later=UNAVAILABLE "
                "health=NOT_SERVING message=the GPU was lost");
  }
}

TEST(GpuFaultTest, OutOfMemoryFailsThatRequestAndServingGoesOn) {
  MATMUL_SKIP_WITHOUT_GPU();
  cuda::CudaBackendOptions cuda;
  cuda.selector.background_tuning = false;
  cuda.streams = 1;
  // All but 16 MiB of the GPU's memory is taken, so a product with a
  // 32 MiB operand cannot be staged, while a small one can.
  cuda.test_only_memory_headroom_bytes = int64_t{16} << 20;
  TestDaemon daemon(TestDaemon::DefaultOptions(), 1, CudaBackendMaker(cuda));
  std::mt19937_64 rng(29);
  auto big = MakeRandomRequest({.m = 4096, .n = 4096, .k = 4096}, rng);
  auto small = MakeRandomRequest({.m = 128, .n = 96, .k = 160}, rng);
  ASSERT_TRUE(big.ok() && small.ok());
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<v1::MatmulResponse> refused =
        daemon.client().Matmul(*big, absl::Seconds(120));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
        << refused.status();
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("cudaErrorMemoryAllocation"));
    absl::StatusOr<v1::MatmulResponse> served =
        daemon.client().Matmul(*small, absl::Seconds(60));
    ASSERT_TRUE(served.ok()) << served.status();
    absl::StatusOr<double> error = CheckResponse(*small, *served);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }
  EXPECT_EQ(Health(daemon.target()),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace matmul
