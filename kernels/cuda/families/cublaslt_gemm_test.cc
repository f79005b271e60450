#include "kernels/cuda/families/cublaslt_gemm.h"

#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/testing/gpu_test_util.h"

namespace matmul::cuda {
namespace {

using ::matmul::cuda::testing::MakeHostProblem;
using ::matmul::cuda::testing::OperandLayout;
using ::matmul::cuda::testing::ProblemSpec;

// Runs every heuristic candidate of the spec's plan and checks each result.
void CheckAllCandidates(CublasLtGemm& lt, const ProblemSpec& spec,
                        std::mt19937_64& rng) {
  SCOPED_TRACE(spec.Name());
  auto host = MakeHostProblem(spec, rng);
  auto plan = lt.GetPlan(host.problem);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT((*plan)->algo_count(), 0);
  auto workspace = DeviceBuffer::Create(lt.workspace_bytes());
  ASSERT_TRUE(workspace.ok());
  for (int i = 0; i < (*plan)->algo_count(); ++i) {
    SCOPED_TRACE(::testing::Message() << "candidate " << i << " (algo id "
                                      << (*plan)->algo_id(i) << ")");
    // Fresh inputs and a freshly poisoned C for every candidate.
    host = MakeHostProblem(spec, rng);
    auto device = ::matmul::cuda::testing::Upload(host);
    ASSERT_TRUE(device.ok()) << device.status();
    auto device_plan = lt.GetPlan(device->problem);
    ASSERT_TRUE(device_plan.ok()) << device_plan.status();
    if (i >= (*device_plan)->algo_count()) break;
    ASSERT_TRUE(lt.Run(**device_plan, i, device->problem, nullptr,
                       workspace->data(), workspace->size())
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
    EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2);
    EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host));
  }
}

class CublasLtGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MATMUL_SKIP_WITHOUT_GPU();
    auto lt = CublasLtGemm::Create(0);
    ASSERT_TRUE(lt.ok()) << lt.status();
    lt_ = std::move(*lt);
  }
  std::unique_ptr<CublasLtGemm> lt_;
  std::mt19937_64 rng_{20261129};
};

TEST(CublasLtCanImplement, RejectsWithReasons) {
  // Host-only logic: runs without a GPU.
  GemmProblem p;
  p.m = p.n = p.k = 8;
  p.a.strides = {0, 8, 1};
  p.b.strides = {0, 8, 1};
  p.c.strides = {0, 8, 1};
  EXPECT_TRUE(CublasLtGemm::CanImplement(p).ok());
  GemmProblem strided = p;
  strided.a.strides = {0, 17, 2};
  auto status = CublasLtGemm::CanImplement(strided);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("operand A"), std::string::npos) << status;
  GemmProblem partial = p;
  partial.batch = 2;
  const void* ptrs[2] = {nullptr, nullptr};
  partial.a.pointers = ptrs;
  EXPECT_FALSE(CublasLtGemm::CanImplement(partial).ok());
  GemmProblem empty = p;
  empty.k = 0;
  EXPECT_FALSE(CublasLtGemm::CanImplement(empty).ok());
}

TEST_F(CublasLtGemmTest, AllLayoutsDtypesAndScales) {
  const OperandLayout layouts[] = {OperandLayout::kRowMajor,
                                   OperandLayout::kColMajor};
  for (OperandLayout a : layouts) {
    for (OperandLayout b : layouts) {
      for (OperandLayout c : layouts) {
        for (DType dtype : {DType::kBF16, DType::kFP32}) {
          ProblemSpec spec;
          spec.m = 70;
          spec.n = 96;
          spec.k = 130;
          spec.a = a;
          spec.b = b;
          spec.c = c;
          spec.c_dtype = dtype;
          spec.alpha = 0.75f;
          spec.beta = dtype == DType::kFP32 ? -0.5f : 0.0f;
          CheckAllCandidates(*lt_, spec, rng_);
        }
      }
    }
  }
}

