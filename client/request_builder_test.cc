#include "client/request_builder.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseGemmShapeTest, AcceptsThreePositiveIntegers) {
  absl::StatusOr<GemmShape> shape = ParseGemmShape("127x255x63");
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->m, 127);
  EXPECT_EQ(shape->n, 255);
  EXPECT_EQ(shape->k, 63);
  EXPECT_TRUE(ParseGemmShape("1X2x3").ok());
}

TEST(ParseGemmShapeTest, RejectsMalformedShapes) {
  for (const char* text :
       {"", "1x2", "1x2x3x4", "0x2x3", "-1x2x3", "ax2x3", "1x2x", "1,2,3"}) {
    absl::StatusOr<GemmShape> shape = ParseGemmShape(text);
    EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument)
        << text;
    EXPECT_THAT(shape.status().message(), HasSubstr("MxNxK")) << text;
  }
}

TEST(ParseDTypeTest, KnownAndUnknownNames) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("fp32"), DType::kFP32);
  EXPECT_EQ(*ParseDType("float32"), DType::kFP32);
  EXPECT_EQ(ParseDType("fp16").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DTypeTest, ProtoRoundTripAndUnspecified) {
  EXPECT_EQ(*FromProtoDType(ToProtoDType(DType::kBF16)), DType::kBF16);
  EXPECT_EQ(*FromProtoDType(ToProtoDType(DType::kFP32)), DType::kFP32);
  EXPECT_EQ(FromProtoDType(v1::DTYPE_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StridedExtentTest, DenseStridedBroadcastAndEmpty) {
  EXPECT_EQ(*StridedExtentElements({3, 4}, {}), 12);
  EXPECT_EQ(*StridedExtentElements({2, 3, 4}, {}), 24);
  // Rows padded to 6 elements: the last row needs only its 4.
  EXPECT_EQ(*StridedExtentElements({3, 4}, {6, 1}), 16);
  // Broadcast over the batch: one matrix.
  EXPECT_EQ(*StridedExtentElements({5, 3, 4}, {0, 4, 1}), 12);
  // Column-major.
  EXPECT_EQ(*StridedExtentElements({3, 4}, {1, 3}), 12);
  EXPECT_EQ(*StridedExtentElements({0, 4}, {}), 0);
}

TEST(StridedExtentTest, RejectsBadInput) {
  EXPECT_FALSE(StridedExtentElements({-1, 4}, {}).ok());
  EXPECT_FALSE(StridedExtentElements({3, 4}, {-4, 1}).ok());
  EXPECT_FALSE(StridedExtentElements({3, 4}, {1}).ok());
  const int64_t big = int64_t{1} << 40;
  EXPECT_FALSE(StridedExtentElements({big, big}, {}).ok());
  EXPECT_FALSE(StridedExtentElements({big, 2}, {big, 1}).ok());
}

TEST(InlineTensorTest, MakeAndReadBackWithStrides) {
  // A 2x3 matrix stored in rows of 4 floats (the 4th is padding).
  const std::vector<float> storage = {1, 2, 3, -1, 4, 5, 6};
  absl::StatusOr<v1::Tensor> tensor =
      MakeInlineTensor(DType::kFP32, {2, 3}, storage.data(), {4, 1});
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->inline_data().size(), 7 * sizeof(float));
  EXPECT_THAT(tensor->strides(), ElementsAre(4, 1));

  absl::StatusOr<HostMatrix> matrix = ReadHostMatrix(*tensor);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  EXPECT_EQ(matrix->batch, 1);
  EXPECT_EQ(matrix->rows, 2);
  EXPECT_EQ(matrix->cols, 3);
  EXPECT_THAT(matrix->values, ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST(InlineTensorTest, Bf16Broadcast) {
  const std::vector<uint16_t> storage = {FloatToBf16(1.5f), FloatToBf16(-2.0f)};
  absl::StatusOr<v1::Tensor> tensor =
      MakeInlineTensor(DType::kBF16, {3, 1, 2}, storage.data(), {0, 2, 1});
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  absl::StatusOr<HostMatrix> matrix = ReadHostMatrix(*tensor);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  EXPECT_EQ(matrix->batch, 3);
  EXPECT_THAT(matrix->values, ElementsAre(1.5, -2, 1.5, -2, 1.5, -2));
}

TEST(InlineTensorTest, ViewRejectsWrongByteCountRankAndDtype) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DTYPE_BF16);
  tensor.add_shape(2);
  tensor.add_shape(2);
  tensor.set_inline_data(std::string(6, '\0'));
  EXPECT_THAT(ViewInlineTensor(tensor).status().message(),
              HasSubstr("expected 8"));
  tensor.set_inline_data(std::string(8, '\0'));
  EXPECT_TRUE(ViewInlineTensor(tensor).ok());
  tensor.add_shape(1);
  tensor.add_shape(1);
  EXPECT_THAT(ViewInlineTensor(tensor).status().message(), HasSubstr("rank"));
  tensor.clear_shape();
  tensor.add_shape(2);
  tensor.add_shape(2);
  tensor.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_FALSE(ViewInlineTensor(tensor).ok());
  tensor.set_dtype(v1::DTYPE_BF16);
  tensor.mutable_region()->set_region_id("r");
  EXPECT_THAT(ViewInlineTensor(tensor).status().message(), HasSubstr("region"));
}

TEST(MakeRandomRequestTest, ShapesFollowTransposesAndBatch) {
  std::mt19937_64 rng(1);
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest({.m = 7,
                         .n = 5,
                         .k = 3,
                         .batch = 2,
                         .transpose_a = true,
                         .transpose_b = true},
                        rng);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->a().shape(), ElementsAre(2, 3, 7));
  EXPECT_THAT(request->b().shape(), ElementsAre(2, 5, 3));
  EXPECT_TRUE(request->a().strides().empty());
  EXPECT_EQ(request->a().inline_data().size(), 2u * 3 * 7 * 2);
  EXPECT_TRUE(request->transpose_a());
  EXPECT_TRUE(request->transpose_b());
  EXPECT_FALSE(request->has_alpha());
  EXPECT_FALSE(request->has_beta());
  EXPECT_FALSE(request->has_c());
  EXPECT_EQ(request->out_dtype(), v1::DTYPE_UNSPECIFIED);
}

