// The LoRA lists of product_list.h through an in-process CPU daemon, on
// operands in a shared-memory region with random BF16 data, against an
// FP64 reference: the forward of two projections sharing x (one onto a
// preset bias), then their backward with the input's gradient.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/product_list.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "common/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/regions_fixture.h"

namespace matmul {
namespace {

using ::matmul::region_tests::kTimeout;
using ::testing::HasSubstr;

constexpr int64_t kM = 48, kIn = 72, kOut = 40, kRank = 8;
constexpr int kProjections = 2;
constexpr float kScale = 2.0f;
constexpr double kTolerance = 1e-2;

// A dense row-major matrix in FP64 and where its copy lies in the region.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<double> values;
  ListOperand operand;

  double at(int64_t i, int64_t j) const { return values[i * cols + j]; }
};

// out[i][j] = sum_k op(a)[i][k] * op(b)[k][j], in FP64.
std::vector<double> Multiply(const Matrix& a, bool transpose_a, const Matrix& b,
                             bool transpose_b) {
  const int64_t m = transpose_a ? a.cols : a.rows;
  const int64_t k = transpose_a ? a.rows : a.cols;
  const int64_t n = transpose_b ? b.rows : b.cols;
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) {
        sum += (transpose_a ? a.at(l, i) : a.at(i, l)) *
               (transpose_b ? b.at(j, l) : b.at(l, j));
      }
      out[i * n + j] = sum;
    }
  }
  return out;
}

// ||got - want|| / ||want||.
double RelativeError(const std::vector<double>& got,
                     const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// The fixture's daemon, session and shm region (regions_fixture.h), and a
// request ring when a test attaches one.
class ProductListEndToEndTest : public region_tests::RegionTest {
 protected:
  void TearDown() override {
    ring_.reset();
    region_tests::RegionTest::TearDown();
  }

  // The next free place in the region, 256-byte aligned.
  ListOperand Carve(int64_t rows, int64_t cols, DType dtype) {
    const uint64_t offset = next_offset_;
    next_offset_ += (rows * cols * DTypeSize(dtype) + 255) / 256 * 256;
    EXPECT_LE(next_offset_, static_cast<uint64_t>(kSegmentBytes));
    return ListOperand::InRegion(region_->id(), offset, {rows, cols}, dtype);
  }

  char* Bytes(const ListOperand& operand) {
    return segment_->bytes().data() + operand.offset_bytes;
  }

  // A matrix of values uniform in [-1, 1], rounded to BF16 (or FP32) both
  // in the region and in the FP64 copy the reference reads.
  Matrix Random(int64_t rows, int64_t cols, DType dtype = DType::kBF16) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    Matrix matrix{rows, cols, {}, Carve(rows, cols, dtype)};
    char* bytes = Bytes(matrix.operand);
    for (int64_t i = 0; i < rows * cols; ++i) {
      float value = uniform(rng_);
      if (dtype == DType::kBF16) {
        const uint16_t bits = FloatToBf16(value);
        std::memcpy(bytes + 2 * i, &bits, 2);
        value = Bf16ToFloat(bits);
      } else {
        std::memcpy(bytes + 4 * i, &value, 4);
      }
      matrix.values.push_back(value);
    }
    return matrix;
  }

  // An output of the list, filled with NaN bytes so that an element the
  // daemon does not write fails the check.
  Matrix Output(int64_t rows, int64_t cols, DType dtype) {
    Matrix matrix{rows, cols, {}, Carve(rows, cols, dtype)};
    std::memset(Bytes(matrix.operand), 0xFF, rows * cols * DTypeSize(dtype));
    return matrix;
  }

  std::vector<double> Read(const ListOperand& operand) {
    const int64_t count = operand.shape[0] * operand.shape[1];
    const char* bytes = Bytes(operand);
    std::vector<double> values;
    for (int64_t i = 0; i < count; ++i) {
      if (operand.dtype == DType::kBF16) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        values.push_back(Bf16ToFloat(bits));
      } else {
        float value;
        std::memcpy(&value, bytes + 4 * i, 4);
        values.push_back(value);
      }
    }
    return values;
  }

  // Through the request ring when one is attached, else a unary call.
  absl::StatusOr<v1::MatmulResponse> Run(const ProductList& list) {
    absl::StatusOr<v1::MatmulRequest> request = list.Build();
    if (!request.ok()) return request.status();
    if (ring_ != nullptr) return ring_->Matmul(*request, kTimeout);
    return daemon_.client().Matmul(*request, kTimeout);
  }

  std::unique_ptr<RequestRing> ring_;
  uint64_t next_offset_ = 0;
};

