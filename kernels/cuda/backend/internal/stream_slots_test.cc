// StreamSlotPool::HoldAll (the background tuner's guard) against a caller
// that a held slot waits for: it must not keep the free slots from that
// caller while it waits for the held one. Needs a GPU (the slots' streams).
#include "kernels/cuda/backend/internal/stream_slots.h"

#include <memory>
#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/cuda/testing/gpu_test_util.h"

namespace matmul::cuda {
namespace {

TEST(StreamSlotPoolTest, HoldAllStepsAsideForTheCallerAHeldSlotWaitsFor) {
  MATMUL_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<StreamSlotPool>> pool =
      StreamSlotPool::Create(/*device=*/0, /*count=*/3, /*workspace_bytes=*/0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // A product whose wait on the GPU ends only after another caller's
  // product has run holds this slot.
  absl::StatusOr<StreamSlotLease> first = (*pool)->Acquire();
  ASSERT_TRUE(first.ok()) << first.status();
  std::optional<StreamSlotLease> waiting(*std::move(first));

  std::shared_ptr<void> all;
  std::thread tuner([&] { all = (*pool)->HoldAll(); });
  absl::SleepFor(absl::Milliseconds(10));  // it takes the two free slots
  absl::Notification served;
  std::thread other([&] {
    absl::StatusOr<StreamSlotLease> lease = (*pool)->Acquire();
    EXPECT_TRUE(lease.ok()) << lease.status();
    served.Notify();
  });
  EXPECT_TRUE(served.WaitForNotificationWithTimeout(absl::Seconds(20)))
      << "HoldAll kept the free slots while it waited for the held one";

  waiting.reset();  // that product ends: the tuner gets every slot
  tuner.join();
  EXPECT_NE(all, nullptr);
  all.reset();
  other.join();
}

}  // namespace
}  // namespace matmul::cuda
