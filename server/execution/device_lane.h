// What the daemon runs per compute device (one per GPU; one for the CPU):
// the backend, the opener of regions on that device, and the batching
// executor in front of the backend with its workers.
#ifndef MATMUL_SERVER_EXECUTION_DEVICE_LANE_H_
#define MATMUL_SERVER_EXECUTION_DEVICE_LANE_H_

#include <memory>

#include "kernels/gemm_backend.h"
#include "server/execution/executor.h"
#include "server/execution/matmul_runner.h"
#include "server/product/pending_product.h"
#include "server/regions/region_opener.h"

namespace matmul {

// The daemon's executor: pending products, batched by BatchKey and where
// their operands live.
using ProductExecutor = Executor<std::unique_ptr<PendingProduct>>;

struct DeviceLane {
  // Destroyed in reverse: the executor's workers stop before what they use.
  std::unique_ptr<GemmBackend> backend;
  std::unique_ptr<RegionOpener> region_opener;
  std::unique_ptr<MatmulRunner> runner;
  std::unique_ptr<ProductExecutor> executor;

  // Requests queued or running here: what inline requests are balanced by.
  int load() const { return executor->queue_depth() + executor->running(); }
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_DEVICE_LANE_H_
