#include "server/product/bound_operands.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/product/request_validation.h"
#include "server/regions/testing/test_region.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

const PeerCredentials kOwner{.pid = 77, .uid = 1000, .gid = 1000};

// A [rows, cols] tensor in region `region_id` at `offset` bytes.
v1::Tensor RegionTensor(v1::DType dtype, int64_t rows, int64_t cols,
                        const std::string& region_id, uint64_t offset) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.add_shape(rows);
  tensor.add_shape(cols);
  tensor.mutable_region()->set_region_id(region_id);
  tensor.mutable_region()->set_offset_bytes(offset);
  return tensor;
}

v1::Tensor InlineTensor(v1::DType dtype, std::vector<int64_t> shape,
                        std::vector<int64_t> strides, std::string bytes) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  for (int64_t stride : strides) tensor.add_strides(stride);
  tensor.set_inline_data(std::move(bytes));
  return tensor;
}

std::string RandomBytes(size_t size, std::mt19937_64& rng) {
  std::string bytes(size, '\0');
  for (char& byte : bytes) byte = static_cast<char>(rng());
  return bytes;
}

class BoundOperandsTest : public ::testing::Test {
 protected:
  BoundOperandsTest()
      : rng_(std::random_device{}()),
        registry_({}),
        session_(registry_.OpenSession("bind", kOwner)) {}

  std::string Register(TestRegion::Options options) {
    absl::StatusOr<std::string> id =
        registry_.Add(session_, kOwner, MakeTestRegion(std::move(options)));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  // Validates and binds; the request must outlive the result.
  absl::StatusOr<std::unique_ptr<BoundOperands>> Bind(
      const v1::MatmulRequest& request, bool device_pointers = false) {
    absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, {});
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return plan.status();
    return BoundOperands::Bind(*plan, request, registry_, device_pointers);
  }

  // A [m, k] x [k, n] product with A and B in `region` back to back from
  // `offset`, and C inline.
  v1::MatmulRequest RegionProduct(const std::string& region, int64_t m,
                                  int64_t n, int64_t k, uint64_t offset) {
    v1::MatmulRequest request;
    request.set_session_id(session_);
    *request.mutable_a() = RegionTensor(v1::DTYPE_BF16, m, k, region, offset);
    *request.mutable_b() =
        RegionTensor(v1::DTYPE_BF16, k, n, region, offset + 2 * m * k);
    return request;
  }

  std::mt19937_64 rng_;
  RegionRegistry registry_;
  const std::string session_;
};

TEST_F(BoundOperandsTest, RegionOperandsPointIntoTheirRegion) {
  auto region = MakeTestRegion({.size = 4096});
  absl::StatusOr<std::string> id = registry_.Add(session_, kOwner, region);
  ASSERT_TRUE(id.ok());
  const uint64_t offset = 2 * (rng_() % 100);
  v1::MatmulRequest request = RegionProduct(*id, 4, 5, 6, offset);
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const GemmProblem& p = (*bound)->problem();
  EXPECT_EQ(p.a.data, region->data() + offset);
  EXPECT_EQ(p.b.data, region->data() + offset + 2 * 4 * 6);
  EXPECT_FALSE((*bound)->on_device());  // C is inline
  EXPECT_EQ((*bound)->cuda_device(), -1);
  EXPECT_EQ((*bound)->TakeOutput().size(), 4u * 5 * 2);
}

TEST_F(BoundOperandsTest, ExtentsMustLieInsideTheRegion) {
  // A needs 2*4*6 bytes and B 2*6*5: 108 in all.
  const std::string fits = Register({.size = 108});
  EXPECT_TRUE(Bind(RegionProduct(fits, 4, 5, 6, 0)).ok());
  const std::string short_by_one = Register({.size = 107});
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound =
      Bind(RegionProduct(short_by_one, 4, 5, 6, 0));
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bound.status().message(), HasSubstr("reach outside region"));
  // An offset past the region's end.
  bound = Bind(RegionProduct(fits, 4, 5, 6, 1000));
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BoundOperandsTest, UnknownRegionsAndMissingSessionsAreRefused) {
  const std::string id = Register({.size = 4096});
  v1::MatmulRequest request = RegionProduct("0123456789abcdef", 2, 2, 2, 0);
  EXPECT_EQ(Bind(request).status().code(), absl::StatusCode::kNotFound);
  request = RegionProduct(id, 2, 2, 2, 0);
  request.clear_session_id();
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bound.status().message(), HasSubstr("no session_id"));
}

