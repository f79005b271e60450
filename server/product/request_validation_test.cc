#include "server/product/request_validation.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

v1::Tensor Bf16Tensor(std::vector<int64_t> shape) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DTYPE_BF16);
  int64_t elements = 1;
  for (int64_t d : shape) {
    tensor.add_shape(d);
    elements *= d;
  }
  tensor.set_inline_data(std::string(static_cast<size_t>(elements * 2), '\1'));
  return tensor;
}

v1::MatmulRequest Request(std::vector<int64_t> a, std::vector<int64_t> b) {
  v1::MatmulRequest request;
  *request.mutable_a() = Bf16Tensor(a);
  *request.mutable_b() = Bf16Tensor(b);
  return request;
}

void ExpectError(const v1::MatmulRequest& request, absl::StatusCode code,
                 const std::string& text, ValidationLimits limits = {}) {
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, limits);
  ASSERT_FALSE(plan.ok()) << "accepted a bad request";
  EXPECT_EQ(plan.status().code(), code) << plan.status();
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(text));
}

TEST(ValidateRequestTest, PlainProductHasRowMajorStrides) {
  absl::StatusOr<MatmulPlan> plan =
      ValidateRequest(Request({3, 5}, {5, 7}), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const GemmProblem& p = plan->problem;
  EXPECT_EQ(p.m, 3);
  EXPECT_EQ(p.n, 7);
  EXPECT_EQ(p.k, 5);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.a.strides.row, 5);
  EXPECT_EQ(p.a.strides.col, 1);
  EXPECT_EQ(p.alpha, 1.0f);
  EXPECT_EQ(p.beta, 0.0f);
  EXPECT_EQ(p.c_dtype, DType::kBF16);
  EXPECT_EQ(plan->output_bytes, 3 * 7 * 2);
}

TEST(ValidateRequestTest, TransposesFoldIntoStrides) {
  v1::MatmulRequest request = Request({5, 3}, {7, 5});  // A^T, B^T (Linear)
  request.set_transpose_a(true);
  request.set_transpose_b(true);
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->problem.m, 3);
  EXPECT_EQ(plan->problem.n, 7);
  EXPECT_EQ(plan->problem.a.strides.row, 1);
  EXPECT_EQ(plan->problem.a.strides.col, 3);
  EXPECT_EQ(plan->problem.b.strides.row, 1);
  EXPECT_EQ(plan->problem.b.strides.col, 5);
}

TEST(ValidateRequestTest, BatchBroadcastsRankTwoAndBatchOne) {
  absl::StatusOr<MatmulPlan> plan =
      ValidateRequest(Request({4, 3, 5}, {1, 5, 7}), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->problem.batch, 4);
  EXPECT_EQ(plan->problem.a.strides.batch, 15);
  EXPECT_EQ(plan->problem.b.strides.batch, 0);
  plan = ValidateRequest(Request({3, 5}, {4, 5, 7}), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->problem.batch, 4);
  EXPECT_EQ(plan->problem.a.strides.batch, 0);
}

TEST(ValidateRequestTest, MissingOperands) {
  v1::MatmulRequest request = Request({2, 2}, {2, 2});
  request.clear_b();
  ExpectError(request, absl::StatusCode::kInvalidArgument, "missing operand B");
  request.clear_a();
  ExpectError(request, absl::StatusCode::kInvalidArgument, "missing operand A");
}

TEST(ValidateRequestTest, Dtypes) {
  v1::MatmulRequest request = Request({2, 2}, {2, 2});
  request.mutable_a()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "A: dtype is unspecified");
  request.mutable_a()->set_dtype(v1::DTYPE_FP32);
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "DTYPE_FP32 is not supported for inputs");
  request.mutable_a()->set_dtype(static_cast<v1::DType>(42));
  ExpectError(request, absl::StatusCode::kInvalidArgument, "unknown dtype 42");
}

TEST(ValidateRequestTest, Ranks) {
  ExpectError(Request({4}, {4, 4}), absl::StatusCode::kInvalidArgument,
              "A: rank 1");
  ExpectError(Request({2, 2}, {1, 1, 2, 2}), absl::StatusCode::kInvalidArgument,
              "B: rank 4");
}

