#include "server/product/bound_operands.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace matmul {
namespace {

// Protobuf strings are heap buffers and normally aligned; copy otherwise so
// the backends may load whole elements.
const char* Aligned(const std::string& bytes, std::vector<uint32_t>* copy) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint32_t) == 0) {
    return bytes.data();
  }
  copy->resize((bytes.size() + sizeof(uint32_t) - 1) / sizeof(uint32_t));
  std::memcpy(copy->data(), bytes.data(), bytes.size());
  return reinterpret_cast<const char*>(copy->data());
}

}  // namespace

absl::Status BoundOperands::BindStreamOrder(const v1::StreamOrder& order,
                                            const std::string& session_id,
                                            const RegionRegistry& registry,
                                            bool device_pointers) {
  if (!device_pointers) {
    return absl::FailedPreconditionError(
        "stream_order needs the CUDA backend; this daemon computes on the "
        "CPU");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Region> region,
                   registry.Find(session_id, order.region_id()));
  if (!region->writable()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "stream_order: region '", order.region_id(),
        "' is shared by another session to read from only; the words must "
        "be in a region of your own"));
  }
  // The daemon's CPU or GPU waits on the wait word and its GPU writes the
  // signal word: host memory that the device reaches.
  if (region->host_data() == nullptr || region->device_data() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stream_order: region '", order.region_id(), "' is a ", region->kind(),
        " region; the words must be in a shm region"));
  }
  const uint64_t size = static_cast<uint64_t>(region->size_bytes());
  for (uint64_t offset : {order.wait_offset_bytes(),
                          order.signal() ? order.signal_offset_bytes() : 0}) {
    if (offset > size || size - offset < sizeof(uint32_t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream_order: a word at offset ", offset, " lies outside region '",
          order.region_id(), "' of ", size, " bytes"));
    }
  }
  auto* host = static_cast<char*>(region->host_data());
  auto* device = static_cast<char*>(region->device_data());
  stream_order_.wait_host = reinterpret_cast<std::atomic<uint32_t>*>(
      host + order.wait_offset_bytes());
  stream_order_.wait_device = device + order.wait_offset_bytes();
  stream_order_.wait_value = order.wait_value();
  if (order.signal()) {
    stream_order_.signal_device = device + order.signal_offset_bytes();
    stream_order_.signal_host = reinterpret_cast<std::atomic<uint32_t>*>(
        host + order.signal_offset_bytes());
    stream_order_.signal_value = order.signal_value();
  }
  ASSIGN_OR_RETURN(stream_order_.launch,
                   registry.TakeLaunchTicket(session_id, order.number(),
                                             order.answered_below()));
  problem_.stream_order = &stream_order_;
  if (std::find(regions_.begin(), regions_.end(), region) == regions_.end()) {
    regions_.push_back(std::move(region));
  }
  return absl::OkStatus();
}

void BoundOperands::SetStreamOrderGiveUp(
    std::function<absl::Status()> give_up) {
  stream_order_.give_up = std::move(give_up);
}

absl::StatusOr<const char*> BoundOperands::Resolve(
    const v1::Tensor& tensor, const CheckedTensor& checked,
    const std::string& name, const std::string& session_id,
    const ListPlan* list, ScratchOperand::Which which,
    const RegionRegistry& registry, bool device_pointers,
    std::vector<uint32_t>* realigned, std::optional<Span>* span) {
  if (checked.in_scratch) {
    // ValidateList checked that the buffer exists and holds the extent.
    const uint64_t begin =
        static_cast<uint64_t>(list->buffer_start[checked.scratch_product]) +
        checked.offset_bytes;
    // A name no region's memory object has.
    *span = Span{"\x01scratch", begin,
                 begin + static_cast<uint64_t>(checked.extent_bytes)};
    scratch_operands_.push_back(
        {.operand = which, .offset_bytes = static_cast<int64_t>(begin)});
    return nullptr;
  }
  if (!checked.in_region) {
    return Aligned(tensor.inline_data(), realigned);
  }
  if (session_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " names region '", checked.region_id,
                     "' but the request has no session_id"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Region> region,
                   registry.Find(session_id, checked.region_id));
  if (which == ScratchOperand::Which::kC && !region->writable()) {
    return absl::PermissionDeniedError(absl::StrCat(
        name, " is in region '", checked.region_id,
        "', which another session shares with this one to read from only; "
        "write C to a region of your own"));
  }
  if (absl::Status intact = region->CheckIntact(); !intact.ok()) {
    return absl::Status(intact.code(),
                        absl::StrCat(name, " is in region '", checked.region_id,
                                     "': ", intact.message()));
  }
  const uint64_t size = static_cast<uint64_t>(region->size_bytes());
  if (checked.offset_bytes > size ||
      static_cast<uint64_t>(checked.extent_bytes) >
          size - checked.offset_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": bytes [", checked.offset_bytes, ", +",
                     checked.extent_bytes, ") reach outside region '",
                     checked.region_id, "' of ", size, " bytes"));
  }
  void* base = device_pointers ? region->device_data() : region->host_data();
  if (base == nullptr) {
    return absl::FailedPreconditionError(
        device_pointers
            ? absl::StrCat(name, ": a ", region->kind(),
                           " region is not visible to this backend's GPU")
            : absl::StrCat(name, ": a ", region->kind(),
                           " region is device memory; it needs the CUDA "
                           "backend"));
  }
  // Both backends load whole elements: an operand must start at a multiple
  // of its element size in memory. Validation checked offset_bytes; what is
  // left is where the region itself starts in its segment.
  const char* data = static_cast<const char*>(base) + checked.offset_bytes;
  const size_t element_bytes = DTypeSize(checked.dtype);
  if (reinterpret_cast<uintptr_t>(data) % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " at byte ", checked.offset_bytes, " of region '",
        checked.region_id, "' is not ", element_bytes,
        "-byte aligned in memory: the region starts at an offset of its "
        "segment that is not; ",
        checked.dtype == DType::kBF16 ? "BF16" : "FP32",
        " operands must start at a multiple of ", element_bytes,
        " bytes (register the region at an offset that is a multiple of 16)"));
  }
  const Region::Placement placement = region->placement();
  const uint64_t begin = placement.offset + checked.offset_bytes;
  *span = Span{placement.object, begin,
               begin + static_cast<uint64_t>(checked.extent_bytes)};
  if (std::find(regions_.begin(), regions_.end(), region) == regions_.end()) {
    const int device = region->cuda_device();
    if (device >= 0 && cuda_device_ >= 0 && device != cuda_device_) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, " is in a region on CUDA device ", device,
                       " and another operand on device ", cuda_device_,
                       "; one product runs on one GPU"));
    }
    if (device >= 0) cuda_device_ = device;
    regions_.push_back(region);
  }
  return data;
}