TEST(MakeRandomRequestTest, BroadcastPaddingAndC) {
  std::mt19937_64 rng(2);
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest({.m = 4,
                         .n = 6,
                         .k = 5,
                         .batch = 3,
                         .alpha = 0.5f,
                         .beta = 2.0f,
                         .out_dtype = DType::kFP32,
                         .broadcast_b = true,
                         .row_padding = 2},
                        rng);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->a().strides(), ElementsAre(4 * 7, 7, 1));
  EXPECT_THAT(request->b().shape(), ElementsAre(3, 5, 6));
  EXPECT_THAT(request->b().strides(), ElementsAre(0, 8, 1));
  EXPECT_EQ(request->b().inline_data().size(), (4u * 8 + 6) * 2);
  ASSERT_TRUE(request->has_c());
  EXPECT_EQ(request->c().dtype(), v1::DTYPE_FP32);
  EXPECT_THAT(request->c().shape(), ElementsAre(3, 4, 6));
  EXPECT_EQ(request->alpha(), 0.5f);
  EXPECT_EQ(request->out_dtype(), v1::DTYPE_FP32);
  // Padding holds NaN so that a server reading it is caught.
  uint16_t padding;
  std::memcpy(&padding, request->a().inline_data().data() + 5 * 2, 2);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(padding)));
}

TEST(MakeRandomRequestTest, ZeroDimensionsAllowedNegativeRejected) {
  std::mt19937_64 rng(3);
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest({.m = 0, .n = 4, .k = 4}, rng);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->a().inline_data().empty());
  EXPECT_FALSE(MakeRandomRequest({.m = -1, .n = 4, .k = 4}, rng).ok());
  EXPECT_FALSE(MakeRandomRequest(
                   {.m = int64_t{1} << 20, .n = 4, .k = int64_t{1} << 20}, rng)
                   .ok());
}

// Computes the product of `request` with loops written independently of
// GemmProblemFromRequest (from dense FP64 copies of the operands), and
// packs it as a server would: contiguous, in the requested output dtype.
v1::MatmulResponse SolveIndependently(const v1::MatmulRequest& request) {
  HostMatrix a = *ReadHostMatrix(request.a());
  HostMatrix b = *ReadHostMatrix(request.b());
  const int64_t batch = std::max(a.batch, b.batch);
  const int64_t m = request.transpose_a() ? a.cols : a.rows;
  const int64_t k = request.transpose_a() ? a.rows : a.cols;
  const int64_t n = request.transpose_b() ? b.rows : b.cols;
  const double alpha = request.has_alpha() ? request.alpha() : 1.0;
  const double beta = request.has_beta() ? request.beta() : 0.0;
  const DType out = *ResolvedOutDType(request);
  HostMatrix c;
  if (beta != 0) c = *ReadHostMatrix(request.c());

  std::vector<float> values;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const int64_t ba = a.batch == 1 ? 0 : bi;
    const int64_t bb = b.batch == 1 ? 0 : bi;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          double av = request.transpose_a() ? a.at(ba, kk, i) : a.at(ba, i, kk);
          double bv = request.transpose_b() ? b.at(bb, j, kk) : b.at(bb, kk, j);
          sum += av * bv;
        }
        double value = alpha * sum;
        if (beta != 0) value += beta * c.at(c.batch == 1 ? 0 : bi, i, j);
        values.push_back(static_cast<float>(value));
      }
    }
  }
  std::vector<int64_t> shape = {m, n};
  if (request.a().shape_size() == 3 || request.b().shape_size() == 3) {
    shape.insert(shape.begin(), batch);
  }
  v1::MatmulResponse response;
  if (out == DType::kFP32) {
    *response.mutable_c() = *MakeInlineTensor(out, shape, values.data());
  } else {
    std::vector<uint16_t> narrowed;
    for (float v : values) narrowed.push_back(FloatToBf16(v));
    *response.mutable_c() = *MakeInlineTensor(out, shape, narrowed.data());
  }
  return response;
}

