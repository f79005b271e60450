#include "common/gemm/gemm_request.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace matmul {
namespace {

bool SameStrides(const Strides& x, const Strides& y) {
  return x.batch == y.batch && x.row == y.row && x.col == y.col;
}

TEST(ToStoredMatrixTest, RankTwoHasOneMatrixAndNoBatchStride) {
  const std::vector<int64_t> dims = {5, 7};
  const std::vector<int64_t> strides = {9, 1};
  StoredMatrix stored = ToStoredMatrix(dims, strides);
  EXPECT_EQ(stored.batch, 1);
  EXPECT_EQ(stored.rows, 5);
  EXPECT_EQ(stored.cols, 7);
  EXPECT_TRUE(SameStrides(stored.strides, {0, 9, 1}));
}

TEST(ToStoredMatrixTest, RankThreeKeepsTheBatchStrideUnlessOneMatrix) {
  const std::vector<int64_t> strides = {100, 10, 1};
  StoredMatrix batched =
      ToStoredMatrix(std::vector<int64_t>{3, 4, 10}, strides);
  EXPECT_EQ(batched.batch, 3);
  EXPECT_TRUE(SameStrides(batched.strides, {100, 10, 1}));
  // A batch of one broadcasts: its batch stride must not be used.
  StoredMatrix single = ToStoredMatrix(std::vector<int64_t>{1, 4, 10}, strides);
  EXPECT_EQ(single.batch, 1);
  EXPECT_EQ(single.strides.batch, 0);
}

StoredMatrix Dense(int64_t batch, int64_t rows, int64_t cols) {
  return {.batch = batch,
          .rows = rows,
          .cols = cols,
          .strides = {batch > 1 ? rows * cols : 0, cols, 1}};
}

// Random sizes and transposes: op(A) is [m, k] and op(B) is [k, n] with the
// transposed operand's strides swapped.
TEST(ProductShapeTest, FoldsTransposesIntoStrides) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> size(1, 300);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t m = size(rng), n = size(rng), k = size(rng);
    const bool ta = rng() & 1, tb = rng() & 1;
    v1::MatmulRequest request;
    request.set_transpose_a(ta);
    request.set_transpose_b(tb);
    const StoredMatrix a = ta ? Dense(1, k, m) : Dense(1, m, k);
    const StoredMatrix b = tb ? Dense(1, n, k) : Dense(1, k, n);
    absl::StatusOr<GemmProblem> p = ProductShape(request, a, b);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->m, m);
    EXPECT_EQ(p->n, n);
    EXPECT_EQ(p->k, k);
    EXPECT_EQ(p->batch, 1);
    EXPECT_TRUE(
        SameStrides(p->a.strides, ta ? Strides{0, 1, m} : Strides{0, k, 1}));
    EXPECT_TRUE(
        SameStrides(p->b.strides, tb ? Strides{0, 1, k} : Strides{0, n, 1}));
  }
}

TEST(ProductShapeTest, AlphaAndBetaDefaultToOneAndZero) {
  v1::MatmulRequest request;
  absl::StatusOr<GemmProblem> p =
      ProductShape(request, Dense(1, 2, 3), Dense(1, 3, 4));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->alpha, 1.0f);
  EXPECT_EQ(p->beta, 0.0f);
  request.set_alpha(0.0f);  // set to the other default: still honoured
  request.set_beta(-2.5f);
  p = ProductShape(request, Dense(1, 2, 3), Dense(1, 3, 4));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->alpha, 0.0f);
  EXPECT_EQ(p->beta, -2.5f);
}

TEST(ProductShapeTest, ABatchOfOneBroadcasts) {
  v1::MatmulRequest request;
  absl::StatusOr<GemmProblem> p =
      ProductShape(request, Dense(1, 2, 3), Dense(6, 3, 4));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch, 6);
  EXPECT_EQ(p->a.strides.batch, 0);
  EXPECT_EQ(p->b.strides.batch, 12);
  // The single matrix's own batch stride, whatever it is, is not used.
  StoredMatrix single = Dense(1, 3, 4);
  single.strides.batch = 99;
  p = ProductShape(request, Dense(6, 2, 3), single);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch, 6);
  EXPECT_EQ(p->a.strides.batch, 6);
  EXPECT_EQ(p->b.strides.batch, 0);
}

TEST(ProductShapeTest, RefusesMismatchedKAndBatches) {
  v1::MatmulRequest request;
  request.set_transpose_b(true);
  absl::StatusOr<GemmProblem> p =
      ProductShape(request, Dense(1, 2, 3), Dense(1, 4, 5));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "inner dimensions disagree: op(A) is 2x3 and op(B) is 5x4 "
            "(transpose_a=0, transpose_b=1); K must match");
  p = ProductShape(v1::MatmulRequest(), Dense(3, 2, 3), Dense(2, 3, 4));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "batch sizes disagree: A has 3, B has 2; they must be equal or "
            "one of them 1");
}

}  // namespace
}  // namespace matmul
