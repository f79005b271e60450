#include "common/gemm/matrix_layout.h"

#include "common/gemm/shape_name.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

TEST(MatrixLayoutTest, DenseRowAndColumnMajor) {
  const MatrixLayout row = ClassifyLayout({0, 64, 1}, 32, 64);
  EXPECT_EQ(row.order, MatrixOrder::kRowMajor);
  EXPECT_EQ(row.ld, 64);
  const MatrixLayout col = ClassifyLayout({0, 1, 32}, 32, 64);
  EXPECT_EQ(col.order, MatrixOrder::kColMajor);
  EXPECT_EQ(col.ld, 32);
}

TEST(MatrixLayoutTest, PaddedLeadingDimensionKeepsItsOrder) {
  EXPECT_EQ(ClassifyLayout({0, 80, 1}, 32, 64).ld, 80);
  EXPECT_EQ(ClassifyLayout({0, 1, 40}, 32, 64).ld, 40);
}

TEST(MatrixLayoutTest, OverlappingOrNonUnitStridesAreStrided) {
  // Rows closer than a row's length overlap: no kernel may take them as is.
  EXPECT_EQ(ClassifyLayout({0, 10, 1}, 32, 64).order, MatrixOrder::kStrided);
  EXPECT_EQ(ClassifyLayout({0, 0, 1}, 32, 64).order, MatrixOrder::kStrided);
  EXPECT_EQ(ClassifyLayout({0, 128, 2}, 32, 64).order, MatrixOrder::kStrided);
  EXPECT_EQ(ClassifyLayout({0, 1, 16}, 32, 64).order, MatrixOrder::kStrided);
}

TEST(MatrixLayoutTest, ASingleRowOrColumnTakesTheOrderItsStridesSay) {
  // One row: the row stride is irrelevant.
  MatrixLayout one_row = ClassifyLayout({0, 0, 1}, 1, 64);
  EXPECT_EQ(one_row.order, MatrixOrder::kRowMajor);
  EXPECT_EQ(one_row.ld, 64);
  one_row = ClassifyLayout({0, 1, 7}, 1, 64);
  EXPECT_EQ(one_row.order, MatrixOrder::kColMajor);
  EXPECT_EQ(one_row.ld, 7);
  // One column: the column stride is irrelevant.
  MatrixLayout one_col = ClassifyLayout({0, 1, 0}, 64, 1);
  EXPECT_EQ(one_col.order, MatrixOrder::kColMajor);
  EXPECT_EQ(one_col.ld, 64);
  one_col = ClassifyLayout({0, 5, 1}, 64, 1);
  EXPECT_EQ(one_col.order, MatrixOrder::kRowMajor);
  EXPECT_EQ(one_col.ld, 5);
  // A 1x1 operand is row-major whatever its strides.
  EXPECT_EQ(ClassifyLayout({0, 0, 0}, 1, 1).order, MatrixOrder::kRowMajor);
}

TEST(MatrixLayoutTest, TagsOfAProblem) {
  GemmProblem p;
  p.m = 128;
  p.n = 256;
  p.k = 64;
  p.a.strides = {0, 64, 1};  // A row-major
  p.b.strides = {0, 1, 64};  // B = W^T of an nn.Linear weight W [n, k]
  EXPECT_EQ(LayoutTagA(p), 'N');
  EXPECT_EQ(LayoutTagB(p), 'T');
  EXPECT_EQ(ShapeName(p), "128x256x64:NT");
  p.b.strides = {0, 3, 3};
  EXPECT_EQ(LayoutTagB(p), 'S');
}

}  // namespace
}  // namespace matmul
