#include "common/gemm/launch_order.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace matmul {

LaunchOrder::Ticket& LaunchOrder::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    MarkLaunched();
    state_ = std::move(other.state_);
    number_ = other.number_;
    answered_below_ = other.answered_below_;
  }
  return *this;
}

bool LaunchOrder::Ticket::EarlierLaunched() const {
  if (state_ == nullptr) return false;
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&state_->mu);
  State& s = *state_;
  bool all = true;
  // Every number in the span, so that the missing ones start their lapse
  // together.
  for (uint64_t k = std::max(answered_below_, s.answered_below); k < number_;
       ++k) {
    if (s.launched.contains(k)) continue;
    if (s.waiting.contains(k)) {
      all = false;
      continue;
    }
    auto missing = s.missing_since.try_emplace(k, now).first;
    if (now - missing->second < s.lapse) {
      all = false;
      continue;
    }
    s.missing_since.erase(missing);
    s.lapsed.insert(k);
    s.launched.insert(k);
  }
  return all;
}

void LaunchOrder::Ticket::MarkLaunched() const {
  if (state_ == nullptr) return;
  absl::MutexLock lock(&state_->mu);
  State& s = *state_;
  if (s.waiting.erase(number_) == 0) return;  // marked before
  if (number_ >= s.answered_below) s.launched.insert(number_);
}

absl::StatusOr<LaunchOrder::Ticket> LaunchOrder::Take(uint64_t number,
                                                      uint64_t answered_below) {
  if (number == 0) return Ticket();
  if (answered_below > number || number - answered_below > kMaxSpan) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream_order: number ", number, " with answered_below ",
                     answered_below,
                     "; expected answered_below <= number <= "
                     "answered_below + ",
                     kMaxSpan));
  }
  absl::MutexLock lock(&state_->mu);
  State& s = *state_;
  if (s.lapsed.contains(number)) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream-ordered product number ", number,
                     " of this process arrived after later ones had waited ",
                     absl::FormatDuration(s.lapse),
                     " for it (--stream_order_lapse); it was not run"));
  }
  // The client has had its answer (it gave up waiting): it holds nothing
  // up, and waits on the CPU.
  if (number < s.answered_below) return Ticket();
  if (s.waiting.contains(number) || s.launched.contains(number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream_order: number ", number,
        " of this process arrived twice; expected each product numbered "
        "once"));
  }
  if (answered_below > s.answered_below) {
    s.answered_below = answered_below;
    s.launched.erase(s.launched.begin(),
                     s.launched.lower_bound(answered_below));
    s.lapsed.erase(s.lapsed.begin(), s.lapsed.lower_bound(answered_below));
    s.missing_since.erase(s.missing_since.begin(),
                          s.missing_since.lower_bound(answered_below));
  }
  s.waiting.insert(number);
  return Ticket(state_, number, answered_below);
}

}  // namespace matmul
