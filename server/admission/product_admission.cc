#include "server/admission/product_admission.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/gemm/shape_name.h"
#include "kernels/gemm_batch.h"
#include "server/admission/request_answer.h"
#include "server/product/pending_product.h"

namespace matmul {

BatchPlacement PlaceInBatches(const GemmProblem& problem, bool on_device,
                              const GemmBackend& backend,
                              bool signals_client_stream) {
  BatchPlacement placement;
  placement.key =
      absl::StrCat(BatchKey(problem), on_device ? "|device" : "|staged");
  if (signals_client_stream) placement.key += "|ordered";
  placement.max_batch = backend.MaxUsefulBatch(problem);
  // Products the backend runs alone queue apart: a key's first product
  // sets its batches' cap, and the batch count (not in BatchKey) can
  // change it.
  if (placement.max_batch == 1) placement.key += "|alone";
  return placement;
}

ProductAdmission::ProductAdmission(std::vector<DeviceLane>& lanes,
                                   ServerMetrics& metrics,
                                   RegionRegistry& registry,
                                   InFlightRequests& in_flight,
                                   const AdmissionOptions& options)
    : lanes_(lanes),
      metrics_(metrics),
      registry_(registry),
      in_flight_(in_flight),
      options_(options),
      client_quota_(options.max_in_flight_per_client) {}

absl::StatusOr<DeviceLane*> ProductAdmission::LaneFor(int device) {
  if (device >= 0) {
    for (DeviceLane& lane : lanes_) {
      if (lane.backend->cuda_device() == device) return &lane;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the operands' regions are on CUDA device ", device,
                     ", which this daemon does not run on"));
  }
  DeviceLane* least = &lanes_.front();
  for (DeviceLane& lane : lanes_) {
    if (lane.load() < least->load()) least = &lane;
  }
  return least;
}

namespace {

bool UsesRegions(const v1::MatmulRequest& request) {
  // Every list has a region operand: its first product reads no scratch.
  return !request.session_id().empty() || request.products_size() > 0 ||
         request.a().has_region() || request.b().has_region() ||
         request.c().has_region();
}

}  // namespace

absl::Status ProductAdmission::CheckRegionAccess(
    const CallControl& control, const v1::MatmulRequest& request) const {
  if (!UsesRegions(request)) return absl::OkStatus();
  if (!control.caller.has_value()) {
    return absl::PermissionDeniedError(
        "region operands are for clients on the daemon's host: connect "
        "through its unix socket, or send the tensors inline");
  }
  // Binding explains a region operand without a session.
  if (request.session_id().empty()) return absl::OkStatus();
  return registry_.CheckOwner(request.session_id(), *control.caller);
}

