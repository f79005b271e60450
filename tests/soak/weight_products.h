// Products over one weight, for the shared-weight scenarios: the worker and
// the holder that owns the weight build them from the same seed, so both
// know the weight's bytes without passing them around.
#ifndef MATMUL_TESTS_SOAK_WEIGHT_PRODUCTS_H_
#define MATMUL_TESTS_SOAK_WEIGHT_PRODUCTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul::soak {

// `count` products with inline operands, one shape (so that on a GPU they
// may run stacked), their own A (and C) and the same B; the same seed and
// max_dim give the same products.
absl::StatusOr<std::vector<v1::MatmulRequest>> ProductsOverOneWeight(
    uint64_t seed, int64_t max_dim, int count);

// `product` with B read from offset 0 of region `region_id` in session
// `session_id` (and, with `output_there`, C written after it in the same
// region). The weight is written to `memory` (RegionBytes long); a reader
// that has no such bytes passes a scratch buffer.
absl::StatusOr<v1::MatmulRequest> ReadingTheWeightFrom(
    const v1::MatmulRequest& product, absl::Span<char> memory,
    const std::string& region_id, const std::string& session_id,
    bool output_there = false);

// Bytes ReadingTheWeightFrom needs in `memory`; WeightBytes without
// `output_there`.
absl::StatusOr<uint64_t> RegionBytes(const v1::MatmulRequest& product,
                                     bool output_there = false);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_WEIGHT_PRODUCTS_H_
