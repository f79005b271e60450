// Requests whose operands live in a registered region rather than in the
// message, and their checks against the FP64 reference. The region's bytes
// are addressed through the client's own view of them (for shm: the
// segment's mapping), so the same helpers serve any region kind the client
// can read.
//
//   ASSIGN_OR_RETURN(RegionRequest placed,
//                    MakeRandomRegionRequest(spec, rng, segment->bytes(),
//                                            region->id(),
//                                            session->session_id()));
//   ASSIGN_OR_RETURN(v1::MatmulResponse response,
//                    client->Matmul(placed.request));
//   ASSIGN_OR_RETURN(double error, CheckRegionResponse(placed, response,
//                                                      segment->bytes()));
#ifndef MATMUL_CLIENT_REGIONS_REGION_REQUEST_BUILDER_H_
#define MATMUL_CLIENT_REGIONS_REGION_REQUEST_BUILDER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/request_builder.h"
#include "common/gemm/gemm_problem.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

// Which operands go into the region; the others stay inline.
struct RegionPlacement {
  bool a = true;
  bool b = true;
  // The output, written in place (with the initial C, when beta != 0).
  // false: the response carries C inline.
  bool c = true;
};

// Where a request's operands sit, as byte offsets inside the region.
struct RegionRequest {
  // What to send: region references for the placed operands.
  v1::MatmulRequest request;
  // The same product with every operand inline, as it was before the
  // product ran (the initial C included): what CheckResponse recomputes.
  v1::MatmulRequest reference;
  bool output_in_region = false;
  uint64_t a_offset_bytes = 0;  // valid when placed
  uint64_t b_offset_bytes = 0;
  uint64_t c_offset_bytes = 0;
  // The output as placed: dense, [M, N] or [batch, M, N].
  std::vector<int64_t> c_shape;
  DType c_dtype = DType::kBF16;
  // First byte after the last placed operand, relative to the region.
  uint64_t end_offset_bytes = 0;
};

// Where PlaceInRegion puts an operand that would start at `offset`: the
// next multiple of 64 bytes.
uint64_t AlignRegionOffset(uint64_t offset);

// Region bytes PlaceInRegion needs for `inline_request` at `base_offset`
// (each operand starts on a 64-byte boundary).
absl::StatusOr<uint64_t> RegionBytesNeeded(
    const v1::MatmulRequest& inline_request, RegionPlacement placement,
    uint64_t base_offset = 0);

// Copies the placed operands of `inline_request` (a request with inline
// operands, e.g. from MakeRandomRequest) into `region_memory` from
// `base_offset` on, 64-byte aligned, and returns the request that names
// them by (region_id, offset) under `session_id`. A placed output without
// an initial C (beta 0) is laid out dense and filled with 0xFF bytes (NaN
// in BF16 and FP32), so an element the daemon fails to write shows up in
// the check. INVALID_ARGUMENT when an operand is not inline or the region
// is too small.
absl::StatusOr<RegionRequest> PlaceInRegion(
    const v1::MatmulRequest& inline_request, absl::Span<char> region_memory,
    const std::string& region_id, const std::string& session_id,
    RegionPlacement placement, uint64_t base_offset = 0);

// MakeRandomRequest(spec, rng) placed in the region: random BF16 A and B
// (and the initial C when spec.beta is nonzero) written into
// `region_memory`, the output there too unless `placement` says otherwise.
absl::StatusOr<RegionRequest> MakeRandomRegionRequest(
    const ProblemSpec& spec, std::mt19937_64& rng,
    absl::Span<char> region_memory, const std::string& region_id,
    const std::string& session_id, RegionPlacement placement = {},
    uint64_t base_offset = 0);

// The output as a dense inline Tensor: read from the region when it was
// written in place, else the response's own C. FAILED_PRECONDITION when
// the response does not have the C it should (an in-place output must come
// back without an inline copy).
absl::StatusOr<v1::Tensor> ResultTensor(const RegionRequest& placed,
                                        const v1::MatmulResponse& response,
                                        absl::Span<const char> region_memory);

// Relative error of the result (see ResultTensor) against the FP64
// reference of `placed.reference`, as CheckResponse computes it.
absl::StatusOr<double> CheckRegionResponse(
    const RegionRequest& placed, const v1::MatmulResponse& response,
    absl::Span<const char> region_memory);

}  // namespace matmul

#endif  // MATMUL_CLIENT_REGIONS_REGION_REQUEST_BUILDER_H_
