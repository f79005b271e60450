#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/bf16.h"
#include "common/gemm/reference_gemm.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

std::vector<uint16_t> RandomBf16(size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (uint16_t& x : out) x = FloatToBf16(normal(rng));
  return out;
}

struct Case {
  int64_t batch, m, n, k;
  bool ta, tb;
  bool broadcast_b;
  DType out;
  float alpha, beta;
};

// Runs one case with the operands laid out as the transposes say, compares
// with the FP64 reference and checks every output element was written.
void RunCase(const Case& c, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::Message()
               << c.batch << "x" << c.m << "x" << c.n << "x" << c.k << " ta="
               << c.ta << " tb=" << c.tb << " out=" << DTypeName(c.out)
               << " alpha=" << c.alpha << " beta=" << c.beta);
  const int64_t b_batch = c.broadcast_b ? 1 : c.batch;
  std::vector<uint16_t> a = RandomBf16(c.batch * c.m * c.k, rng);
  std::vector<uint16_t> b = RandomBf16(b_batch * c.k * c.n, rng);
  GemmProblem p;
  p.batch = c.batch;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.a.data = a.data();
  p.a.strides = c.ta ? Strides{c.m * c.k, 1, c.m} : Strides{c.m * c.k, c.k, 1};
  p.b.data = b.data();
  p.b.strides = c.tb ? Strides{c.k * c.n, 1, c.k} : Strides{c.k * c.n, c.n, 1};
  if (c.broadcast_b) p.b.strides.batch = 0;
  const size_t outputs = static_cast<size_t>(c.batch * c.m * c.n);
  std::vector<uint16_t> c16;
  std::vector<float> c32;
  if (c.out == DType::kBF16) {
    c16 = RandomBf16(outputs, rng);
    p.c.data = c16.data();
  } else {
    c32.resize(outputs);
    std::normal_distribution<float> normal;
    for (float& x : c32) x = normal(rng);
    p.c.data = c32.data();
  }
  p.c.strides = {c.m * c.n, c.n, 1};
  p.c_dtype = c.out;
  p.alpha = c.alpha;
  p.beta = c.beta;
  std::vector<double> expected = ReferenceGemm(p);
  if (c.beta == 0.0f) {  // poison: every element must be overwritten
    if (c.out == DType::kBF16) std::fill(c16.begin(), c16.end(), 0x7fc1);
    if (c.out == DType::kFP32) std::fill(c32.begin(), c32.end(), NAN);
  }
  auto backend = CpuBackend::Create();
  absl::StatusOr<GemmRunInfo> run = backend->RunHost(p);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->kernel, "openblas_sgemm");
  const double error = RelativeError(ReadOutput(p), expected);
  EXPECT_LT(error, c.out == DType::kBF16 ? 1e-2 : 1e-5);
}

TEST(CpuBackendTest, RandomShapesLayoutsAndEpilogues) {
  std::mt19937_64 rng(20261129);
  const int64_t dims[] = {1, 7, 16, 127, 300, 1000};
  std::uniform_int_distribution<int> pick(0, 5);
  for (int i = 0; i < 40; ++i) {
    Case c;
    c.m = dims[pick(rng)];
    c.n = dims[pick(rng)];
    c.k = i == 7 ? 1100 : dims[pick(rng)];  // one K beyond the block size
    c.batch = 1 + i % 3;
    c.ta = i & 1;
    c.tb = i & 2;
    c.broadcast_b = (i % 5 == 0);
    c.out = (i % 4 < 2) ? DType::kBF16 : DType::kFP32;
    c.alpha = (i % 3 == 0) ? 1.0f : -0.75f;
    c.beta = (i % 6 == 1) ? 0.5f : 0.0f;
    RunCase(c, rng);
  }
}

}  // namespace
}  // namespace matmul
