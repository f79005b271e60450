#include "client/call_tickets.h"

#include <algorithm>
#include <utility>

namespace matmul {

uint64_t CallTickets::Issue() {
  absl::MutexLock lock(&mu_);
  answered_.push_back(false);
  return answered_through_.load(std::memory_order_relaxed) + answered_.size() -
         1;
}

void CallTickets::Answer(uint64_t ticket, absl::Status status, uint64_t tag) {
  absl::MutexLock lock(&mu_);
  uint64_t first = answered_through_.load(std::memory_order_relaxed);
  if (ticket < first || ticket - first >= answered_.size()) return;
  bool& answered = answered_[ticket - first];
  if (answered) return;
  answered = true;
  if (!status.ok()) {
    failures_.push_back(Failure{ticket, tag, std::move(status)});
    failures_waiting_.store(failures_.size(), std::memory_order_release);
  }
  // The window starts at the first ticket still unanswered.
  while (!answered_.empty() && answered_.front()) {
    answered_.pop_front();
    ++first;
  }
  answered_through_.store(first, std::memory_order_release);
}

std::vector<CallTickets::Failure> CallTickets::TakeFailures() {
  std::vector<Failure> failures;
  {
    absl::MutexLock lock(&mu_);
    failures.swap(failures_);
    failures_waiting_.store(0, std::memory_order_release);
  }
  // Recorded in the order the answers came.
  std::sort(
      failures.begin(), failures.end(),
      [](const Failure& a, const Failure& b) { return a.ticket < b.ticket; });
  return failures;
}

bool CallTickets::WaitForAnswers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const uint64_t end =
      answered_through_.load(std::memory_order_relaxed) + answered_.size();
  auto all_answered = [this, end]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return answered_through_.load(std::memory_order_relaxed) >= end;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&all_answered), timeout);
}

}  // namespace matmul
