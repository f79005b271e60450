// Operands at any address through a real daemon, on the CPU backend and
// (GPU tests, skipped without one) the CUDA backend: a region registered at
// an odd byte of its segment puts every operand between two elements, and
// the daemon refuses such a product with INVALID_ARGUMENT (never a fault,
// on the host or the GPU, and it goes on serving); at 2, 4 and 8 bytes the
// products run and are right.
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"
#ifdef MATMUL_HAS_CUDA
#include "kernels/cuda/testing/gpu_test_util.h"
#include "tests/cuda_backend_maker.h"
#endif

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

class OperandAlignmentTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
#ifdef MATMUL_HAS_CUDA
      MATMUL_SKIP_WITHOUT_GPU();
      cuda::CudaBackendOptions cuda;
      cuda.selector.background_tuning = false;
      daemon_ = std::make_unique<TestDaemon>(TestDaemon::DefaultOptions(), 1,
                                             CudaBackendMaker(cuda));
#else
      GTEST_SKIP() << "this build has no CUDA backend";
#endif
    } else {
      daemon_ = std::make_unique<TestDaemon>();
    }
    auto session = Session::Open(daemon_->client(), "operand_alignment_test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    auto segment = SharedMemorySegment::Create(int64_t{4} << 20);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
  }

  void TearDown() override {
    session_.reset();
    daemon_.reset();
  }

  std::unique_ptr<TestDaemon> daemon_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SharedMemorySegment> segment_;
};

TEST_P(OperandAlignmentTest, OddAddressesAreRefusedOthersRunRight) {
  std::mt19937_64 rng(std::random_device{}());
  for (uint64_t offset : {1, 2, 3, 4, 7, 8}) {
    SCOPED_TRACE(absl::StrCat("region at byte ", offset, " of its segment"));
    const uint64_t size = (uint64_t{2} << 20) + rng() % 4096;
    auto region = RegisteredRegion::RegisterShm(daemon_->client(), *session_,
                                                *segment_, offset, size);
    ASSERT_TRUE(region.ok()) << region.status();
    ProblemSpec spec{.m = 96 + static_cast<int64_t>(rng() % 64),
                     .n = 128,
                     .k = 160,
                     .transpose_b = true};
    if (offset % 4 == 0 && rng() % 2 == 0) spec.out_dtype = DType::kFP32;
    auto placed = MakeRandomRegionRequest(
        spec, rng, segment_->bytes().subspan(offset, size), (*region)->id(),
        session_->session_id());
    ASSERT_TRUE(placed.ok()) << placed.status();
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_->client().Matmul(placed->request, kTimeout);
    if (offset % 2 != 0) {
      EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
          << response.status();
      EXPECT_THAT(response.status().message(),
                  HasSubstr("BF16 operands must start at a multiple of 2"));
      continue;
    }
    ASSERT_TRUE(response.ok()) << response.status();
    absl::StatusOr<double> error = CheckRegionResponse(
        *placed, *response, segment_->bytes().subspan(offset, size));
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2) << response->kernel();
  }
  // Still serving, and right.
  auto request = MakeRandomRequest({.m = 33, .n = 17, .k = 65}, rng);
  ASSERT_TRUE(request.ok());
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_->client().Matmul(*request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_LT(*CheckResponse(*request, *response), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Backends, OperandAlignmentTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cuda" : "Cpu";
                         });

}  // namespace
}  // namespace matmul
