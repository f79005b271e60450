#include "client/stream_order/stream_order_numbers.h"

namespace matmul {

StreamOrderNumbers& StreamOrderNumbers::OfThisProcess() {
  static StreamOrderNumbers numbers;
  return numbers;
}

absl::StatusOr<StreamOrderNumbers::Number> StreamOrderNumbers::Take(
    const std::function<absl::Status()>& queue) {
  absl::MutexLock lock(&mu_);
  if (absl::Status queued = queue(); !queued.ok()) return queued;
  Number taken;
  taken.number = next_++;
  taken.answered_below =
      unanswered_.empty() ? taken.number : *unanswered_.begin();
  unanswered_.insert(taken.number);
  return taken;
}

void StreamOrderNumbers::Answered(uint64_t number) {
  absl::MutexLock lock(&mu_);
  unanswered_.erase(number);
}

}  // namespace matmul