TEST_F(BoundOperandsTest, AnOutputOverlappingAnInputIsRefused) {
  // Two regions over one object: the overlap is judged by placement.
  const std::string inputs = Register({.size = 1024, .object = "shared"});
  const std::string outputs =
      Register({.size = 1024, .object = "shared", .offset = 512});
  const int64_t m = 4, n = 4, k = 4;  // A and B: bytes [0, 64) of inputs
  v1::MatmulRequest request = RegionProduct(inputs, m, n, k, 0);
  // C at bytes [48, 80) of the object: over B's last half.
  *request.mutable_c() = RegionTensor(v1::DTYPE_BF16, m, n, inputs, 48);
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bound.status().message(), HasSubstr("overlaps"));
  // Right after B: no overlap.
  *request.mutable_c() = RegionTensor(v1::DTYPE_BF16, m, n, inputs, 64);
  EXPECT_TRUE(Bind(request).ok());
  // The other region's first bytes are object bytes [512, 544): apart from
  // A and B, until B moves there through the first region.
  *request.mutable_c() = RegionTensor(v1::DTYPE_BF16, m, n, outputs, 0);
  EXPECT_TRUE(Bind(request).ok());
  *request.mutable_b() = RegionTensor(v1::DTYPE_BF16, k, n, inputs, 520);
  bound = Bind(request);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BoundOperandsTest, BackendVisibilityAndDevices) {
  const std::string host = Register({.size = 4096});
  // A GPU backend cannot address a region that only the host sees.
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound =
      Bind(RegionProduct(host, 2, 2, 2, 0), /*device_pointers=*/true);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  // And the CPU backend cannot read device memory.
  const std::string device = Register({.size = 4096,
                                       .cuda_device = 0,
                                       .host_visible = false,
                                       .device_visible = true});
  bound = Bind(RegionProduct(device, 2, 2, 2, 0));
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  bound = Bind(RegionProduct(device, 2, 2, 2, 0), /*device_pointers=*/true);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ((*bound)->cuda_device(), 0);

  // Operands on two GPUs cannot run as one product.
  const std::string other = Register({.size = 4096,
                                      .cuda_device = 1,
                                      .host_visible = false,
                                      .device_visible = true});
  v1::MatmulRequest request = RegionProduct(device, 2, 2, 2, 0);
  *request.mutable_b() = RegionTensor(v1::DTYPE_BF16, 2, 2, other, 0);
  bound = Bind(request, /*device_pointers=*/true);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bound.status().message(), HasSubstr("one GPU"));

  // With C in a region too, the product runs in place.
  *request.mutable_b() = RegionTensor(v1::DTYPE_BF16, 2, 2, device, 8);
  *request.mutable_c() = RegionTensor(v1::DTYPE_BF16, 2, 2, device, 64);
  bound = Bind(request, /*device_pointers=*/true);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_TRUE((*bound)->on_device());
  EXPECT_TRUE((*bound)->TakeOutput().empty());
}

TEST_F(BoundOperandsTest, HoldsItsRegionsSoUnregisterIsDeferred) {
  auto released = std::make_shared<bool>(false);
  const std::string id = Register({.size = 4096, .released = released});
  v1::MatmulRequest request = RegionProduct(id, 3, 3, 3, 0);
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  ASSERT_TRUE(bound.ok());
  absl::StatusOr<bool> deferred = registry_.Remove(session_, kOwner, id);
  ASSERT_TRUE(deferred.ok());
  EXPECT_TRUE(*deferred);
  EXPECT_FALSE(*released);
  bound->reset();
  EXPECT_TRUE(*released);
}

TEST_F(BoundOperandsTest, ABrokenRegionIsReportedBeforeAndAfter) {
  auto intact = std::make_shared<bool>(false);
  const std::string id = Register({.size = 4096, .intact = intact});
  v1::MatmulRequest request = RegionProduct(id, 2, 2, 2, 0);
  EXPECT_EQ(Bind(request).status().code(),
            absl::StatusCode::kFailedPrecondition);
  *intact = true;
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  ASSERT_TRUE(bound.ok());
  EXPECT_TRUE((*bound)->CheckRegionsIntact().ok());
  *intact = false;  // broken while the product ran
  EXPECT_EQ((*bound)->CheckRegionsIntact().code(),
            absl::StatusCode::kFailedPrecondition);
}

// An inline, strided initial C (beta != 0) is gathered densely into the
// output, where the epilogue reads it.
TEST_F(BoundOperandsTest, InlineInitialCIsGatheredDensely) {
  const int64_t m = 1 + rng_() % 7, n = 1 + rng_() % 7, k = 3;
  const int64_t pad = rng_() % 3;
  const int64_t row_stride = n + pad;
  v1::MatmulRequest request;
  *request.mutable_a() =
      InlineTensor(v1::DTYPE_BF16, {m, k}, {}, RandomBytes(2 * m * k, rng_));
  *request.mutable_b() =
      InlineTensor(v1::DTYPE_BF16, {k, n}, {}, RandomBytes(2 * k * n, rng_));
  const std::string c_bytes = RandomBytes(4 * ((m - 1) * row_stride + n), rng_);
  *request.mutable_c() =
      InlineTensor(v1::DTYPE_FP32, {m, n}, {row_stride, 1}, c_bytes);
  request.set_beta(0.5f);
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound = Bind(request);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const GemmProblem& p = (*bound)->problem();
  // Inline operands are the request's bytes (copied only to realign).
  EXPECT_EQ(std::memcmp(p.a.data, request.a().inline_data().data(), 2 * m * k),
            0);
  const std::string output = (*bound)->TakeOutput();
  ASSERT_EQ(output.size(), static_cast<size_t>(4 * m * n));
  for (int64_t i = 0; i < m; ++i) {
    EXPECT_EQ(std::memcmp(output.data() + 4 * i * n,
                          c_bytes.data() + 4 * i * row_stride, 4 * n),
              0)
        << "row " << i;
  }
}

}  // namespace
}  // namespace matmul
