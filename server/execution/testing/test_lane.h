// A DeviceLane for unit tests of the service: `backend` behind a runner
// that answers as device `device_index`, and an executor with one worker
// that runs each product alone.
#ifndef MATMUL_SERVER_EXECUTION_TESTING_TEST_LANE_H_
#define MATMUL_SERVER_EXECUTION_TESTING_TEST_LANE_H_

#include <memory>
#include <utility>
#include <vector>

#include "server/execution/device_lane.h"
#include "server/metrics/metrics.h"
#include "server/product/pending_product.h"

namespace matmul {

inline DeviceLane MakeTestLane(std::unique_ptr<GemmBackend> backend,
                               ServerMetrics& metrics, int device_index) {
  DeviceLane lane;
  lane.backend = std::move(backend);
  lane.region_opener = std::make_unique<RegionOpener>(
      RegionOpenOptions{.cuda_device = lane.backend->cuda_device()});
  lane.runner =
      std::make_unique<MatmulRunner>(*lane.backend, metrics, device_index);
  MatmulRunner* runner = lane.runner.get();
  lane.executor = *ProductExecutor::Create(
      {.worker_threads = 1, .batching = {.max_batch_size = 1}},
      [runner](std::vector<std::unique_ptr<PendingProduct>> batch,
               LaunchHold hold) {
        runner->RunBatch(std::move(batch), std::move(hold));
      });
  return lane;
}

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_TESTING_TEST_LANE_H_
