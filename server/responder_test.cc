#include "server/responder.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

TEST(ResponderTest, RunsEveryTaskOffTheCallersThreadAndDrains) {
  Responder responder(3);
  EXPECT_EQ(responder.threads(), 3);
  std::atomic<int> ran{0};
  std::atomic<int> on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i) {
    responder.Post([&] {
      if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
      ran.fetch_add(1);
    });
  }
  responder.Drain();
  EXPECT_EQ(ran.load(), 100);
  EXPECT_EQ(on_caller.load(), 0);
  // After Drain a task still runs, on the caller's thread.
  bool inline_ran = false;
  responder.Post([&] { inline_ran = true; });
  EXPECT_TRUE(inline_ran);
}

TEST(ResponderTest, TasksRunConcurrently) {
  Responder responder(2);
  absl::Notification first_running, release;
  responder.Post([&] {
    first_running.Notify();
    release.WaitForNotification();
  });
  first_running.WaitForNotification();
  absl::Notification second_ran;
  responder.Post([&] { second_ran.Notify(); });
  // The first task blocks one thread; the other runs the second.
  EXPECT_TRUE(second_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  release.Notify();
}

}  // namespace
}  // namespace matmul
