#include "kernels/cuda/selector/internal/background_tuner.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::cuda {

BackgroundTuner::BackgroundTuner(int device, int max_queued, TuneFn tune)
    : device_(device), max_queued_(max_queued), tune_(std::move(tune)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

BackgroundTuner::~BackgroundTuner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
  }
  worker_.join();
}

bool BackgroundTuner::Enqueue(const std::string& key,
                              const GemmProblem& canonical) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  if (queued_keys_.contains(key)) return true;
  if (queue_.size() >= max_queued_) return false;
  queued_keys_.insert(key);
  queue_.emplace_back(key, canonical);
  return true;
}

void BackgroundTuner::WaitUntilIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &BackgroundTuner::Idle));
}

void BackgroundTuner::SetGuard(GuardFn guard) {
  absl::MutexLock lock(&mu_);
  guard_ = std::move(guard);
}

BackgroundTuner::Counts BackgroundTuner::counts() const {
  absl::MutexLock lock(&mu_);
  return {succeeded_, failed_};
}

void BackgroundTuner::WorkerLoop() {
  if (!CudaStatus(cudaSetDevice(device_), "cudaSetDevice").ok()) {
    absl::MutexLock lock(&mu_);
    worker_exited_ = true;
    return;
  }
  while (true) {
    std::string key;
    GemmProblem problem;
    GuardFn guard;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BackgroundTuner::HasWork));
      if (stopping_) break;
      key = std::move(queue_.front().first);
      problem = queue_.front().second;
      queue_.pop_front();
      busy_ = true;
      guard = guard_;
    }
    absl::Status tuned;
    {
      std::shared_ptr<void> held = guard ? guard() : nullptr;
      tuned = tune_(problem);
    }
    if (!tuned.ok()) {
      std::fprintf(stderr, "GemmSelector: background tuning of %s failed: %s\n",
                   key.c_str(), tuned.ToString().c_str());
    }
    absl::MutexLock lock(&mu_);
    (tuned.ok() ? succeeded_ : failed_) += 1;
    busy_ = false;
    queued_keys_.erase(key);
  }
  absl::MutexLock lock(&mu_);
  busy_ = false;
  worker_exited_ = true;
}

}  // namespace matmul::cuda
