// The gRPC face of the daemon (callback API; unary Matmul on the callback
// or the synchronous API, UnaryApi): sessions, regions and rings, and the
// products of unary calls, MatmulStreams and rings, which it hands to its
// ProductAdmission (product_admission.h) on the gRPC thread; each is
// answered when it is done. MatmulStream multiplexes many requests over one
// stream and answers each as it completes (any order, matched by
// request_id; a bad request gets a response with status_code set and the
// stream goes on).
#ifndef MATMUL_SERVER_API_MATMUL_SERVICE_H_
#define MATMUL_SERVER_API_MATMUL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_set.h"
#include "kernels/gemm_backend.h"
#include "matmul/v1/matmul.grpc.pb.h"
#include "server/admission/product_admission.h"
#include "server/api/ring_reactor.h"
#include "server/api/session_reactor.h"
#include "server/execution/device_lane.h"
#include "server/metrics/metrics.h"
#include "server/product/in_flight_requests.h"
#include "server/product/request_validation.h"
#include "server/regions/region_opener.h"
#include "server/regions/region_registry.h"
#include "server/regions/shm_region.h"
#include "server/ring/ring_pollers.h"

namespace matmul {

grpc::Status ToGrpcStatus(const absl::Status& status);
// v1::MatmulService::CallbackService with MatmulStream (and, on the
// callback API, Matmul) read as raw bytes, so that a message that does not
// parse is answered INVALID_ARGUMENT with a reason (gRPC alone answers a
// bare UNIMPLEMENTED, or ends a stream as if half-closed). Matmul is left
// synchronous here; the constructor turns it into a raw callback method
// unless UnaryApi::kSync. The typed and raw methods cannot share one
// class, so the chain is spelt out; a method added to the proto must be
// added here too.
using MatmulCallbackService =
    v1::MatmulService::WithRawCallbackMethod_MatmulStream<
        v1::MatmulService::WithCallbackMethod_GetServerInfo<
            v1::MatmulService::WithCallbackMethod_OpenSession<
                v1::MatmulService::WithCallbackMethod_RegisterRegion<
                    v1::MatmulService::WithCallbackMethod_UnregisterRegion<
                        v1::MatmulService::WithCallbackMethod_ListRegions<
                            v1::MatmulService::WithCallbackMethod_ShareRegion<
                                v1::MatmulService::
                                    WithCallbackMethod_AttachRing<
                                        v1::MatmulService::Service>>>>>>>>;

// Which gRPC API serves unary Matmul calls. kSync answers on the thread
// that received the call (one thread per call in flight), which runs a
// small product itself when a worker is idle; a request that does not
// parse then gets gRPC's own error rather than our reason.
// kCallbackRunSmall is the callback API whose receiving thread runs a
// small product itself as kSync does: that thread serves other calls'
// I/O too, which waits meanwhile (for a daemon with one caller at a
// time).
enum class UnaryApi { kCallback, kSync, kCallbackRunSmall };

struct MatmulServiceOptions {
  AdmissionOptions admission;
  // Reported by GetServerInfo.
  int max_concurrent_requests = 0;
  // The shm objects that rings may name (regions: RegionOpenOptions).
  ShmAccess shm;
  RingOptions rings;
  UnaryApi unary_api = UnaryApi::kCallback;
};

class MatmulServiceImpl final : public MatmulCallbackService {
 public:
  // `lanes` (at least one), `metrics`, `registry` and `in_flight` must
  // outlive the service.
  MatmulServiceImpl(std::vector<DeviceLane>& lanes, ServerMetrics& metrics,
                    RegionRegistry& registry, InFlightRequests& in_flight,
                    const MatmulServiceOptions& options);

  // Where every transport's products go (the unary calls, the streams and
  // the rings this service makes).
  ProductAdmission& admission() { return admission_; }

  // Unary Matmul on the callback API (raw bytes in and out).
  grpc::ServerUnaryReactor* MatmulCallback(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes);
  // Unary Matmul on the synchronous API (UnaryApi::kSync).
  grpc::Status Matmul(grpc::ServerContext* context,
                      const v1::MatmulRequest* request,
                      v1::MatmulResponse* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* MatmulStream(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context,
      const v1::GetServerInfoRequest* request,
      v1::GetServerInfoResponse* response) override;

  grpc::ServerWriteReactor<v1::SessionEvent>* OpenSession(
      grpc::CallbackServerContext* context,
      const v1::OpenSessionRequest* request) override;
  grpc::ServerUnaryReactor* RegisterRegion(
      grpc::CallbackServerContext* context,
      const v1::RegisterRegionRequest* request,
      v1::RegisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(
      grpc::CallbackServerContext* context,
      const v1::UnregisterRegionRequest* request,
      v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(
      grpc::CallbackServerContext* context,
      const v1::ListRegionsRequest* request,
      v1::ListRegionsResponse* response) override;
  grpc::ServerUnaryReactor* ShareRegion(
      grpc::CallbackServerContext* context,
      const v1::ShareRegionRequest* request,
      v1::ShareRegionResponse* response) override;
  grpc::ServerWriteReactor<v1::RingEvent>* AttachRing(
      grpc::CallbackServerContext* context,
      const v1::AttachRingRequest* request) override;

  // Ends every open session and ring stream (regions are released as their
  // last requests finish; rings stop taking requests, and what they queued
  // is still answered), so that a graceful shutdown need not wait for
  // clients to hang up.
  void CloseAllSessions();

 private:
  // The lane whose device a region registration names (the first lane for
  // shm, or when none matches: its opener then explains the mismatch).
  DeviceLane& LaneFor(const v1::RegisterRegionRequest& request);

  std::vector<DeviceLane>& lanes_;
  ServerMetrics& metrics_;
  RegionRegistry& registry_;
  const MatmulServiceOptions options_;
  ProductAdmission admission_;
  RingPollers ring_pollers_;

  absl::Mutex sessions_mu_;
  absl::flat_hash_set<SessionReactor*> sessions_ ABSL_GUARDED_BY(sessions_mu_);
  absl::flat_hash_set<RingReactor*> rings_ ABSL_GUARDED_BY(sessions_mu_);
  bool closing_ ABSL_GUARDED_BY(sessions_mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_MATMUL_SERVICE_H_
