// Whole serialized MatmulRequests through ProductAdmission::Submit on the
// CPU backend, as a gRPC call hands them over: validation, binding, the
// batcher, the executor, OpenBLAS and the answer. Every request is answered
// exactly once, and an accepted one with a dense result of the right size.
// Small limits keep a single input from asking for more than a few
// hundred KiB.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "kernels/cpu/cpu_backend.h"
#include "matmul/v1/matmul.pb.h"
#include "server/api/matmul_service.h"
#include "server/execution/device_lane.h"
#include "server/execution/launch_hold.h"
#include "server/execution/matmul_runner.h"
#include "server/metrics/metrics.h"
#include "server/regions/region_registry.h"
#include "tests/fuzz/fuzz_check.h"

namespace matmul {
namespace {

// The daemon's pieces as MatmulServer::Create wires them, minus the gRPC
// server; built once per process (libFuzzer runs many inputs in one).
class Service {
 public:
  Service() : registry_(RegionRegistryOptions{}) {
    metrics_ = *ServerMetrics::Create(/*listen=*/"", 8, CurrentBuildInfo());
    DeviceLane lane;
    lane.backend = CpuBackend::Create(/*threads_per_product=*/1);
    lane.region_opener = std::make_unique<RegionOpener>(RegionOpenOptions{});
    lane.runner = std::make_unique<MatmulRunner>(*lane.backend, *metrics_, 0);
    MatmulRunner* runner = lane.runner.get();
    ExecutorOptions executor;
    executor.worker_threads = 1;
    executor.batching.max_batch_size = 4;
    executor.batching.max_queue_size = 16;
    lane.executor = *ProductExecutor::Create(
        executor, [runner](std::vector<std::unique_ptr<PendingProduct>> batch,
                           LaunchHold hold) {
          runner->RunBatch(std::move(batch), std::move(hold));
        });
    lanes_.push_back(std::move(lane));
    limits_.max_dimension = 64;
    limits_.max_tensor_bytes = 1 << 16;
    limits_.max_message_bytes = 1 << 16;
    service_ = std::make_unique<MatmulServiceImpl>(
        lanes_, *metrics_, registry_, in_flight_,
        MatmulServiceOptions{.admission = {.limits = limits_},
                             .max_concurrent_requests = 16,
                             .shm = {.prefix = "matmul-fuzz"}});
  }

  MatmulServiceImpl& service() { return *service_; }
  const ValidationLimits& limits() const { return limits_; }

 private:
  std::unique_ptr<ServerMetrics> metrics_;
  InFlightRequests in_flight_;
  std::vector<DeviceLane> lanes_;
  RegionRegistry registry_;
  ValidationLimits limits_;
  std::unique_ptr<MatmulServiceImpl> service_;
};

}  // namespace
}  // namespace matmul

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  matmul::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace matmul;
  // Never destroyed: the executor's worker outlives every input.
  static Service* const service = new Service();
  v1::MatmulRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  v1::MatmulResponse response;
  absl::Notification done;
  absl::Status result;
  int answers = 0;
  service->service().admission().Submit(CallControl{}, &request, &response,
                                        [&](absl::Status status) {
                                          result = std::move(status);
                                          ++answers;
                                          done.Notify();
                                        });
  done.WaitForNotification();
  FUZZ_CHECK(answers == 1);
  if (!result.ok()) {
    FUZZ_CHECK(!result.message().empty());
    return 0;
  }
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, service->limits());
  FUZZ_CHECK(plan.ok());
  if (!plan->output_in_region) {
    FUZZ_CHECK(static_cast<int64_t>(response.c().inline_data().size()) ==
               plan->output_bytes);
  }
  FUZZ_CHECK(response.request_id() == request.request_id());
  return 0;
}
