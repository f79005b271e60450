#include "server/responder.h"

#include <algorithm>

namespace matmul {

Responder::Responder(int threads) : threads_(std::max(1, threads)) {
  for (int i = 0; i < threads_; ++i) {
    workers_.emplace_back([this] { Loop(); });
  }
}

void Responder::Post(Task task) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      tasks_.push_back(std::move(task));
      return;
    }
  }
  std::move(task)();
}

void Responder::Drain() {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void Responder::Loop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Responder* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->draining_ || !self->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // draining and done
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace matmul