TEST_F(CublasLtGemmTest, BatchesBroadcastAndPadding) {
  for (int variant = 0; variant < 4; ++variant) {
    ProblemSpec spec;
    spec.batch = 3;
    spec.m = 33;
    spec.n = 40;
    spec.k = 64;
    spec.a = variant & 1 ? OperandLayout::kColMajor : OperandLayout::kRowMajor;
    spec.b = OperandLayout::kColMajor;
    spec.broadcast_a = variant == 1;
    spec.broadcast_b = variant == 2;
    spec.pad = variant == 3 ? 5 : 0;
    spec.beta = variant == 3 ? 1.0f : 0.0f;
    CheckAllCandidates(*lt_, spec, rng_);
  }
}

TEST_F(CublasLtGemmTest, PointerArrays) {
  // A batch of one too: the arrays must still be read as arrays.
  for (int64_t batch : {3, 1}) {
    ProblemSpec spec;
    spec.batch = batch;
    spec.m = 32;
    spec.n = 48;
    spec.k = 64;
    spec.b = OperandLayout::kColMajor;
    spec.pointer_arrays = true;
    auto host = MakeHostProblem(spec, rng_);
    auto device = ::matmul::cuda::testing::Upload(host);
    ASSERT_TRUE(device.ok());
    auto plan = lt_->GetPlan(device->problem);
    if (!plan.ok()) {
      GTEST_SKIP() << "this cuBLASLt offers no pointer-array algorithm: "
                   << plan.status();
    }
    CheckAllCandidates(*lt_, spec, rng_);
  }
}

TEST_F(CublasLtGemmTest, RandomTails) {
  for (int i = 0; i < 24; ++i) {
    ProblemSpec spec =
        ::matmul::cuda::testing::RandomSpec(rng_, 96, false, false);
    spec.c =
        spec.c == OperandLayout::kStrided ? OperandLayout::kRowMajor : spec.c;
    CheckAllCandidates(*lt_, spec, rng_);
  }
}

TEST_F(CublasLtGemmTest, EverySurveyedConfigurationComputesTheProduct) {
  // AllAlgos goes beyond the heuristic: each configuration it accepts must
  // run and be right, in both layouts the survey measures.
  for (OperandLayout b : {OperandLayout::kRowMajor, OperandLayout::kColMajor}) {
    ProblemSpec spec;
    spec.m = 136;
    spec.n = 200;
    spec.k = 72;
    spec.b = b;
    auto host = MakeHostProblem(spec, rng_);
    auto device = ::matmul::cuda::testing::Upload(host);
    ASSERT_TRUE(device.ok()) << device.status();
    auto plan = lt_->GetPlan(device->problem);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int searched = 0;
    auto all = lt_->AllAlgos(**plan, [&](int, int, int) { ++searched; });
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_GT(searched, 0);
    ASSERT_FALSE(all->empty());
    auto workspace = DeviceBuffer::Create(lt_->workspace_bytes());
    ASSERT_TRUE(workspace.ok());
    for (const cublasLtMatmulHeuristicResult_t& algo : *all) {
      SCOPED_TRACE(
          ::testing::Message()
          << spec.Name() << " algo id " << CublasLtGemm::AlgoId(algo.algo)
          << " tile "
          << CublasLtGemm::AlgoConfig(algo.algo, CUBLASLT_ALGO_CONFIG_TILE_ID)
          << " stages "
          << CublasLtGemm::AlgoConfig(algo.algo,
                                      CUBLASLT_ALGO_CONFIG_STAGES_ID));
      host = MakeHostProblem(spec, rng_);  // fresh inputs, poisoned C
      device = ::matmul::cuda::testing::Upload(host);
      ASSERT_TRUE(device.ok()) << device.status();
      ASSERT_TRUE(lt_->RunAlgo(**plan, algo, device->problem, nullptr,
                               workspace->data(), workspace->size())
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
      EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2);
      EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host));
    }
  }
}

TEST_F(CublasLtGemmTest, PlansAreCachedPerLayout) {
  ProblemSpec spec;
  spec.m = spec.n = spec.k = 64;
  auto host = MakeHostProblem(spec, rng_);
  auto first = lt_->GetPlan(host.problem);
  auto second = lt_->GetPlan(host.problem);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_GE(lt_->workspace_bytes(), size_t{4} << 20);
}

}  // namespace
}  // namespace matmul::cuda
