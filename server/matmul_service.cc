#include "server/matmul_service.h"

#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/gemm_batch.h"
#include "server/matmul_stream_reactor.h"
#include "server/refused_reactor.h"
#include "server/regions/cuda_region_opener.h"
#include "server/transport/grpc_call_control.h"
#include "server/transport/peer_identity.h"
#include "server/transport/response_bytes.h"

namespace matmul {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

MatmulServiceImpl::MatmulServiceImpl(
    std::vector<DeviceLane>& lanes, ServerMetrics& metrics,
    RegionRegistry& registry, const ValidationLimits& limits,
    int max_concurrent_requests, int max_in_flight_per_client,
    std::string shm_prefix, bool allow_other_shm_owners,
    const RingOptions& rings, double caller_thread_max_flops,
    UnaryApi unary_api)
    : lanes_(lanes),
      metrics_(metrics),
      registry_(registry),
      limits_(limits),
      max_concurrent_requests_(max_concurrent_requests),
      client_quota_(max_in_flight_per_client),
      shm_prefix_(std::move(shm_prefix)),
      allow_other_shm_owners_(allow_other_shm_owners),
      ring_options_(rings),
      caller_thread_max_flops_(caller_thread_max_flops),
      unary_api_(unary_api) {
  if (unary_api != UnaryApi::kSync) {
    // gRPC owns method handlers by raw pointer (as generated code does).
    MarkMethodRawCallback(
        0, new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer,
                                                    grpc::ByteBuffer>(
               [this](grpc::CallbackServerContext* context,
                      const grpc::ByteBuffer* request,
                      grpc::ByteBuffer* response) {
                 return MatmulCallback(context, request, response);
               }));
  }
}

absl::StatusOr<DeviceLane*> MatmulServiceImpl::LaneFor(
    const BoundOperands& operands) {
  const int device = operands.cuda_device();
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

DeviceLane& MatmulServiceImpl::LaneFor(
    const v1::RegisterRegionRequest& request) {
  int32_t ordinal = 0;
  std::string uuid;
  if (request.has_cuda_ipc()) {
    ordinal = request.cuda_ipc().device_ordinal();
    uuid = request.cuda_ipc().device_uuid();
  } else if (request.has_cuda_vmm()) {
    ordinal = request.cuda_vmm().device_ordinal();
    uuid = request.cuda_vmm().device_uuid();
  } else {
    return lanes_.front();
  }
  for (DeviceLane& lane : lanes_) {
    const int device = lane.backend->cuda_device();
    if (device >= 0 && CheckRegionDevice(device, ordinal, uuid).ok()) {
      return lane;
    }
  }
  return lanes_.front();
}

namespace {

bool UsesRegions(const v1::MatmulRequest& request) {
  return !request.session_id().empty() || request.a().has_region() ||
         request.b().has_region() || request.c().has_region();
}

}  // namespace

absl::Status MatmulServiceImpl::CheckRegionAccess(
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

void MatmulServiceImpl::Submit(CallControl control,
                               const v1::MatmulRequest* request,
                               v1::MatmulResponse* response,
                               absl::AnyInvocable<void(absl::Status) &&> done) {
  const absl::Time accepted = absl::Now();
  metrics_.RequestStarted();
  // Every path ends here: count the outcome under the request's shape
  // (none until it is validated), then answer.
  auto shape = std::make_shared<std::string>();
  absl::AnyInvocable<void(absl::Status)> finish =
      [this, shape, done = std::move(done)](absl::Status status) mutable {
        metrics_.CountRequest(*shape, status.code());
        metrics_.RequestFinished();
        std::move(done)(std::move(status));
      };
  if (control.deadline <= accepted) {
    finish(absl::DeadlineExceededError(
        "the request's deadline had passed when it arrived"));
    return;
  }
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(*request, limits_);
  if (!plan.ok()) {
    finish(plan.status());
    return;
  }
  *shape = ShapeName(plan->problem);
  if (absl::Status access = CheckRegionAccess(control, *request);
      !access.ok()) {
    finish(std::move(access));
    return;
  }
  if (absl::Status share = client_quota_.Acquire(control.client_key);
      !share.ok()) {
    finish(std::move(share));
    return;
  }
  // From here on the request holds a place in its client's quota.
  finish = [this, key = control.client_key,
            finish = std::move(finish)](absl::Status status) mutable {
    client_quota_.Release(key);
    std::move(finish)(std::move(status));
  };
  // Regions are looked up and bounds-checked now, before any queueing. On
  // a GPU backend region operands are bound as the device sees them; a
  // product with any inline operand is staged through device buffers.
  absl::StatusOr<std::unique_ptr<BoundOperands>> operands = BoundOperands::Bind(
      *plan, *request, registry_,
      /*device_pointers=*/lanes_.front().backend->cuda_device() >= 0);
  if (!operands.ok()) {
    finish(operands.status());
    return;
  }
  absl::StatusOr<DeviceLane*> lane = LaneFor(**operands);
  if (!lane.ok()) {
    finish(lane.status());
    return;
  }
  auto product = std::make_unique<PendingProduct>();
  product->operands = *std::move(operands);
  std::string key =
      absl::StrCat(BatchKey(product->operands->problem()),
                   product->operands->on_device() ? "|device" : "|staged");
  product->plan = *std::move(plan);
  product->request = request;
  product->response = response;
  const bool may_run_here =
      control.may_run_on_caller &&
      product->operands->problem().flops() <= caller_thread_max_flops_;
  product->control = std::move(control);
  product->accepted = accepted;
  product->finish = std::move(finish);
  const bool stream_ordered = product->operands->stream_ordered();
  if (stream_ordered) {
    product->operands->SetStreamOrderGiveUp(
        [product = product.get()]() -> absl::Status {
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
          return absl::OkStatus();
        });
  }
  // A small product a worker would run alone at once runs here instead,
  // without the hand-off to the worker and back; not one that may wait for
  // its client's stream, which would hold the calling thread meanwhile.
  if (may_run_here && !stream_ordered &&
      (*lane)->executor->TryRunHere(product)) {
    return;
  }
  int max_batch =
      (*lane)->backend->MaxUsefulBatch(product->operands->problem());
  // Products the backend runs alone queue apart: a key's first product sets
  // its batches' cap, and the batch count (not in BatchKey) can change it.
  if (max_batch == 1) key += "|alone";
  // A product that signals the client's stream must not share a launch:
  // the client's next product waits, through that stream, for its signal,
  // so a launch holding both would wait for itself.
  if (stream_ordered && request->stream_order().signal()) {
    key += "|ordered";
    max_batch = 1;
  }
  // Submit moves from `product` only when it accepts it.
  if (absl::Status refusal =
          (*lane)->executor->Submit(key, std::move(product), max_batch);
      !refusal.ok()) {
    std::move(product->finish)(std::move(refusal));
  }
}

grpc::Status MatmulServiceImpl::Matmul(grpc::ServerContext* context,
                                       const v1::MatmulRequest* request,
                                       v1::MatmulResponse* response) {
  CallControl control = GrpcCallControl(context);
  control.may_run_on_caller = true;
  // This thread waits for the answer anyway: a small product runs on it
  // (done then runs before Submit returns), a larger one on a worker.
  absl::Notification answered;
  absl::Status answer;
  Submit(std::move(control), request, response,
         [&answered, &answer](absl::Status status) {
           answer = std::move(status);
           answered.Notify();
         });
  answered.WaitForNotification();
  return ToGrpcStatus(answer);
}

grpc::ServerUnaryReactor* MatmulServiceImpl::MatmulCallback(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  struct Call {
    v1::MatmulRequest request;
    v1::MatmulResponse response;
  };
  auto call = std::make_unique<Call>();
  // Deserialize consumes its buffer; gRPC owns this one, so read a copy
  // (a copy of the slice references, not of the bytes).
  grpc::ByteBuffer bytes(*request_bytes);
  const size_t size = bytes.Length();
  if (!grpc::SerializationTraits<v1::MatmulRequest>::Deserialize(&bytes,
                                                                 &call->request)
           .ok()) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("the request's ", size,
                     " bytes are not a serialized matmul.v1.MatmulRequest "
                     "(a string field that is not UTF-8, say)")));
    return reactor;
  }
  Call* raw = call.get();
  // A callback thread serves other calls' I/O too: it hands every product
  // to a worker rather than block on one, unless told otherwise.
  CallControl control = GrpcCallControl(context);
  control.may_run_on_caller = unary_api_ == UnaryApi::kCallbackRunSmall;
  Submit(std::move(control), &raw->request, &raw->response,
         [reactor, response_bytes,
          call = std::move(call)](absl::Status status) mutable {
           if (!status.ok()) {
             reactor->Finish(ToGrpcStatus(status));
             return;
           }
           *response_bytes = SerializeMatmulResponse(call->response);
           reactor->Finish(grpc::Status::OK);
         });
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
MatmulServiceImpl::MatmulStream(grpc::CallbackServerContext* context) {
  // gRPC owns reactors by raw pointer; the reactor deletes itself in OnDone.
  return new MatmulStreamReactor(*this, context);
}

grpc::ServerWriteReactor<v1::SessionEvent>* MatmulServiceImpl::OpenSession(
    grpc::CallbackServerContext* context,
    const v1::OpenSessionRequest* request) {
  absl::StatusOr<LocalPeer> peer = LocalPeerOf(context->peer());
  if (!peer.ok()) {
    return new RefusedWriteReactor<v1::SessionEvent>(
        ToGrpcStatus(peer.status()));
  }
  auto* reactor =
      new SessionReactor(registry_, request->client_name(), peer->credentials,
                         [this](SessionReactor* done) {
                           absl::MutexLock lock(&sessions_mu_);
                           sessions_.erase(done);
                         });
  absl::MutexLock lock(&sessions_mu_);
  sessions_.insert(reactor);
  return reactor;
}

void MatmulServiceImpl::CloseAllSessions() {
  absl::MutexLock lock(&sessions_mu_);
  closing_ = true;
  const grpc::Status stopping(grpc::StatusCode::UNAVAILABLE,
                              "the server is shutting down");
  for (SessionReactor* session : sessions_) session->Close(stopping);
  for (RingReactor* ring : rings_) ring->Close(stopping);
}

grpc::ServerWriteReactor<v1::RingEvent>* MatmulServiceImpl::AttachRing(
    grpc::CallbackServerContext* context,
    const v1::AttachRingRequest* request) {
  auto refuse = [](const absl::Status& status) {
    return new RefusedWriteReactor<v1::RingEvent>(ToGrpcStatus(status));
  };
  absl::StatusOr<LocalPeer> peer = LocalPeerOf(context->peer());
  if (!peer.ok()) return refuse(peer.status());
  const std::string& session_id = request->session_id();
  // The session's quota is taken before the ring is mapped, and given back
  // on every path that does not end in an attached ring.
  if (absl::Status place = registry_.AddRing(session_id, peer->credentials);
      !place.ok()) {
    return refuse(place);
  }
  auto refuse_and_release = [&](const absl::Status& status) {
    registry_.RemoveRing(session_id);
    return refuse(status);
  };
  absl::StatusOr<std::unique_ptr<AttachedRing>> ring = AttachedRing::Open(
      *request, shm_prefix_, peer->credentials, allow_other_shm_owners_);
  if (!ring.ok()) return refuse_and_release(ring.status());
  absl::MutexLock lock(&sessions_mu_);
  if (closing_) {
    return refuse_and_release(
        absl::UnavailableError("the server is shutting down"));
  }
  if (static_cast<int>(rings_.size()) >= ring_options_.max_rings) {
    return refuse_and_release(absl::ResourceExhaustedError(absl::StrCat(
        ring_options_.max_rings,
        " rings are attached already (--max_rings); detach one or raise "
        "the limit")));
  }
  auto* reactor = new RingReactor(*this, *std::move(ring), session_id,
                                  peer->credentials, ring_options_.poll_spin,
                                  [this, session_id](RingReactor* done) {
                                    metrics_.RingDetached();
                                    registry_.RemoveRing(session_id);
                                    absl::MutexLock lock(&sessions_mu_);
                                    rings_.erase(done);
                                  });
  rings_.insert(reactor);
  metrics_.RingAttached();
  return reactor;
}

grpc::ServerUnaryReactor* MatmulServiceImpl::RegisterRegion(
    grpc::CallbackServerContext* context,
    const v1::RegisterRegionRequest* request,
    v1::RegisterRegionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<LocalPeer> peer =
      LocalPeerOf(context->peer(), /*with_pidfd=*/true);
  // Nothing is opened for a caller that does not own the session.
  absl::Status access =
      peer.ok() ? registry_.CheckOwner(request->session_id(), peer->credentials)
                : peer.status();
  if (!access.ok()) {
    reactor->Finish(ToGrpcStatus(access));
    return reactor;
  }
  absl::StatusOr<std::unique_ptr<Region>> region =
      LaneFor(*request).region_opener->Open(*request, peer->credentials);
  if (!region.ok()) {
    reactor->Finish(ToGrpcStatus(region.status()));
    return reactor;
  }
  const int64_t size = (*region)->size_bytes();
  absl::StatusOr<std::string> id = registry_.Add(
      request->session_id(), peer->credentials, *std::move(region));
  if (id.ok()) {
    response->set_region_id(*id);
    response->set_size_bytes(static_cast<uint64_t>(size));
  }
  reactor->Finish(ToGrpcStatus(id.status()));
  return reactor;
}

grpc::ServerUnaryReactor* MatmulServiceImpl::UnregisterRegion(
    grpc::CallbackServerContext* context,
    const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<LocalPeer> peer = LocalPeerOf(context->peer());
  if (!peer.ok()) {
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  absl::StatusOr<bool> deferred = registry_.Remove(
      request->session_id(), peer->credentials, request->region_id());
  if (deferred.ok()) response->set_deferred(*deferred);
  reactor->Finish(ToGrpcStatus(deferred.status()));
  return reactor;
}

grpc::ServerUnaryReactor* MatmulServiceImpl::ListRegions(
    grpc::CallbackServerContext* context, const v1::ListRegionsRequest* request,
    v1::ListRegionsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<LocalPeer> peer = LocalPeerOf(context->peer());
  if (!peer.ok()) {
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  absl::StatusOr<std::vector<RegionSummary>> regions =
      registry_.List(request->session_id(), peer->credentials);
  if (regions.ok()) {
    for (const RegionSummary& summary : *regions) {
      v1::RegionInfo* info = response->add_regions();
      info->set_region_id(summary.region_id);
      info->set_kind(summary.kind);
      info->set_size_bytes(static_cast<uint64_t>(summary.size_bytes));
      info->set_requests_in_flight(summary.requests_in_flight);
    }
  }
  reactor->Finish(ToGrpcStatus(regions.status()));
  return reactor;
}

grpc::ServerUnaryReactor* MatmulServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context,
    const v1::GetServerInfoRequest* /*request*/,
    v1::GetServerInfoResponse* response) {
  response->set_version(MATMUL_VERSION);
  response->set_backend(lanes_.front().backend->name());
  for (const DeviceLane& lane : lanes_) {
    for (const DeviceInfo& info : lane.backend->devices()) {
      v1::Device* device = response->add_devices();
      device->set_name(info.name);
      device->set_compute_capability(info.compute_capability);
      device->set_memory_bytes(info.memory_bytes);
      device->set_multiprocessors(info.multiprocessors);
    }
  }
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(limits_.max_message_bytes);
  limits->set_max_dimension(limits_.max_dimension);
  limits->set_max_tensor_bytes(limits_.max_tensor_bytes);
  limits->set_max_concurrent_requests(max_concurrent_requests_);
  response->add_supported_input_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_FP32);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace matmul
