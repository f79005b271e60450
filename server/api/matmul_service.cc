#include "server/api/matmul_service.h"

#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/api/grpc_call_control.h"
#include "server/api/matmul_stream_reactor.h"
#include "server/api/refused_reactor.h"
#include "server/api/response_bytes.h"
#include "server/regions/cuda_region_device.h"
#include "server/transport/peer_identity.h"

namespace matmul {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

MatmulServiceImpl::MatmulServiceImpl(std::vector<DeviceLane>& lanes,
                                     ServerMetrics& metrics,
                                     RegionRegistry& registry,
                                     InFlightRequests& in_flight,
                                     const MatmulServiceOptions& options)
    : lanes_(lanes),
      metrics_(metrics),
      registry_(registry),
      options_(options),
      admission_(lanes, metrics, registry, in_flight, options.admission),
      ring_pollers_(options.rings.pollers, options.rings.poll_spin) {
  if (options.unary_api != UnaryApi::kSync) {
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

grpc::Status MatmulServiceImpl::Matmul(grpc::ServerContext* context,
                                       const v1::MatmulRequest* request,
                                       v1::MatmulResponse* response) {
  CallControl control = GrpcCallControl(context);
  control.may_run_on_caller = true;
  control.origin = "unary call from " + control.origin;
  // This thread waits for the answer anyway: a small product runs on it
  // (done then runs before Submit returns), a larger one on a worker.
  absl::Notification answered;
  absl::Status answer;
  admission_.Submit(std::move(control), request, response,
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
  control.may_run_on_caller = options_.unary_api == UnaryApi::kCallbackRunSmall;
  control.origin = "unary call from " + control.origin;
  admission_.Submit(std::move(control), &raw->request, &raw->response,
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
  return new MatmulStreamReactor(admission_, context);
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
  registry_.Stop();
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
  absl::StatusOr<std::unique_ptr<AttachedRing>> ring =
      AttachedRing::Open(*request, options_.shm.prefix, peer->credentials,
                         options_.shm.allow_other_owners);
  if (!ring.ok()) return refuse_and_release(ring.status());
  absl::MutexLock lock(&sessions_mu_);
  if (closing_) {
    return refuse_and_release(
        absl::UnavailableError("the server is shutting down"));
  }
  if (static_cast<int>(rings_.size()) >= options_.rings.max_rings) {
    return refuse_and_release(absl::ResourceExhaustedError(absl::StrCat(
        options_.rings.max_rings,
        " rings are attached already (--max_rings); detach one or raise "
        "the limit")));
  }
  auto* reactor =
      new RingReactor(admission_, ring_pollers_, *std::move(ring), session_id,
                      peer->credentials, [this, session_id](RingReactor* done) {
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
  if (request->has_shared()) {
    absl::StatusOr<std::string> id = registry_.OpenShared(
        request->session_id(), peer->credentials, request->shared().token());
    absl::StatusOr<std::shared_ptr<Region>> region =
        id.ok() ? registry_.Find(request->session_id(), *id) : id.status();
    if (region.ok()) {
      response->set_region_id(*id);
      response->set_size_bytes(static_cast<uint64_t>((*region)->size_bytes()));
    }
    reactor->Finish(ToGrpcStatus(region.status()));
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

grpc::ServerUnaryReactor* MatmulServiceImpl::ShareRegion(
    grpc::CallbackServerContext* context, const v1::ShareRegionRequest* request,
    v1::ShareRegionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<LocalPeer> peer = LocalPeerOf(context->peer());
  if (!peer.ok()) {
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  ShareAccess access = ShareAccess::kSameUser;
  switch (request->access()) {
    case v1::SHARE_ACCESS_SAME_USER:
      break;
    case v1::SHARE_ACCESS_SAME_GROUP:
      access = ShareAccess::kSameGroup;
      break;
    case v1::SHARE_ACCESS_ANY_LOCAL:
      access = ShareAccess::kAnyLocal;
      break;
    default:
      reactor->Finish(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("ShareRegion: unknown access ", request->access())));
      return reactor;
  }
  absl::StatusOr<std::string> token = registry_.Share(
      request->session_id(), peer->credentials, request->region_id(), access);
  if (token.ok()) response->set_token(*token);
  reactor->Finish(ToGrpcStatus(token.status()));
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
  limits->set_max_message_bytes(options_.admission.limits.max_message_bytes);
  limits->set_max_dimension(options_.admission.limits.max_dimension);
  limits->set_max_tensor_bytes(options_.admission.limits.max_tensor_bytes);
  limits->set_max_concurrent_requests(options_.max_concurrent_requests);
  limits->set_max_list_products(options_.admission.limits.max_list_products);
  limits->set_max_list_scratch_bytes(
      options_.admission.limits.max_list_scratch_bytes);
  response->set_mps_client(
      lanes_.front().backend->devices().front().mps_client);
  response->add_supported_input_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_BF16);
  response->add_supported_output_dtypes(v1::DTYPE_FP32);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace matmul