void ProductAdmission::Submit(CallControl control,
                              const v1::MatmulRequest* request,
                              v1::MatmulResponse* response,
                              absl::AnyInvocable<void(absl::Status) &&> done) {
  const absl::Time accepted = absl::Now();
  // Every path below ends in the answer's Send, once.
  auto answer = std::make_unique<RequestAnswer>(metrics_, std::move(done));
  auto refuse = [&answer](absl::Status status) {
    std::move(*answer).Send(std::move(status));
  };
  if (control.deadline <= accepted) {
    refuse(absl::DeadlineExceededError(
        "the request's deadline had passed when it arrived"));
    return;
  }
  // A product list is validated and bound whole; everything else is as
  // for one product.
  const bool is_list = request->products_size() > 0;
  std::optional<MatmulPlan> plan;
  std::optional<ListPlan> list_plan;
  std::string shape;
  if (is_list) {
    absl::StatusOr<ListPlan> validated =
        ValidateList(*request, options_.limits);
    if (!validated.ok()) {
      refuse(validated.status());
      return;
    }
    list_plan = *std::move(validated);
    shape = std::string(kListShape);
  } else {
    absl::StatusOr<MatmulPlan> validated =
        ValidateRequest(*request, options_.limits);
    if (!validated.ok()) {
      refuse(validated.status());
      return;
    }
    plan = *std::move(validated);
    shape = ShapeName(plan->problem);
  }
  answer->set_shape(shape);
  if (absl::Status access = CheckRegionAccess(control, *request);
      !access.ok()) {
    refuse(std::move(access));
    return;
  }
  if (absl::Status share = client_quota_.Acquire(control.client_key);
      !share.ok()) {
    refuse(std::move(share));
    return;
  }
  answer->HoldShare(client_quota_, control.client_key);
  // Regions are looked up and bounds-checked now, before any queueing. On
  // a GPU backend region operands are bound as the device sees them; a
  // product with any inline operand is staged through device buffers.
  const bool device_pointers = lanes_.front().backend->cuda_device() >= 0;
  auto product = std::make_unique<PendingProduct>();
  int cuda_device = -1;
  if (is_list) {
    absl::StatusOr<std::unique_ptr<BoundList>> list =
        BoundList::Bind(*list_plan, *request, registry_, device_pointers);
    if (!list.ok()) {
      refuse(list.status());
      return;
    }
    product->list = *std::move(list);
    cuda_device = product->list->cuda_device();
  } else {
    absl::StatusOr<std::unique_ptr<BoundOperands>> operands =
        BoundOperands::Bind(*plan, *request, registry_, device_pointers);
    if (!operands.ok()) {
      refuse(operands.status());
      return;
    }
    product->operands = *std::move(operands);
    product->plan = *std::move(plan);
    cuda_device = product->operands->cuda_device();
  }
  absl::StatusOr<DeviceLane*> lane = LaneFor(cuda_device);
  if (!lane.ok()) {
    refuse(lane.status());
    return;
  }
  product->request = request;
  product->response = response;
  const bool may_run_here = control.may_run_on_caller && !is_list &&
                            product->operands->problem().flops() <=
                                options_.caller_thread_max_mflop * 1e6;
  // From here the in-flight table holds the answer: the product's end or
  // the shutdown's give-up, whichever comes first, sends it.
  product->in_flight =
      in_flight_.Add(control.origin, shape, accepted,
                     [answer = std::move(answer)](absl::Status status) mutable {
                       std::move(*answer).Send(std::move(status));
                     });
  if (product->in_flight == nullptr) return;  // answered: the daemon stops
  product->finish = [in_flight = product->in_flight](absl::Status status) {
    in_flight->Answer(std::move(status));
  };
  product->control = std::move(control);
  product->accepted = accepted;
  const bool stream_ordered = is_list ? product->list->stream_ordered()
                                      : product->operands->stream_ordered();
  if (stream_ordered) {
    auto give_up = [product = product.get()]() -> absl::Status {
      if (absl::Now() >= product->control.deadline) {
        return absl::DeadlineExceededError(
            "the client's CUDA stream did not reach the product before "
            "the request's deadline");
      }
      if (product->control.cancelled && product->control.cancelled()) {
        return absl::CancelledError(
            "the client went away while its product waited for its "
            "CUDA stream");
      }
      if (product->in_flight->claimed()) {
        return absl::UnavailableError(
            "the daemon stopped waiting for the client's CUDA stream: "
            "it is shutting down");
      }
      return absl::OkStatus();
    };
    if (is_list) {
      product->list->SetStreamOrderGiveUp(std::move(give_up));
    } else {
      product->operands->SetStreamOrderGiveUp(std::move(give_up));
    }
  }
  // A list is a launch of its own.
  const BatchPlacement placement =
      is_list
          ? BatchPlacement{.key = "list", .max_batch = 1}
          : PlaceInBatches(product->operands->problem(),
                           product->operands->on_device(), *(*lane)->backend,
                           stream_ordered && request->stream_order().signal());
  // A small product a worker would run alone at once runs here instead,
  // without the hand-off to the worker and back; not one that may wait for
  // its client's stream, which would hold the calling thread meanwhile.
  if (may_run_here && !stream_ordered &&
      (*lane)->executor->TryRunHere(placement.key, product,
                                    placement.max_batch)) {
    return;
  }
  // Submit moves from `product` only when it accepts it.
  if (absl::Status refusal = (*lane)->executor->Submit(
          placement.key, std::move(product), placement.max_batch);
      !refusal.ok()) {
    std::move(product->finish)(std::move(refusal));
  }
}

}  // namespace matmul
