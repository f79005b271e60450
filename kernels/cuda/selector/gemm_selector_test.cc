#include "kernels/cuda/selector/gemm_selector.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/families/run_choice.h"
#include "kernels/cuda/testing/gpu_test_util.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

using ::matmul::cuda::testing::MakeHostProblem;
using ::matmul::cuda::testing::OperandLayout;
using ::matmul::cuda::testing::ProblemSpec;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(getpid()) + ".json"))
      .string();
}

SelectorOptions QuickOptions() {
  SelectorOptions options;
  options.background_tuning = false;
  options.min_iterations = 3;
  options.max_iterations = 5;
  options.warmup_iterations = 1;
  options.target_seconds = 0.001;
  return options;
}

GemmProblem ShapeOnly(int64_t m, int64_t n, int64_t k, bool b_transposed) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a.strides = {m * k, k, 1};
  p.b.strides = b_transposed ? Strides{k * n, 1, k} : Strides{k * n, n, 1};
  p.c.strides = {m * n, n, 1};
  return p;
}

TEST(GemmSelectorKey, NamesShapeLayoutDtypeBatch) {
  GemmProblem p = ShapeOnly(5120, 2048, 2048, true);
  EXPECT_EQ(GemmSelector::Key(p), "5120x2048x2048:NT:bf16:b1");
  p.batch = 4;
  p.a.strides.batch = 0;
  p.c_dtype = DType::kFP32;
  EXPECT_EQ(GemmSelector::Key(p), "5120x2048x2048:NT:fp32:b4:bcastA");
  GemmProblem canonical = CanonicalProblem(p);
  EXPECT_EQ(canonical.a.strides.batch, 0);
  EXPECT_EQ(canonical.b.strides.row, 1);
  EXPECT_EQ(canonical.b.strides.col, 2048);
  EXPECT_EQ(GemmSelector::Key(canonical), GemmSelector::Key(p));
  // Batch sizes share the key of the power of two at or above them.
  p.batch = 5;
  EXPECT_EQ(GemmSelector::Key(p), "5120x2048x2048:NT:fp32:b8:bcastA");
  EXPECT_EQ(CanonicalProblem(p).batch, 8);
  // Pointer-array launches (the batcher's) are a mode of their own, and
  // their canonical problem keeps it.
  const void* entries[5] = {};
  void* outputs[5] = {};
  p.a.pointers = p.b.pointers = entries;
  p.c.pointers = outputs;
  EXPECT_EQ(GemmSelector::Key(p), "5120x2048x2048:NT:fp32:b8:ptr");
  EXPECT_EQ(GemmSelector::Key(CanonicalProblem(p)), GemmSelector::Key(p));
}

class GemmSelectorTest : public ::testing::Test {
 protected:
  void SetUp() override { MATMUL_SKIP_WITHOUT_GPU(); }
  std::mt19937_64 rng_{7};
};

TEST_F(GemmSelectorTest, TunePicksTheFastestCandidate) {
  auto selector = GemmSelector::Create(0, QuickOptions());
  ASSERT_TRUE(selector.ok()) << selector.status();
  GemmProblem p = ShapeOnly(256, 512, 384, true);
  auto timings = (*selector)->TimeCandidates(p);
  ASSERT_TRUE(timings.ok()) << timings.status();
  int timed = 0;
  for (const CandidateTiming& t : *timings) {
    if (t.status.ok()) {
      ++timed;
      EXPECT_GT(t.median_seconds, 0.0) << t.choice.name;
      EXPECT_LE(t.min_seconds, t.median_seconds);
    }
    if (t.group != "cublaslt" && t.status.ok()) {
      EXPECT_LE(t.shared_bytes, (*selector)->max_shared_bytes());
    }
  }
  EXPECT_GT(timed, 0);
  auto choice = (*selector)->Tune(p);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_TRUE(choice->tuned);
  EXPECT_FALSE(choice->name.empty());
  auto again = (*selector)->Choose(p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->name, choice->name);
  EXPECT_EQ((*selector)->tuned_count(), 1u);
}

TEST_F(GemmSelectorTest, EveryCandidateComputesTheRightProduct) {
  // With the GB10 limit imposed, as the Spark would run.
  SelectorOptions options = QuickOptions();
  options.max_shared_bytes = kSparkSharedBytes;
  auto selector = GemmSelector::Create(0, options);
  ASSERT_TRUE(selector.ok()) << selector.status();
  for (bool transposed : {false, true}) {
    ProblemSpec spec;
    spec.m = 200;
    spec.n = 136;
    spec.k = 96;
    spec.b = transposed ? OperandLayout::kColMajor : OperandLayout::kRowMajor;
    auto host = MakeHostProblem(spec, rng_);
    auto timings = (*selector)->TimeCandidates(host.problem);
    ASSERT_TRUE(timings.ok()) << timings.status();
    DeviceBuffer workspace;
    for (const CandidateTiming& t : *timings) {
      if (!t.status.ok()) continue;
      SCOPED_TRACE(t.choice.name + " " + spec.Name());
      EXPECT_LE(t.shared_bytes, kSparkSharedBytes);
      host = MakeHostProblem(spec, rng_);
      auto device = ::matmul::cuda::testing::Upload(host);
      ASSERT_TRUE(device.ok());
      ASSERT_TRUE(
          RunChoice(t.choice, device->problem, nullptr, workspace).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
      EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2);
    }
  }
}

