// The ring codec on a ring in this process's memory: RingView's steps
// write the layout; ClientProtocol and DaemonProtocol against each other,
// one thread each, through both sleeping protocols.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/ring/client_protocol.h"
#include "common/ring/daemon_protocol.h"
#include "common/ring/ring_view.h"
#include "gtest/gtest.h"

namespace matmul::ring {
namespace {

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 512;
// Longer than any round trip takes on a loaded machine: a round that
// lasts this long lost its wake-up (every sleep here lasts this long).
constexpr absl::Duration kLostWakeup = absl::Seconds(5);

// A ring in a shared anonymous mapping: zeros, like a new shm object.
class ZeroRing {
 public:
  ZeroRing() {
    base_ = mmap(nullptr, RingBytes(kSlots, kSlotBytes), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    view().WriteRingHeader();
  }
  ~ZeroRing() { munmap(base_, RingBytes(kSlots, kSlotBytes)); }

  RingView view() const { return RingView(base_, kSlots, kSlotBytes); }

 private:
  void* base_;
};

TEST(RingViewTest, StepsWriteTheLayout) {
  ZeroRing zero;
  const RingView view = zero.view();
  void* const base = view.base();
  EXPECT_EQ(Header(base)->magic, kMagic);
  EXPECT_EQ(Header(base)->slot_count, kSlots);
  EXPECT_EQ(Header(base)->slot_bytes, kSlotBytes);
  EXPECT_EQ(view.payload_bytes(), kSlotBytes - sizeof(SlotHeader));

  std::memcpy(view.payload(2), "abc", 3);
  view.slot(2)->response_bytes = 99;
  view.WriteRequestFields(2, 3, -5, /*notify=*/true);
  view.PublishState(2, 7);
  SlotHeader* slot = Slot(base, kSlots, kSlotBytes, 2);
  EXPECT_EQ(view.State(2), 7u);
  EXPECT_EQ(slot->request_bytes, 3u);
  EXPECT_EQ(slot->response_bytes, 0u);
  EXPECT_EQ(slot->timeout_ns, -5);
  EXPECT_EQ(slot->notify, 1u);
  EXPECT_EQ(std::string(Payload(slot), 3), "abc");

  EXPECT_EQ(view.ReserveSubmissions(2), 0u);
  EXPECT_EQ(view.ReserveSubmissions(), 2u);
  view.PublishSubmission(5, 3);  // position 5: entry 1, sequence 6
  view.PublishSubmission(2, 9, 77);
  EXPECT_EQ(SubmitQueue(base)[1].sequence.load(), 6u);
  EXPECT_EQ(SubmitQueue(base)[1].slot, 3u);
  EXPECT_TRUE(view.SubmissionPublished(5));
  EXPECT_EQ(view.SubmittedSlot(5), 3u);
  EXPECT_FALSE(view.SubmissionPublished(1));  // the same entry, a lap before
  EXPECT_FALSE(view.SubmissionPublished(2));  // sequence 77
  EXPECT_EQ(Header(base)->doorbell.load(), 0u);
  view.RingDoorbell();
  EXPECT_EQ(Header(base)->doorbell.load(), 1u);

  EXPECT_EQ(view.ReserveCompletion(), 0u);
  view.PublishCompletion(0, 2);
  EXPECT_TRUE(view.CompletionPublished(0));
  EXPECT_FALSE(view.CompletionPublished(4));
  EXPECT_EQ(view.CompletedSlot(0), 2u);
  EXPECT_EQ(CompleteQueue(base, kSlots)[0].sequence.load(), 1u);
  view.AnnounceCompletion();
  EXPECT_EQ(Header(base)->answers.load(), 1u);
}

TEST(RingProtocolTest, TheDaemonTakesEachSubmissionOnceFromTheTailItStartsAt) {
  ZeroRing zero;
  ClientProtocol client(zero.view());
  DaemonProtocol daemon(zero.view());
  client.Submit(0, 0, 0, /*notify=*/false);  // before the daemon came
  daemon.StartAtTail();
  EXPECT_EQ(daemon.NextSubmission(), std::nullopt);

  std::memcpy(client.view().payload(2), "xy", 2);
  client.Submit(2, 2, 1000, /*notify=*/true);
  client.Submit(1, 0, 0, /*notify=*/false);
  EXPECT_EQ(zero.view().State(2), kSubmitted);
  EXPECT_EQ(zero.view().header()->doorbell.load(), 3u);
  EXPECT_EQ(daemon.NextSubmission(), 2u);
  EXPECT_EQ(zero.view().slot(2)->request_bytes, 2u);
  EXPECT_EQ(zero.view().slot(2)->timeout_ns, 1000);
  EXPECT_TRUE(daemon.NotifyWanted(2));
  EXPECT_FALSE(daemon.NotifyWanted(1));
  EXPECT_EQ(daemon.NextSubmission(), 1u);
  EXPECT_EQ(daemon.NextSubmission(), std::nullopt);

  // A hole: the later position published first waits for the earlier one.
  const uint64_t position = zero.view().ReserveSubmissions(2);
  zero.view().PublishSubmission(position + 1, 3);
  EXPECT_EQ(daemon.NextSubmission(), std::nullopt);
  zero.view().PublishSubmission(position, 0);
  EXPECT_EQ(daemon.NextSubmission(), 0u);
  EXPECT_EQ(daemon.NextSubmission(), 3u);
}

TEST(RingProtocolTest, PrepareToSleepTellsTheClientOnlyWhenNothingWaits) {
  ZeroRing zero;
  ClientProtocol client(zero.view());
  DaemonProtocol daemon(zero.view());
  daemon.StartAtTail();
  RingHeader* header = zero.view().header();

  client.Submit(0, 0, 0, /*notify=*/false);
  EXPECT_EQ(daemon.PrepareToSleep(), std::nullopt);
  EXPECT_EQ(header->daemon_sleeping.load(), 0u);
  EXPECT_EQ(daemon.NextSubmission(), 0u);

  std::optional<FutexWaitTarget> doorbell = daemon.PrepareToSleep();
  ASSERT_TRUE(doorbell.has_value());
  EXPECT_EQ(doorbell->word, &header->doorbell);
  EXPECT_EQ(doorbell->expected, 1u);
  EXPECT_EQ(header->daemon_sleeping.load(), 1u);
  // A submission after it changes the word: the sleep returns at once.
  client.Submit(1, 0, 0, /*notify=*/false);
  const absl::Time start = absl::Now();
  FutexWait(*doorbell->word, doorbell->expected, kLostWakeup);
  EXPECT_LT(absl::Now() - start, kLostWakeup);
  daemon.Awake();
  EXPECT_EQ(header->daemon_sleeping.load(), 0u);
  EXPECT_EQ(daemon.NextSubmission(), 1u);
}

TEST(RingProtocolTest, InterruptingTheCompletionSleepEndsIt) {
  ZeroRing zero;
  ClientProtocol client(zero.view());
  std::atomic<bool> stopping{false};
  std::thread sleeper([&] {
    while (!stopping.load())
      client.SleepUntilCompletion(kLostWakeup, &stopping);
  });
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time start = absl::Now();
  stopping.store(true);
  client.InterruptCompletionSleep();
  sleeper.join();
  EXPECT_LT(absl::Now() - start, kLostWakeup);
}

// The daemon: sleeps on the doorbell (no spinning), answers each request
// with its own bytes reversed, `rounds` times.
void Serve(DaemonProtocol& daemon, int rounds) {
  for (int served = 0; served < rounds;) {
    const std::optional<uint32_t> slot = daemon.NextSubmission();
    if (!slot.has_value()) {
      if (std::optional<FutexWaitTarget> doorbell = daemon.PrepareToSleep()) {
        FutexWait(*doorbell->word, doorbell->expected, kLostWakeup);
        daemon.Awake();
      }
      continue;
    }
    const RingView& view = daemon.view();
    const uint32_t bytes = LoadOnce(view.slot(*slot)->request_bytes);
    std::string answer(view.payload(*slot), bytes);
    std::reverse(answer.begin(), answer.end());
    std::memcpy(view.payload(*slot), answer.data(), answer.size());
    daemon.WriteResponseBytes(*slot, bytes);
    const bool notify = daemon.NotifyWanted(*slot);
    daemon.MarkDone(*slot);
    daemon.TellClient(*slot, notify);
    ++served;
  }
}

// Many round trips, every side asleep when the other wakes it: a lost
// wake-up shows as a round trip of kLostWakeup.
void PingPong(bool notify) {
  constexpr int kRounds = 10000;
  ZeroRing zero;
  DaemonProtocol daemon(zero.view());
  daemon.StartAtTail();  // before the first submission
  std::thread server([&] { Serve(daemon, kRounds); });
  ClientProtocol client(zero.view());
  absl::Duration slowest;
  int wrong = 0;  // counted, not asserted: the server must see every round
  for (int round = 0; round < kRounds; ++round) {
    const uint32_t slot = round % kSlots;
    const std::string request = "request " + std::to_string(round);
    std::memcpy(client.view().payload(slot), request.data(), request.size());
    const absl::Time start = absl::Now();
    client.Submit(slot, static_cast<uint32_t>(request.size()), 0, notify);
    if (notify) {
      std::optional<uint32_t> done;
      while (!(done = client.TakeCompletion()).has_value()) {
        client.SleepUntilCompletion(kLostWakeup);
      }
      if (*done != slot) ++wrong;
    } else {
      while (!client.Done(slot)) client.SleepUntilDone(slot, kLostWakeup);
    }
    slowest = std::max(slowest, absl::Now() - start);
    std::string answer(client.view().payload(slot), request.size());
    std::reverse(answer.begin(), answer.end());
    if (!client.Done(slot) || answer != request ||
        client.view().ResponseBytes(slot) != request.size()) {
      ++wrong;
    }
    client.Free(slot);
  }
  server.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_LT(slowest, kLostWakeup) << "a wake-up was lost";
}

TEST(RingProtocolTest, SleepersOnTheSlotAndTheDoorbellLoseNoWakeUp) {
  PingPong(/*notify=*/false);
}

TEST(RingProtocolTest, SleepersOnAnswersAndTheDoorbellLoseNoWakeUp) {
  PingPong(/*notify=*/true);
}

}  // namespace
}  // namespace matmul::ring
