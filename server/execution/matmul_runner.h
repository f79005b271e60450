// Runs one batch of pending products: drops those whose deadline passed or
// whose call was cancelled while they queued, starts the rest as one launch
// from the calling (worker) thread (GemmBackend::StartBatch), and once the
// launch is complete, on whichever thread the backend completes it, fills
// each response (result, timings, kernel, batch size), records the metrics
// and answers every call. Knows nothing of gRPC reactors.
#ifndef MATMUL_SERVER_EXECUTION_MATMUL_RUNNER_H_
#define MATMUL_SERVER_EXECUTION_MATMUL_RUNNER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/gemm_backend.h"
#include "server/execution/launch_hold.h"
#include "server/metrics/metrics.h"
#include "server/product/pending_product.h"

namespace matmul {

class MatmulRunner {
 public:
  // Runs once, on the first launch that fails with IsDeviceLost
  // (kernels/device_lost.h), with that status.
  using DeviceLostCallback = std::function<void(const absl::Status&)>;

  // `device_index`: the backend's place in GetServerInfo's device list,
  // reported in every response. Once the device is lost, that launch's
  // products and every later one are answered UNAVAILABLE without running.
  MatmulRunner(GemmBackend& backend, ServerMetrics& metrics, int device_index,
               DeviceLostCallback on_device_lost = nullptr)
      : backend_(backend),
        metrics_(metrics),
        device_index_(device_index),
        device_label_(ServerMetrics::DeviceLabel(backend)),
        on_device_lost_(std::move(on_device_lost)) {}

  // Waits for the launches still completing.
  ~MatmulRunner();

  // Every product of `batch` shares one batch key. Each one's `finish` has
  // run when this returns, or runs when the backend completes the launch;
  // `hold` is given back when the launch is complete, before the answers.
  // Stream-ordered products whose clients' streams have not reached them
  // yet launch alone, without the hold, waiting for their streams (on the
  // GPU where they may), after the launch of the others: a launch of
  // several waits for nothing, and so holds up no one. Thread-safe.
  void RunBatch(std::vector<std::unique_ptr<PendingProduct>> batch,
                LaunchHold hold = LaunchHold());

 private:
  // Starts `live` as one launch; FinishLaunch answers each once it is
  // complete.
  void StartLaunch(std::vector<std::unique_ptr<PendingProduct>> live,
                   absl::Time started, LaunchHold hold);
  // Answers each of `live` with the launch's outcome; when a launch of
  // several failed on `launcher`, the worker that started it, retries them
  // one by one there so that one bad product cannot fail the others.
  void FinishLaunch(std::vector<std::unique_ptr<PendingProduct>>& live,
                    absl::Time started, absl::Time launched,
                    std::thread::id launcher, absl::StatusOr<GemmRunInfo> run);
  // Runs a product list (PendingProduct::list) and answers it.
  void RunList(PendingProduct& product, absl::Time started);
  // The backend's failure as answered: "<backend> backend: <message>".
  absl::Status BackendFailure(const absl::Status& status) const;
  // What every answer carries besides C: the request id, where and with
  // which kernel it ran, the launch's size, and its timings.
  void FillAnswer(PendingProduct& product, const std::string& kernel,
                  int batch_size, double queue_seconds, double kernel_seconds,
                  double total_seconds) const;
  // Answers each of `products` UNAVAILABLE and, the first time, reports
  // the lost device.
  void DeviceLost(const std::vector<PendingProduct*>& products,
                  const absl::Status& status);

  GemmBackend& backend_;
  ServerMetrics& metrics_;
  const int device_index_;
  // The metrics' `device` label.
  const std::string device_label_;
  const DeviceLostCallback on_device_lost_;
  std::atomic<bool> device_lost_{false};
  absl::Mutex mu_;
  // Launches started and not yet answered, and StartLaunch calls under
  // way.
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_MATMUL_RUNNER_H_
