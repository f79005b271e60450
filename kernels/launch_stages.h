// Where a launch's time on the thread that starts it goes, step by step
// (the CUDA backend's StartBatch times its steps; the daemon exports them
// as matmul_launch_stage_seconds): a worker held for long per launch shows
// which step holds it.
//
//   LaunchStageClock clock;
//   ...acquire a stream slot...
//   clock.Lap("slot");
//   ...queue the kernel...
//   clock.Lap("kernel");
//   info.launch_stages = std::move(clock).Take();
#ifndef MATMUL_KERNELS_LAUNCH_STAGES_H_
#define MATMUL_KERNELS_LAUNCH_STAGES_H_

#include <chrono>
#include <utility>
#include <vector>

namespace matmul {

struct LaunchStage {
  // A string literal: stage names are a fixed set, and label the metric.
  const char* name;
  double seconds;
};

class LaunchStageClock {
 public:
  LaunchStageClock() : last_(std::chrono::steady_clock::now()) {
    stages_.reserve(kTypicalStages);  // one allocation per launch
  }

  // Ends the step that began at the previous lap (or at construction).
  void Lap(const char* name) {
    const auto now = std::chrono::steady_clock::now();
    stages_.push_back(
        {name, std::chrono::duration<double>(now - last_).count()});
    last_ = now;
  }

  std::vector<LaunchStage> Take() && { return std::move(stages_); }

 private:
  static constexpr int kTypicalStages = 12;
  std::chrono::steady_clock::time_point last_;
  std::vector<LaunchStage> stages_;
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_LAUNCH_STAGES_H_
