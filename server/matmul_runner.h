// Runs one batch of pending products on the calling (worker) thread: drops
// those whose deadline passed or whose call was cancelled while they
// queued, runs the rest as one launch (GemmBackend::RunBatch), then fills
// each response (result, timings, kernel, batch size), records the metrics
// and answers every call: on the worker for a batch of one, on the
// Responder's threads for larger ones. Knows nothing of gRPC reactors.
#ifndef MATMUL_SERVER_MATMUL_RUNNER_H_
#define MATMUL_SERVER_MATMUL_RUNNER_H_

#include <memory>
#include <vector>

#include "kernels/gemm_backend.h"
#include "server/metrics.h"
#include "server/pending_product.h"
#include "server/responder.h"

namespace matmul {

class MatmulRunner {
 public:
  // `responder` must outlive the runner and be drained after the workers
  // that call RunBatch have stopped.
  MatmulRunner(GemmBackend& backend, ServerMetrics& metrics,
               Responder& responder)
      : backend_(backend), metrics_(metrics), responder_(responder) {}

  // Every product of `batch` shares one batch key. Each one's `finish` has
  // run, or is posted to the responder, when this returns. Thread-safe.
  void RunBatch(std::vector<std::unique_ptr<PendingProduct>> batch);

 private:
  // Runs `live` as one launch and answers each; when a launch of several
  // fails, retries them one by one so that one bad product cannot fail
  // the others.
  void RunLaunch(std::vector<std::unique_ptr<PendingProduct>> live,
                 absl::Time started);
  // Fills the responses of `products` (which ran in one launch of
  // `batch_size`) and answers them.
  void Answer(std::vector<std::unique_ptr<PendingProduct>> products,
              const GemmRunInfo& run, absl::Time started, int batch_size);

  GemmBackend& backend_;
  ServerMetrics& metrics_;
  Responder& responder_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_MATMUL_RUNNER_H_