TEST_F(GemmSelectorTest, CacheRoundTripsThroughJson) {
  const std::string path = TempPath("selector_cache");
  std::filesystem::remove(path);
  SelectorOptions options = QuickOptions();
  options.tuning_cache = path;
  std::string nn_name, nt_name;
  {
    auto selector = GemmSelector::Create(0, options);
    ASSERT_TRUE(selector.ok()) << selector.status();
    auto nn = (*selector)->Tune(ShapeOnly(128, 256, 64, false));
    auto nt = (*selector)->Tune(ShapeOnly(128, 256, 64, true));
    ASSERT_TRUE(nn.ok() && nt.ok());
    nn_name = nn->name;
    nt_name = nt->name;
  }
  std::ifstream in(path);
  nlohmann::json root = nlohmann::json::parse(in);
  ASSERT_EQ(root["format"], 1);
  ASSERT_EQ(root["environments"].size(), 1u);
  {
    auto selector = GemmSelector::Create(0, options);
    ASSERT_TRUE(selector.ok());
    EXPECT_EQ((*selector)->tuned_count(), 2u);
    auto nn = (*selector)->Choose(ShapeOnly(128, 256, 64, false));
    ASSERT_TRUE(nn.ok());
    EXPECT_TRUE(nn->tuned);
    EXPECT_EQ(nn->name, nn_name);
    auto nt = (*selector)->Choose(ShapeOnly(128, 256, 64, true));
    ASSERT_TRUE(nt.ok());
    EXPECT_EQ(nt->name, nt_name);
  }
  // A damaged file costs a re-tune, not the service.
  { std::ofstream(path) << "{ not json"; }
  auto selector = GemmSelector::Create(0, options);
  ASSERT_TRUE(selector.ok());
  EXPECT_EQ((*selector)->tuned_count(), 0u);
  std::filesystem::remove(path);
}

TEST_F(GemmSelectorTest, UnknownShapesAreTunedInTheBackground) {
  SelectorOptions options = QuickOptions();
  options.background_tuning = true;
  auto selector = GemmSelector::Create(0, options);
  ASSERT_TRUE(selector.ok());
  GemmProblem p = ShapeOnly(96, 160, 224, true);
  auto first = (*selector)->Choose(p);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->tuned);  // heuristic pick, at once
  (*selector)->WaitForBackgroundTuning();
  auto later = (*selector)->Choose(p);
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(later->tuned);
}

// What the selector keeps per shape is bounded: the least recently used
// choice is forgotten (from memory and the cache file), and a new shape met
// while the tuning queue is full keeps nothing until it is met again.
TEST_F(GemmSelectorTest, KeepsAtMostItsBoundOfShapes) {
  const std::string path = TempPath("selector_bound");
  std::filesystem::remove(path);
  SelectorOptions options = QuickOptions();
  options.tuning_cache = path;
  options.max_shape_choices = 2;
  {
    auto selector = GemmSelector::Create(0, options);
    ASSERT_TRUE(selector.ok()) << selector.status();
    ASSERT_TRUE((*selector)->Tune(ShapeOnly(128, 256, 64, false)).ok());
    ASSERT_TRUE((*selector)->Tune(ShapeOnly(128, 256, 64, true)).ok());
    // A use makes NN the most recent: the third shape forgets NT.
    ASSERT_TRUE((*selector)->Choose(ShapeOnly(128, 256, 64, false)).ok());
    ASSERT_TRUE((*selector)->Tune(ShapeOnly(64, 128, 32, false)).ok());
    EXPECT_EQ((*selector)->tuned_count(), 2u);
    auto nn = (*selector)->Choose(ShapeOnly(128, 256, 64, false));
    ASSERT_TRUE(nn.ok());
    EXPECT_TRUE(nn->tuned);
    auto nt = (*selector)->Choose(ShapeOnly(128, 256, 64, true));
    ASSERT_TRUE(nt.ok());
    EXPECT_FALSE(nt->tuned);
  }
  std::ifstream in(path);
  nlohmann::json root = nlohmann::json::parse(in);
  ASSERT_EQ(root["environments"].size(), 1u);
  EXPECT_EQ(root["environments"].begin().value()["choices"].size(), 2u)
      << root.dump(1);
  std::filesystem::remove(path);

  // A queue of one: while the first shape is tuned, others keep nothing.
  options = QuickOptions();
  options.background_tuning = true;
  options.max_queued_tunings = 1;
  auto selector = GemmSelector::Create(0, options);
  ASSERT_TRUE(selector.ok());
  for (int64_t m = 64; m <= 64 * 8; m += 64) {
    auto choice = (*selector)->Choose(ShapeOnly(m, 160, 224, true));
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_FALSE(choice->tuned);
  }
  (*selector)->WaitForBackgroundTuning();
  const GemmSelector::TuningCounts counts = (*selector)->tuning_counts();
  EXPECT_GE(counts.succeeded, 1);
  EXPECT_LT(counts.succeeded, 8);
  EXPECT_EQ(counts.failed, 0);
  EXPECT_EQ((*selector)->tuned_count(), static_cast<size_t>(counts.succeeded));
}

TEST_F(GemmSelectorTest, RunFallsBackWhenTheChoiceCannotTakeTheInstance) {
  auto selector = GemmSelector::Create(0, QuickOptions());
  ASSERT_TRUE(selector.ok());
  // Odd sizes, padding and an unaligned batch stride.
  ProblemSpec spec;
  spec.batch = 2;
  spec.m = 37;
  spec.n = 29;
  spec.k = 53;
  spec.pad = 3;
  spec.b = OperandLayout::kColMajor;
  auto host = MakeHostProblem(spec, rng_);
  ASSERT_TRUE((*selector)->Tune(host.problem).ok());
  auto device = ::matmul::cuda::testing::Upload(host);
  ASSERT_TRUE(device.ok());
  DeviceBuffer workspace;
  auto ran = (*selector)->Run(device->problem, nullptr, workspace);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
  EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2) << ran->name;
}

}  // namespace
}  // namespace matmul::cuda
