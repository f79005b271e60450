#include "client/regions/region_request_builder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/request_builder.h"
#include "common/status_macros.h"

namespace matmul {
namespace {

bool Rank3(const v1::MatmulRequest& request) {
  return request.a().shape_size() == 3 || request.b().shape_size() == 3;
}

// The output C as the daemon produces it, dense.
absl::StatusOr<std::vector<int64_t>> OutputShape(
    const v1::MatmulRequest& request) {
  ASSIGN_OR_RETURN(GemmProblem problem, GemmProblemFromRequest(request));
  if (Rank3(request))
    return std::vector<int64_t>{problem.batch, problem.m, problem.n};
  return std::vector<int64_t>{problem.m, problem.n};
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  return elements;
}

// Bytes the output takes in the region: the initial C's bytes when there is
// one, else the dense output.
absl::StatusOr<uint64_t> OutputBytes(const v1::MatmulRequest& request) {
  if (request.has_c()) return request.c().inline_data().size();
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, OutputShape(request));
  ASSIGN_OR_RETURN(DType dtype, ResolvedOutDType(request));
  return static_cast<uint64_t>(Product(shape)) * DTypeSize(dtype);
}

absl::Status CheckInline(const v1::Tensor& tensor, const char* name) {
  if (tensor.data_case() != v1::Tensor::kInlineData) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be inline to be placed in a region"));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t AlignRegionOffset(uint64_t offset) { return (offset + 63) / 64 * 64; }

absl::StatusOr<uint64_t> RegionBytesNeeded(
    const v1::MatmulRequest& inline_request, RegionPlacement placement,
    uint64_t base_offset) {
  uint64_t end = base_offset;
  if (placement.a)
    end = AlignRegionOffset(end) + inline_request.a().inline_data().size();
  if (placement.b)
    end = AlignRegionOffset(end) + inline_request.b().inline_data().size();
  if (placement.c) {
    ASSIGN_OR_RETURN(uint64_t c_bytes, OutputBytes(inline_request));
    end = AlignRegionOffset(end) + c_bytes;
  }
  return end;
}

absl::StatusOr<RegionRequest> PlaceInRegion(
    const v1::MatmulRequest& inline_request, absl::Span<char> region_memory,
    const std::string& region_id, const std::string& session_id,
    RegionPlacement placement, uint64_t base_offset) {
  RETURN_IF_ERROR(CheckInline(inline_request.a(), "A"));
  RETURN_IF_ERROR(CheckInline(inline_request.b(), "B"));
  if (inline_request.has_c()) {
    RETURN_IF_ERROR(CheckInline(inline_request.c(), "C"));
  }
  ASSIGN_OR_RETURN(uint64_t needed,
                   RegionBytesNeeded(inline_request, placement, base_offset));
  if (needed > region_memory.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the operands need ", needed,
                     " bytes of the region; it has ", region_memory.size()));
  }
  RegionRequest placed;
  placed.reference = inline_request;
  placed.request = inline_request;
  placed.request.set_session_id(session_id);
  ASSIGN_OR_RETURN(placed.c_dtype, ResolvedOutDType(inline_request));
  ASSIGN_OR_RETURN(placed.c_shape, OutputShape(inline_request));

  uint64_t next = base_offset;
  // Copies the tensor's bytes to the next aligned offset and points the
  // tensor there.
  auto place = [&](v1::Tensor* tensor) {
    const uint64_t offset = AlignRegionOffset(next);
    const std::string& bytes = tensor->inline_data();
    std::memcpy(region_memory.data() + offset, bytes.data(), bytes.size());
    next = offset + bytes.size();
    v1::RegionRef* ref = tensor->mutable_region();  // clears inline_data
    ref->set_region_id(region_id);
    ref->set_offset_bytes(offset);
    return offset;
  };
  if (placement.a) placed.a_offset_bytes = place(placed.request.mutable_a());
  if (placement.b) placed.b_offset_bytes = place(placed.request.mutable_b());
  if (placement.c) {
    placed.output_in_region = true;
    if (!placed.request.has_c()) {
      // No initial C: a dense output, poisoned so unwritten elements show.
      const uint64_t bytes = static_cast<uint64_t>(Product(placed.c_shape)) *
                             DTypeSize(placed.c_dtype);
      v1::Tensor* c = placed.request.mutable_c();
      c->set_dtype(ToProtoDType(placed.c_dtype));
      for (int64_t d : placed.c_shape) c->add_shape(d);
      c->set_inline_data(std::string(bytes, '\xff'));
    }
    placed.c_offset_bytes = place(placed.request.mutable_c());
  }
  placed.end_offset_bytes = next;
  return placed;
}

absl::StatusOr<RegionRequest> MakeRandomRegionRequest(
    const ProblemSpec& spec, std::mt19937_64& rng,
    absl::Span<char> region_memory, const std::string& region_id,
    const std::string& session_id, RegionPlacement placement,
    uint64_t base_offset) {
  ASSIGN_OR_RETURN(v1::MatmulRequest request, MakeRandomRequest(spec, rng));
  return PlaceInRegion(request, region_memory, region_id, session_id, placement,
                       base_offset);
}

absl::StatusOr<v1::Tensor> ResultTensor(const RegionRequest& placed,
                                        const v1::MatmulResponse& response,
                                        absl::Span<const char> region_memory) {
  if (!placed.output_in_region) {
    if (!response.has_c()) {
      return absl::FailedPreconditionError("the response has no C");
    }
    return response.c();
  }
  if (response.has_c()) {
    return absl::FailedPreconditionError(
        "C was written in the region, yet the response carries it inline too");
  }
  const uint64_t bytes = static_cast<uint64_t>(Product(placed.c_shape)) *
                         DTypeSize(placed.c_dtype);
  if (placed.c_offset_bytes + bytes > region_memory.size()) {
    return absl::InvalidArgumentError("C lies outside the region memory given");
  }
  return MakeInlineTensor(placed.c_dtype, placed.c_shape,
                          region_memory.data() + placed.c_offset_bytes);
}

absl::StatusOr<double> CheckRegionResponse(
    const RegionRequest& placed, const v1::MatmulResponse& response,
    absl::Span<const char> region_memory) {
  ASSIGN_OR_RETURN(v1::Tensor c, ResultTensor(placed, response, region_memory));
  v1::MatmulResponse with_c = response;
  *with_c.mutable_c() = std::move(c);
  return CheckResponse(placed.reference, with_c);
}

}  // namespace matmul
