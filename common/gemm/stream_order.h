// A product ordered on a CUDA stream of the client's (MatmulRequest's
// stream_order): the backend waits until the client's stream has written
// wait_value into the wait word (on its CPU, or with a wait queued on its
// own stream before the product), and its stream writes signal_value into
// the signal word once the product is complete. Both words are host
// memory that the daemon maps and its device reaches too.
#ifndef MATMUL_COMMON_GEMM_STREAM_ORDER_H_
#define MATMUL_COMMON_GEMM_STREAM_ORDER_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/gemm/launch_order.h"

namespace matmul {

struct StreamOrder {
  // The wait word as this process's CPU and its device see it.
  std::atomic<uint32_t>* wait_host = nullptr;
  void* wait_device = nullptr;
  uint32_t wait_value = 0;
  // The signal word as the device and this process's CPU see it; null:
  // no signal.
  void* signal_device = nullptr;
  std::atomic<uint32_t>* signal_host = nullptr;
  uint32_t signal_value = 0;
  // Asked, now and then, while the product waits for the client's stream:
  // a non-OK status ends the wait and becomes the product's (which then
  // does not run, or, when its wait was queued on the GPU, runs on
  // whatever the operands hold).
  std::function<absl::Status()> give_up;
  // The product's place among its client's stream-ordered products: it may
  // wait on the GPU once every earlier one is launched (launch_order.h).
  LaunchOrder::Ticket launch;
};

// True once `word` holds `value` or a later one (values wrap).
inline bool WordReached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_STREAM_ORDER_H_