TEST(ValidateRequestTest, InnerDimensionsDisagree) {
  ExpectError(Request({3, 5}, {6, 7}), absl::StatusCode::kInvalidArgument,
              "inner dimensions disagree");
}

TEST(ValidateRequestTest, BadDimensions) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.mutable_a()->set_shape(0, 0);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "is 0");
  request.mutable_a()->set_shape(0, -3);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "is -3");
  // Each dimension in range, but their product overflows 64 bits.
  ValidationLimits huge;
  huge.max_dimension = int64_t{1} << 40;
  v1::MatmulRequest overflow = Request({2, 2}, {2, 2});
  overflow.mutable_a()->clear_shape();
  for (int i = 0; i < 3; ++i) overflow.mutable_a()->add_shape(int64_t{1} << 30);
  ExpectError(overflow, absl::StatusCode::kInvalidArgument, "overflows 64 bits",
              huge);
}

TEST(ValidateRequestTest, BadStrides) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.mutable_a()->add_strides(5);
  request.mutable_a()->add_strides(-1);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "must be >= 0");
  request.mutable_a()->clear_strides();
  request.mutable_a()->add_strides(6);  // padded rows: 2*6+4+1 > 15 elements
  request.mutable_a()->add_strides(1);
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "reach outside the data");
  request.mutable_a()->clear_strides();
  request.mutable_a()->add_strides(1);
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "one stride per dimension");
}

TEST(ValidateRequestTest, OverlappingOutputStrides) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  *request.mutable_c() = Bf16Tensor({3, 7});
  request.mutable_c()->add_strides(1);  // rows overlap columns
  request.mutable_c()->add_strides(1);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "overlap");
}

TEST(ValidateRequestTest, InlineLengthMustMatchShape) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.mutable_b()->mutable_inline_data()->pop_back();
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "inline_data has 69 bytes; expected 70");
}

TEST(ValidateRequestTest, BatchesThatCannotBroadcast) {
  ExpectError(Request({2, 3, 5}, {3, 5, 7}), absl::StatusCode::kInvalidArgument,
              "batch sizes disagree");
}

TEST(ValidateRequestTest, OutputTypeAndC) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.set_beta(0.5f);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "has no C");
  *request.mutable_c() = Bf16Tensor({3, 6});
  ExpectError(request, absl::StatusCode::kInvalidArgument, "expected [3, 7]");
  *request.mutable_c() = Bf16Tensor({3, 7});
  request.set_out_dtype(v1::DTYPE_FP32);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "differs from");
  request.set_out_dtype(v1::DTYPE_BF16);
  EXPECT_TRUE(ValidateRequest(request, {}).ok());
}

TEST(ValidateRequestTest, ResultOverTheMessageLimit) {
  ValidationLimits small;
  small.max_message_bytes = 40;  // the result is 3 x 7 x 2 = 42 bytes
  ExpectError(Request({3, 5}, {5, 7}), absl::StatusCode::kResourceExhausted,
              "over the limit", small);
}

TEST(ValidateRequestTest, RegionReferences) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.mutable_a()->mutable_region()->set_offset_bytes(3);
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "without a region_id");
  request.mutable_a()->mutable_region()->set_region_id("r1");
  ExpectError(request, absl::StatusCode::kInvalidArgument,
              "not a multiple of the element size 2");
  request.mutable_a()->mutable_region()->set_offset_bytes(64);
  *request.mutable_c() = Bf16Tensor({3, 7});
  request.mutable_c()->mutable_region()->set_region_id("r2");
  request.mutable_c()->add_strides(16);  // padded rows, written in place
  request.mutable_c()->add_strides(1);
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->a.in_region);
  EXPECT_EQ(plan->a.offset_bytes, 64u);
  EXPECT_TRUE(plan->output_in_region);
  EXPECT_EQ(plan->problem.c.strides.row, 16);
  EXPECT_EQ(plan->output_bytes, 0);
}

TEST(ValidateRequestTest, NonFiniteScalars) {
  v1::MatmulRequest request = Request({3, 5}, {5, 7});
  request.set_alpha(std::numeric_limits<float>::quiet_NaN());
  ExpectError(request, absl::StatusCode::kInvalidArgument, "finite");
}

}  // namespace
}  // namespace matmul