TEST(CheckResponseTest, AgreesWithIndependentSolutionForManyLayouts) {
  std::mt19937_64 rng(4);
  int checked = 0;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      for (int64_t batch : {0, 1, 3}) {
        for (DType out : {DType::kBF16, DType::kFP32}) {
          ProblemSpec spec{.m = 7,
                           .n = 9,
                           .k = 11,
                           .batch = batch,
                           .transpose_a = transpose_a,
                           .transpose_b = transpose_b,
                           .alpha = 0.75f,
                           .beta = batch == 3 ? 0.5f : 0.0f,
                           .out_dtype = out,
                           .broadcast_a = batch == 3 && transpose_b,
                           .row_padding = transpose_a ? 3 : 0};
          absl::StatusOr<v1::MatmulRequest> request =
              MakeRandomRequest(spec, rng);
          ASSERT_TRUE(request.ok()) << request.status();
          v1::MatmulResponse response = SolveIndependently(*request);
          absl::StatusOr<double> error = CheckResponse(*request, response);
          ASSERT_TRUE(error.ok()) << ProblemSpecName(spec) << error.status();
          EXPECT_LT(*error, out == DType::kFP32 ? 1e-6 : 1e-2)
              << ProblemSpecName(spec);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 24);
}

TEST(CheckResponseTest, DetectsWrongValuesDtypeAndShape) {
  std::mt19937_64 rng(5);
  v1::MatmulRequest request =
      *MakeRandomRequest({.m = 8, .n = 8, .k = 8, .transpose_b = true}, rng);
  v1::MatmulResponse response = SolveIndependently(request);
  ASSERT_LT(*CheckResponse(request, response), 1e-2);

  // The product without the transpose: plainly wrong.
  v1::MatmulRequest untransposed = request;
  untransposed.set_transpose_b(false);
  EXPECT_GT(*CheckResponse(untransposed, response), 0.1);

  v1::MatmulResponse fp32 = response;
  fp32.mutable_c()->set_dtype(v1::DTYPE_FP32);
  EXPECT_EQ(CheckResponse(request, fp32).status().code(),
            absl::StatusCode::kFailedPrecondition);

  v1::MatmulResponse missing;
  EXPECT_EQ(CheckResponse(request, missing).status().code(),
            absl::StatusCode::kFailedPrecondition);

  v1::MatmulRequest other_shape =
      *MakeRandomRequest({.m = 8, .n = 4, .k = 8}, rng);
  EXPECT_EQ(CheckResponse(other_shape, response).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A NaN in the output is an infinite error, never a pass.
  v1::MatmulResponse poisoned = response;
  uint16_t nan = 0x7fc0;
  std::memcpy(poisoned.mutable_c()->mutable_inline_data()->data(), &nan, 2);
  EXPECT_TRUE(std::isinf(*CheckResponse(request, poisoned)));
}

TEST(CheckResponseTest, RejectsMalformedRequests) {
  std::mt19937_64 rng(6);
  v1::MatmulRequest request = *MakeRandomRequest({.m = 4, .n = 4, .k = 4}, rng);
  v1::MatmulResponse response = SolveIndependently(request);

  v1::MatmulRequest k_mismatch =
      *MakeRandomRequest({.m = 4, .n = 4, .k = 5}, rng);
  *k_mismatch.mutable_b() = request.b();
  EXPECT_THAT(CheckResponse(k_mismatch, response).status().message(),
              HasSubstr("disagree"));

  v1::MatmulRequest no_c = request;
  no_c.set_beta(1.0f);
  EXPECT_THAT(CheckResponse(no_c, response).status().message(),
              HasSubstr("requires C"));

  v1::MatmulRequest batches =
      *MakeRandomRequest({.m = 4, .n = 4, .k = 4, .batch = 2}, rng);
  *batches.mutable_b() =
      MakeRandomRequest({.m = 4, .n = 4, .k = 4, .batch = 3}, rng)->b();
  EXPECT_THAT(CheckResponse(batches, response).status().message(),
              HasSubstr("batch sizes disagree"));
}

TEST(ProblemSpecTest, NameAndFlops) {
  ProblemSpec spec{.m = 2, .n = 3, .k = 4, .batch = 5, .transpose_b = true};
  EXPECT_EQ(ProblemSpecName(spec), "2x3x4:NT:b5");
  EXPECT_DOUBLE_EQ(spec.flops(), 2.0 * 5 * 2 * 3 * 4);
}

}  // namespace
}  // namespace matmul
