// Admission of one product, or of one product list (MatmulRequest.
// products: validated and bound whole, a launch of its own), whichever
// transport brought it (a unary call, a MatmulStream, a request ring):
// everything between a parsed request and the executor, in one place and
// in this order:
//   deadline -> validate -> region access -> the client's quota -> bind
//   (regions looked up and bounds-checked) -> lane (the GPU that holds the
//   operands) -> batch placement (which products may share a launch, how
//   many) -> run on the caller's thread or submit to the lane's executor.
// Every request is counted in the metrics under its shape, and answered
// exactly once.
#ifndef MATMUL_SERVER_ADMISSION_PRODUCT_ADMISSION_H_
#define MATMUL_SERVER_ADMISSION_PRODUCT_ADMISSION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/admission/client_quota.h"
#include "server/execution/device_lane.h"
#include "server/metrics/metrics.h"
#include "server/product/bound_operands.h"
#include "server/product/in_flight_requests.h"
#include "server/product/product_submitter.h"
#include "server/product/request_validation.h"
#include "server/regions/region_registry.h"

namespace matmul {

// Where a product queues in the batcher: products of one key may share a
// launch, at most max_batch of them (0: the batcher's own bound).
struct BatchPlacement {
  std::string key;
  int max_batch = 0;
};

// The one batching policy: products share a launch when they agree on
// BatchKey (shape, layouts, dtypes, alpha, beta), on whether their operands
// are the device's own or staged, and the backend would run more than one
// of them in a launch. Stream-ordered products that signal their clients'
// streams queue apart; of a batch of them the runner launches together only
// those whose clients' streams have reached them, and the rest alone
// (MatmulRunner::RunBatch). `problem`: the product as bound
// (BoundOperands::problem); `on_device`: its operands are the device's own
// (not staged).
BatchPlacement PlaceInBatches(const GemmProblem& problem, bool on_device,
                              const GemmBackend& backend,
                              bool signals_client_stream);

struct AdmissionOptions {
  ValidationLimits limits;
  // Requests in flight per client, a process or a TCP host (ClientQuota;
  // 0: no bound).
  int max_in_flight_per_client = 128;
  // Products up to this many MFLOP may run on the transport's own thread
  // where it allows (CallControl::may_run_on_caller: the synchronous unary
  // API) when a worker is idle and nothing is queued; 0 always hands off.
  double caller_thread_max_mflop = 64;
};

class ProductAdmission final : public ProductSubmitter {
 public:
  // `lanes` (at least one), `metrics` and `registry` must outlive it.
  // `in_flight` too; every request queued is added to it.
  ProductAdmission(std::vector<DeviceLane>& lanes, ServerMetrics& metrics,
                   RegionRegistry& registry, InFlightRequests& in_flight,
                   const AdmissionOptions& options);

  void Submit(CallControl control, const v1::MatmulRequest* request,
              v1::MatmulResponse* response,
              absl::AnyInvocable<void(absl::Status) &&> done) override;

 private:
  // OK for a request without region operands; otherwise the caller must
  // be local and own the request's session.
  absl::Status CheckRegionAccess(const CallControl& control,
                                 const v1::MatmulRequest& request) const;
  // The lane a product runs on: the GPU that holds its region operands
  // (`device`, -1 for none), else the least loaded lane.
  // FAILED_PRECONDITION when no lane serves the regions' device.
  absl::StatusOr<DeviceLane*> LaneFor(int device);

  std::vector<DeviceLane>& lanes_;
  ServerMetrics& metrics_;
  RegionRegistry& registry_;
  InFlightRequests& in_flight_;
  const AdmissionOptions options_;
  ClientQuota client_quota_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_ADMISSION_PRODUCT_ADMISSION_H_
