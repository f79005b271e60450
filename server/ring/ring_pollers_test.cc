// RingPollers against rings laid out by hand: one thread serving many rings
// through the sleeping protocol, rings spread over the threads, and taking
// a ring off while, or from inside, its handler runs.
#include "server/ring/ring_pollers.h"

#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/ring/testing/hand_made_ring.h"

namespace matmul {
namespace {

std::shared_ptr<AttachedRing> Attach(const HandMadeRing& made) {
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  EXPECT_TRUE(ring.ok()) << ring.status();
  return ring.ok() ? std::shared_ptr<AttachedRing>(*std::move(ring)) : nullptr;
}

// Answers each request with its own id, on the poller's thread.
RingPollers::Handlers Echo(AttachedRing* ring) {
  return {.dispatch =
              [ring](uint32_t slot) {
                v1::MatmulRequest request;
                absl::Duration timeout;
                EXPECT_TRUE(ring->ReadRequest(slot, &request, &timeout).ok());
                v1::MatmulResponse response;
                response.set_request_id(request.request_id());
                ring->Complete(slot, response);
              },
          .faulted = [] { ADD_FAILURE() << "no ring faults here"; }};
}

TEST(FutexWaitAnyTest, AnyOfTheWordsEndsTheWait) {
  std::atomic<uint32_t> words[3] = {0, 0, 0};
  const ring::FutexWaitTarget targets[] = {
      {&words[0], 0}, {&words[1], 0}, {&words[2], 0}};
  std::thread waker([&] {
    absl::SleepFor(absl::Milliseconds(20));
    words[2].store(1);
    ring::FutexWakeAll(words[2]);
  });
  // Spurious returns are allowed: wait until the word changed.
  const absl::Time start = absl::Now();
  while (words[2].load() == 0) {
    ASSERT_TRUE(ring::FutexWaitAny(targets, kLostWakeup))
        << "this kernel lacks futex_waitv (Linux 5.16)";
  }
  EXPECT_LT(absl::Now() - start, kLostWakeup);
  waker.join();
  // A word that differs already returns at once.
  const ring::FutexWaitTarget stale[] = {{&words[0], 0}, {&words[2], 0}};
  EXPECT_TRUE(ring::FutexWaitAny(stale, kLostWakeup));
}

// Every request of every ring is answered, each client sleeping on its
// answer and the poller (no spin) sleeping on all doorbells between them.
TEST(RingPollersTest, OneThreadServesManyRingsThroughTheirDoorbells) {
  constexpr int kRings = 6;
  constexpr int kRounds = 300;
  RingPollers pollers(1, absl::ZeroDuration());
  std::vector<std::unique_ptr<HandMadeRing>> made;
  std::vector<std::shared_ptr<AttachedRing>> rings;
  std::vector<std::unique_ptr<RingPollers::Polled>> polled;
  for (int i = 0; i < kRings; ++i) {
    made.push_back(std::make_unique<HandMadeRing>());
    rings.push_back(Attach(*made.back()));
    ASSERT_NE(rings.back(), nullptr);
    polled.push_back(pollers.Add(rings.back(), Echo(rings.back().get())));
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kRings; ++i) {
    clients.emplace_back([&, i] {
      HandMadeClient client(made[i]->base());
      for (int round = 0; round < kRounds; ++round) {
        const uint64_t id = uint64_t{1000} * i + round;
        const uint32_t slot = round % kSlots;
        client.Submit(slot, id, /*notify=*/false);
        if (client.WaitForAnswer(slot) != id) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(RingPollersTest, RingsSpreadOverTheThreadsAndStayOnOne) {
  constexpr int kRings = 4;
  RingPollers pollers(2, absl::ZeroDuration());
  std::vector<std::unique_ptr<HandMadeRing>> made;
  std::vector<std::shared_ptr<AttachedRing>> rings;
  std::vector<std::unique_ptr<RingPollers::Polled>> polled;
  absl::Mutex mu;
  std::vector<std::set<std::thread::id>> threads(kRings);
  for (int i = 0; i < kRings; ++i) {
    made.push_back(std::make_unique<HandMadeRing>());
    rings.push_back(Attach(*made.back()));
    ASSERT_NE(rings.back(), nullptr);
    RingPollers::Handlers echo = Echo(rings.back().get());
    polled.push_back(pollers.Add(
        rings.back(), {.dispatch =
                           [&, i, echo](uint32_t slot) {
                             {
                               absl::MutexLock lock(&mu);
                               threads[i].insert(std::this_thread::get_id());
                             }
                             echo.dispatch(slot);
                           },
                       .faulted = echo.faulted}));
  }
  for (int i = 0; i < kRings; ++i) {
    HandMadeClient client(made[i]->base());
    for (int round = 0; round < 20; ++round) {
      client.Submit(round % kSlots, round, /*notify=*/false);
      EXPECT_EQ(client.WaitForAnswer(round % kSlots), uint64_t(round));
    }
  }
  std::set<std::thread::id> all;
  for (int i = 0; i < kRings; ++i) {
    EXPECT_EQ(threads[i].size(), 1u) << "ring " << i;
    all.insert(threads[i].begin(), threads[i].end());
  }
  EXPECT_EQ(all.size(), 2u);
}

TEST(RingPollersTest, TakingARingOffWaitsForItsRunningHandler) {
  RingPollers pollers(1, absl::Milliseconds(1));
  HandMadeRing made;
  std::shared_ptr<AttachedRing> ring = Attach(made);
  ASSERT_NE(ring, nullptr);
  absl::Notification entered, release;
  std::atomic<int> dispatched{0};
  std::unique_ptr<RingPollers::Polled> polled =
      pollers.Add(ring, {.dispatch =
                             [&](uint32_t) {
                               dispatched.fetch_add(1);
                               entered.Notify();
                               release.WaitForNotification();
                             },
                         .faulted = [] {}});
  HandMadeClient client(made.base());
  client.Submit(0, 1, /*notify=*/false);
  entered.WaitForNotification();
  std::atomic<bool> off{false};
  std::thread remover([&] {
    polled.reset();
    off.store(true);
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(off.load()) << "taken off while its handler still ran";
  release.Notify();
  remover.join();
  EXPECT_TRUE(off.load());
  // Off the poller: a new submission is not taken.
  client.Submit(1, 2, /*notify=*/false);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(dispatched.load(), 1);
}

TEST(RingPollersTest, AHandlerMayTakeItsOwnRingOff) {
  RingPollers pollers(1, absl::ZeroDuration());
  HandMadeRing made, other_made;
  std::shared_ptr<AttachedRing> ring = Attach(made);
  std::shared_ptr<AttachedRing> other = Attach(other_made);
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(other, nullptr);
  std::atomic<int> dispatched{0};
  // Handed over under a lock: TSan cannot see the ring's own ordering,
  // which goes through two mappings of one object.
  absl::Mutex mu;
  std::unique_ptr<RingPollers::Polled> polled;
  auto polled_now =
      pollers.Add(ring, {.dispatch =
                             [&](uint32_t) {
                               dispatched.fetch_add(1);
                               std::unique_ptr<RingPollers::Polled> mine;
                               {
                                 absl::MutexLock lock(&mu);
                                 mine = std::move(polled);
                               }
                               mine.reset();  // as a reactor's OnDone would
                             },
                         .faulted = [] {}});
  {
    absl::MutexLock lock(&mu);
    polled = std::move(polled_now);
  }
  std::unique_ptr<RingPollers::Polled> other_polled =
      pollers.Add(other, Echo(other.get()));
  HandMadeClient client(made.base());
  client.Submit(0, 1, /*notify=*/false);
  // The poller goes on serving its other ring.
  HandMadeClient other_client(other_made.base());
  other_client.Submit(0, 7, /*notify=*/false);
  EXPECT_EQ(other_client.WaitForAnswer(0), 7u);
  EXPECT_EQ(dispatched.load(), 1);
  client.Submit(1, 2, /*notify=*/false);
  other_client.Submit(1, 8, /*notify=*/false);
  EXPECT_EQ(other_client.WaitForAnswer(1), 8u);
  EXPECT_EQ(dispatched.load(), 1);
}

TEST(RingPollersTest, AFaultedRingIsReportedOnceAndNotPolledAgain) {
  RingPollers pollers(1, absl::ZeroDuration());
  HandMadeRing made;
  std::shared_ptr<AttachedRing> ring = Attach(made);
  ASSERT_NE(ring, nullptr);
  std::atomic<int> faults{0};
  absl::Notification faulted;
  std::unique_ptr<RingPollers::Polled> polled = pollers.Add(
      ring, {.dispatch = [](uint32_t) { ADD_FAILURE() << "nothing to take"; },
             .faulted =
                 [&] {
                   faults.fetch_add(1);
                   faulted.Notify();
                 }});
  made.Truncate();
  // The poller finds the fault within one of its bounded sleeps.
  ASSERT_TRUE(faulted.WaitForNotificationWithTimeout(kLostWakeup));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(faults.load(), 1);
}

}  // namespace
}  // namespace matmul
