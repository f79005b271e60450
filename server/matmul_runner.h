// Runs one validated, bound request on the calling thread: calls the
// backend, fills the response (result, timings, kernel) and records the
// metrics. Knows nothing of gRPC reactors.
#ifndef MATMUL_SERVER_MATMUL_RUNNER_H_
#define MATMUL_SERVER_MATMUL_RUNNER_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/gemm_backend.h"
#include "matmul/v1/matmul.pb.h"
#include "server/bound_operands.h"
#include "server/metrics.h"
#include "server/request_validation.h"

namespace matmul {

class MatmulRunner {
 public:
  MatmulRunner(GemmBackend& backend, ServerMetrics& metrics)
      : backend_(backend), metrics_(metrics) {}

  // `accepted` is when the server took the request (for queue and total
  // time). Thread-safe.
  absl::Status Run(const MatmulPlan& plan, BoundOperands& operands,
                   const v1::MatmulRequest& request, absl::Time accepted,
                   v1::MatmulResponse* response);

 private:
  GemmBackend& backend_;
  ServerMetrics& metrics_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_MATMUL_RUNNER_H_
