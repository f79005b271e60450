#include "common/request_ring_layout.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace matmul::ring {

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               absl::Duration timeout) {
  const timespec relative = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected,
          &relative, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

bool FutexWaitAny(std::span<const FutexWaitTarget> targets,
                  absl::Duration timeout) {
#ifdef SYS_futex_waitv
  if (targets.size() > kMaxFutexWaitTargets) return false;
  std::vector<futex_waitv> waiters(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    waiters[i] = {};
    waiters[i].val = targets[i].expected;
    waiters[i].uaddr = reinterpret_cast<uintptr_t>(targets[i].word);
    waiters[i].flags = FUTEX_32;  // shared, like FutexWait
  }
  // futex_waitv takes an absolute deadline on the clock it is given.
  timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const absl::Duration at = absl::DurationFromTimespec(deadline) + timeout;
  deadline = absl::ToTimespec(at);
  if (syscall(SYS_futex_waitv, waiters.data(), waiters.size(), 0, &deadline,
              CLOCK_MONOTONIC) == -1 &&
      errno == ENOSYS) {
    return false;
  }
  return true;
#else
  (void)targets;
  (void)timeout;
  return false;
#endif
}

}  // namespace matmul::ring
