// Binds a validated plan to memory: each operand's pointer comes from the
// request's inline bytes (realigned copies only when misaligned) or from a
// registered region of the request's session, after checking that the
// operand's whole strided extent lies inside the region and that the output
// overlaps no input. Holds the regions for the request's lifetime, so an
// unregister in the meantime is deferred. An inline output gets a fresh
// dense buffer (with the initial C copied in when beta != 0) that becomes
// the response's C.
#ifndef MATMUL_SERVER_PRODUCT_BOUND_OPERANDS_H_
#define MATMUL_SERVER_PRODUCT_BOUND_OPERANDS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/stream_order.h"
#include "kernels/gemm_list.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/request_validation.h"
#include "server/regions/region_registry.h"

namespace matmul {

class BoundOperands {
 public:
  // `request` must outlive the result. With `device_pointers` (a GPU
  // backend), region operands are addressed as the GPU sees them; otherwise
  // as the host does (the CPU backend). Inline operands are always host
  // memory. NOT_FOUND for an unknown session or region,
  // INVALID_ARGUMENT for an extent outside its region or an output that
  // overlaps an input, FAILED_PRECONDITION for a region the backend cannot
  // address, regions on two different GPUs or a region that is no longer
  // intact (Region::CheckIntact).
  static absl::StatusOr<std::unique_ptr<BoundOperands>> Bind(
      const MatmulPlan& plan, const v1::MatmulRequest& request,
      const RegionRegistry& registry, bool device_pointers);

  // Bind for product `index` of a list (ValidateList's `list`): region
  // operands as Bind binds them, in `session_id`; scratch operands get no
  // pointer but an entry in scratch_operands(), and count as memory for the
  // overlap check. `order`, the list's stream order, is bound here when
  // set (the list's first product carries it).
  static absl::StatusOr<std::unique_ptr<BoundOperands>> BindListed(
      const ListPlan& list, size_t index, const v1::MatmulRequest& item,
      const std::string& session_id, const v1::StreamOrder* order,
      const RegionRegistry& registry, bool device_pointers);

  BoundOperands(const BoundOperands&) = delete;
  BoundOperands& operator=(const BoundOperands&) = delete;

  const GemmProblem& problem() const { return problem_; }
  // True when every operand is device-addressable (Bind's device_pointers,
  // and A, B and C all in regions): the product runs in place. Otherwise
  // operands are staged, and those in GPU regions are copied device to
  // device.
  bool on_device() const { return on_device_; }
  // The CUDA device of the operands' GPU regions; -1 when none is on one.
  int cuda_device() const { return cuda_device_; }
  // Region::CheckIntact of every region the operands are in: call it after
  // the product ran, and answer its status instead of the result when it
  // is not OK (the product may have read zeros for the client's data).
  absl::Status CheckRegionsIntact() const;
  // Set for a request with a stream_order: what its product waits for and
  // signals (GemmProblem::stream_order points here).
  bool stream_ordered() const { return problem_.stream_order != nullptr; }
  // What the backend asks while the product waits for the client's stream
  // (see StreamOrder::give_up).
  void SetStreamOrderGiveUp(std::function<absl::Status()> give_up);
  // Moves the inline result out (empty when the output is in a region).
  std::string TakeOutput() { return std::move(output_); }
  // BindListed's operands in scratch, their `product` left 0.
  const std::vector<ScratchOperand>& scratch_operands() const {
    return scratch_operands_;
  }

 private:
  BoundOperands() = default;

  // The bytes an operand in a region covers, in its Region::Placement
  // terms.
  struct Span {
    std::string object;
    uint64_t begin = 0;
    uint64_t end = 0;
    bool Overlaps(const Span& other) const {
      return object == other.object && begin < other.end && other.begin < end;
    }
  };

  // Bind and BindListed: `list` and `index` are set for a listed product.
  static absl::StatusOr<std::unique_ptr<BoundOperands>> BindWith(
      const MatmulPlan& plan, const v1::MatmulRequest& request,
      const std::string& session_id, const v1::StreamOrder* order,
      const ListPlan* list, const RegionRegistry& registry,
      bool device_pointers);

  // Resolves the request's stream_order words in their shm region.
  absl::Status BindStreamOrder(const v1::StreamOrder& order,
                               const std::string& session_id,
                               const RegionRegistry& registry,
                               bool device_pointers);
  // Resolves one operand to its first element's address; `span` is set for
  // an operand in a region or in scratch (whose address is null: the
  // operand goes to scratch_operands_ as `which`).
  absl::StatusOr<const char*> Resolve(
      const v1::Tensor& tensor, const CheckedTensor& checked,
      const std::string& name, const std::string& session_id,
      const ListPlan* list, ScratchOperand::Which which,
      const RegionRegistry& registry, bool device_pointers,
      std::vector<uint32_t>* realigned, std::optional<Span>* span);

  GemmProblem problem_;
  StreamOrder stream_order_;
  bool on_device_ = false;
  int cuda_device_ = -1;
  std::string output_;
  std::vector<uint32_t> a_copy_;
  std::vector<uint32_t> b_copy_;
  std::vector<ScratchOperand> scratch_operands_;
  // Held while in flight, each distinct region once (so a region's use
  // count, less the registry's reference, counts requests).
  std::vector<std::shared_ptr<Region>> regions_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_BOUND_OPERANDS_H_
