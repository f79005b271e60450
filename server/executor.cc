#include "server/executor.h"

#include "absl/strings/str_cat.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const ExecutorOptions& options) {
  if (options.worker_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_threads is ", options.worker_threads, "; expected >= 1"));
  }
  if (options.max_queue_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queue_size is ", options.max_queue_size, "; expected >= 1"));
  }
  return std::unique_ptr<Executor>(new Executor(options));
}

Executor::Executor(const ExecutorOptions& options) : options_(options) {
  for (int i = 0; i < options_.worker_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

Executor::~Executor() { Shutdown(); }

void Executor::Submit(Job job) {
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refusal = absl::UnavailableError("the server is shutting down");
    } else if (static_cast<int>(queue_.size()) >= options_.max_queue_size) {
      refusal = absl::ResourceExhaustedError(
          absl::StrCat("the queue is full (", options_.max_queue_size,
                       " requests waiting); retry later"));
    } else {
      queue_.push_back(std::move(job));
      return;
    }
  }
  std::move(job)(std::move(refusal));
}

int Executor::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int Executor::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

void Executor::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void Executor::WorkerLoop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    std::move(job)(absl::OkStatus());
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace matmul
