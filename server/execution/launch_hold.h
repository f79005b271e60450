// A launch's place among its batch key's launches in flight
// (BatcherOptions::launches_in_flight_per_key): taken when the batcher
// hands the batch out, given back when the launch is complete, so that the
// key's next requests wait in the queue, and go out together, meanwhile.
// Move-only; an empty hold (a key without a limit) gives back nothing.
#ifndef MATMUL_SERVER_EXECUTION_LAUNCH_HOLD_H_
#define MATMUL_SERVER_EXECUTION_LAUNCH_HOLD_H_

#include <utility>

#include "absl/functional/any_invocable.h"

namespace matmul {

class LaunchHold {
 public:
  LaunchHold() = default;
  explicit LaunchHold(absl::AnyInvocable<void() &&> give_back)
      : give_back_(std::move(give_back)) {}
  LaunchHold(LaunchHold&& other) noexcept
      : give_back_(std::exchange(other.give_back_, nullptr)) {}
  LaunchHold& operator=(LaunchHold&& other) noexcept {
    if (this != &other) {
      Release();
      give_back_ = std::exchange(other.give_back_, nullptr);
    }
    return *this;
  }
  LaunchHold(const LaunchHold&) = delete;
  LaunchHold& operator=(const LaunchHold&) = delete;
  ~LaunchHold() { Release(); }

  // Gives the place back now (the launch is complete); idempotent.
  void Release() {
    if (give_back_) std::exchange(give_back_, nullptr)();
  }

 private:
  absl::AnyInvocable<void() &&> give_back_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_LAUNCH_HOLD_H_