absl::Status BoundOperands::CheckRegionsIntact() const {
  for (const std::shared_ptr<Region>& region : regions_) {
    RETURN_IF_ERROR(region->CheckIntact());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BoundOperands>> BoundOperands::Bind(
    const MatmulPlan& plan, const v1::MatmulRequest& request,
    const RegionRegistry& registry, bool device_pointers) {
  return BindWith(
      plan, request, request.session_id(),
      request.has_stream_order() ? &request.stream_order() : nullptr,
      /*list=*/nullptr, registry, device_pointers);
}

absl::StatusOr<std::unique_ptr<BoundOperands>> BoundOperands::BindListed(
    const ListPlan& list, size_t index, const v1::MatmulRequest& item,
    const std::string& session_id, const v1::StreamOrder* order,
    const RegionRegistry& registry, bool device_pointers) {
  return BindWith(list.products[index], item, session_id, order, &list,
                  registry, device_pointers);
}

absl::StatusOr<std::unique_ptr<BoundOperands>> BoundOperands::BindWith(
    const MatmulPlan& plan, const v1::MatmulRequest& request,
    const std::string& session, const v1::StreamOrder* order,
    const ListPlan* list, const RegionRegistry& registry,
    bool device_pointers) {
  std::unique_ptr<BoundOperands> bound(new BoundOperands());
  bound->problem_ = plan.problem;
  auto in_place = [](const CheckedTensor& t) {
    return t.in_region || t.in_scratch;
  };
  bound->on_device_ = device_pointers && in_place(plan.a) && in_place(plan.b) &&
                      plan.output_in_region;
  GemmProblem& p = bound->problem_;
  using Which = ScratchOperand::Which;
  std::optional<Span> a_span, b_span, c_span;
  ASSIGN_OR_RETURN(
      const char* a,
      bound->Resolve(request.a(), plan.a, "A", session, list, Which::kA,
                     registry, device_pointers, &bound->a_copy_, &a_span));
  ASSIGN_OR_RETURN(
      const char* b,
      bound->Resolve(request.b(), plan.b, "B", session, list, Which::kB,
                     registry, device_pointers, &bound->b_copy_, &b_span));
  p.a.data = a;
  p.b.data = b;

  if (order != nullptr) {
    RETURN_IF_ERROR(
        bound->BindStreamOrder(*order, session, registry, device_pointers));
  }

  if (plan.output_in_region) {
    ASSIGN_OR_RETURN(const char* c,
                     bound->Resolve(request.c(), *plan.c, "C", session, list,
                                    Which::kC, registry, device_pointers,
                                    /*realigned=*/nullptr, &c_span));
    if ((a_span && c_span->Overlaps(*a_span)) ||
        (b_span && c_span->Overlaps(*b_span))) {
      return absl::InvalidArgumentError(
          "C overlaps A or B in memory; the output must not alias an input");
    }
    p.c.data = const_cast<char*>(c);
    return bound;
  }

  bound->output_.resize(static_cast<size_t>(plan.output_bytes));
  p.c.data = bound->output_.data();
  if (!plan.c || p.beta == 0.0f) return bound;
  // Gather the strided initial C into the dense output, where the epilogue
  // reads it back for beta * C.
  const CheckedTensor& c = *plan.c;
  const size_t esize = DTypeSize(c.dtype);
  const char* src = request.c().inline_data().data();
  char* dst = bound->output_.data();
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t offset =
            batch * c.strides.batch + i * c.strides.row + j * c.strides.col;
        std::memcpy(dst, src + offset * esize, esize);
        dst += esize;
      }
    }
  }
  return bound;
}

}  // namespace matmul