TEST_F(ProductListEndToEndTest, LoraForwardAndBackwardMatchFp64) {
  const Matrix x = Random(kM, kIn);
  struct Projection {
    Matrix w, a, b, xa, y, bias, dy, da, db;
  };
  std::vector<Projection> projections(kProjections);
  std::vector<LoraForwardProjection> forward;
  for (int p = 0; p < kProjections; ++p) {
    Projection& projection = projections[p];
    projection.w = Random(kOut, kIn);
    projection.a = Random(kRank, kIn);
    projection.b = Random(kOut, kRank);
    projection.xa = Output(kM, kRank, DType::kBF16);
    // Projection 1 adds onto a bias its y holds already (BF16 output);
    // projection 0 writes FP32.
    if (p == 1) {
      projection.y = Random(kM, kOut);
      projection.bias = projection.y;
    } else {
      projection.y = Output(kM, kOut, DType::kFP32);
    }
    forward.push_back({.weights = {.w = projection.w.operand,
                                   .a = projection.a.operand,
                                   .b = projection.b.operand,
                                   .scale = kScale},
                       .xa = projection.xa.operand,
                       .y = projection.y.operand,
                       .y_holds_bias = p == 1});
  }
  ProductList forward_list(session_->session_id());
  ASSERT_TRUE(AddLoraForward(forward_list, x.operand, forward).ok());
  absl::StatusOr<v1::MatmulResponse> forward_response = Run(forward_list);
  ASSERT_TRUE(forward_response.ok()) << forward_response.status();
  EXPECT_FALSE(forward_response->has_c());
  EXPECT_FALSE(forward_response->kernel().empty());

  for (int p = 0; p < kProjections; ++p) {
    SCOPED_TRACE(p);
    Projection& projection = projections[p];
    std::vector<double> xa = Multiply(x, false, projection.a, true);
    EXPECT_LT(RelativeError(Read(projection.xa.operand), xa), kTolerance);
    // y = x W^T + s (x A^T) B^T (+ bias), the adapter from exact xa.
    projection.xa.values = xa;
    std::vector<double> y = Multiply(x, false, projection.w, true);
    std::vector<double> adapter =
        Multiply(projection.xa, false, projection.b, true);
    for (size_t i = 0; i < y.size(); ++i) {
      y[i] += kScale * adapter[i] + (p == 1 ? projection.bias.values[i] : 0);
    }
    EXPECT_LT(RelativeError(Read(projection.y.operand), y), kTolerance);
  }

  // The backward of both, with dx summed over them.
  std::vector<LoraBackwardProjection> backward;
  for (int p = 0; p < kProjections; ++p) {
    Projection& projection = projections[p];
    projection.dy = Random(kM, kOut);
    projection.da = Output(kRank, kIn, DType::kFP32);
    projection.db = Output(kOut, kRank, DType::kFP32);
    backward.push_back({.weights = forward[p].weights,
                        .xa = projection.xa.operand,
                        .dy = projection.dy.operand,
                        .da = projection.da.operand,
                        .db = projection.db.operand});
  }
  const Matrix dx = Output(kM, kIn, DType::kFP32);
  ProductList backward_list(session_->session_id());
  ASSERT_TRUE(
      AddLoraBackward(backward_list, x.operand, backward, dx.operand).ok());
  absl::StatusOr<v1::MatmulResponse> backward_response = Run(backward_list);
  ASSERT_TRUE(backward_response.ok()) << backward_response.status();

  std::vector<double> want_dx(kM * kIn, 0.0);
  for (int p = 0; p < kProjections; ++p) {
    SCOPED_TRACE(p);
    const Projection& projection = projections[p];
    // t = dy B; dB = s dy^T xa; dA = s t^T x; dx += dy W + s t A.
    Matrix t{
        kM, kRank, Multiply(projection.dy, false, projection.b, false), {}};
    std::vector<double> db =
        Multiply(projection.dy, true, projection.xa, false);
    std::vector<double> da = Multiply(t, true, x, false);
    for (double& value : db) value *= kScale;
    for (double& value : da) value *= kScale;
    EXPECT_LT(RelativeError(Read(projection.db.operand), db), kTolerance);
    EXPECT_LT(RelativeError(Read(projection.da.operand), da), kTolerance);
    std::vector<double> base =
        Multiply(projection.dy, false, projection.w, false);
    std::vector<double> adapter = Multiply(t, false, projection.a, false);
    for (size_t i = 0; i < want_dx.size(); ++i) {
      want_dx[i] += base[i] + kScale * adapter[i];
    }
  }
  EXPECT_LT(RelativeError(Read(dx.operand), want_dx), kTolerance);
}

