#include "tests/soak/weight_products.h"

#include <random>

#include "client/regions/region_request_builder.h"
#include "client/request_builder.h"
#include "common/status_macros.h"

namespace matmul::soak {
namespace {

RegionPlacement WeightPlacement(bool output_there) {
  return {.a = false, .b = true, .c = output_there};
}

}  // namespace

absl::StatusOr<std::vector<v1::MatmulRequest>> ProductsOverOneWeight(
    uint64_t seed, int64_t max_dim, int count) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dim(1, max_dim);
  ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
  const uint64_t bits = rng();
  spec.transpose_b = (bits & 1) != 0;  // nn.Linear's weight, mostly
  if (((bits >> 1) & 3) == 0) spec.beta = -0.5f;
  if (((bits >> 3) & 3) == 0) spec.out_dtype = DType::kFP32;
  std::vector<v1::MatmulRequest> products;
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(v1::MatmulRequest product, MakeRandomRequest(spec, rng));
    if (i > 0) *product.mutable_b() = products.front().b();
    products.push_back(std::move(product));
  }
  return products;
}

absl::StatusOr<uint64_t> RegionBytes(const v1::MatmulRequest& product,
                                     bool output_there) {
  return RegionBytesNeeded(product, WeightPlacement(output_there));
}

absl::StatusOr<v1::MatmulRequest> ReadingTheWeightFrom(
    const v1::MatmulRequest& product, absl::Span<char> memory,
    const std::string& region_id, const std::string& session_id,
    bool output_there) {
  ASSIGN_OR_RETURN(RegionRequest placed,
                   PlaceInRegion(product, memory, region_id, session_id,
                                 WeightPlacement(output_there)));
  return std::move(placed.request);
}

}  // namespace matmul::soak
