#include "common/request_ring_layout.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

}  // namespace matmul::ring