// A list has no top-level C, and its outputs are all in regions: it fits
// a ring slot like any product with its output in place.
TEST_F(ProductListEndToEndTest, ALoraForwardGoesThroughARequestRing) {
  absl::StatusOr<std::unique_ptr<RequestRing>> ring =
      RequestRing::Attach(daemon_.client(), *session_);
  ASSERT_TRUE(ring.ok()) << ring.status();
  ring_ = *std::move(ring);
  const Matrix x = Random(kM, kIn);
  const Matrix w = Random(kOut, kIn);
  const Matrix a = Random(kRank, kIn);
  Matrix b = Random(kOut, kRank);
  Matrix xa = Output(kM, kRank, DType::kBF16);
  const Matrix y = Output(kM, kOut, DType::kBF16);
  const LoraForwardProjection projection = {.weights = {.w = w.operand,
                                                        .a = a.operand,
                                                        .b = b.operand,
                                                        .scale = kScale},
                                            .xa = xa.operand,
                                            .y = y.operand};
  ProductList list(session_->session_id());
  ASSERT_TRUE(AddLoraForward(list, x.operand, {&projection, 1}).ok());
  absl::StatusOr<v1::MatmulResponse> response = Run(list);
  ASSERT_TRUE(response.ok()) << response.status();

  xa.values = Multiply(x, false, a, true);
  std::vector<double> want = Multiply(x, false, w, true);
  const std::vector<double> adapter = Multiply(xa, false, b, true);
  for (size_t i = 0; i < want.size(); ++i) want[i] += kScale * adapter[i];
  EXPECT_LT(RelativeError(Read(y.operand), want), kTolerance);
}

TEST_F(ProductListEndToEndTest, TheDaemonNamesTheProductAtFault) {
  const Matrix x = Random(kM, kIn);
  const Matrix w = Random(kOut, kIn);
  const Matrix y = Output(kM, kOut, DType::kBF16);
  ProductList list(session_->session_id());
  list.Add(x.operand, w.operand, list.NewScratch({kM, kOut}),
           {.transpose_b = true});
  // Reads past the end of product 0's buffer: only the daemon knows
  // where that ends.
  list.Add(ListOperand::InScratch(0, 2 * kM * kOut, {kM, kOut}),
           Random(kOut, kOut).operand, y.operand);
  absl::StatusOr<v1::MatmulResponse> response = Run(list);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("product 1: A"));
}

}  // namespace
}  // namespace matmul
