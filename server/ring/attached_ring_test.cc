// AttachedRing against rings laid out by hand: what it refuses to attach,
// what it does with a client that writes nonsense into its ring, and many
// client and daemon threads going through the ring's protocol at once.
#include "server/ring/attached_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ring/testing/hand_made_ring.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

TEST(AttachedRingTest, RefusesBadGeometryNamesAndHeaders) {
  HandMadeRing made;
  auto expect_refused = [&](v1::AttachRingRequest request,
                            absl::StatusCode code, const std::string& text) {
    auto ring = AttachedRing::Open(request, "matmul", ThisProcess());
    ASSERT_FALSE(ring.ok()) << request.ShortDebugString();
    EXPECT_EQ(ring.status().code(), code) << ring.status();
    EXPECT_THAT(std::string(ring.status().message()), HasSubstr(text));
  };
  v1::AttachRingRequest request = made.Request();
  request.set_slot_count(0);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_count");
  request.set_slot_count(ring::kMaxSlots + 1);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_count");
  request = made.Request();
  request.set_slot_bytes(1000);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_bytes");
  request.set_slot_bytes(256);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_bytes");
  request = made.Request();
  request.set_shm_name("../etc/passwd");
  expect_refused(request, absl::StatusCode::kInvalidArgument, "ring");
  request.set_shm_name("matmul-no-such-ring");
  expect_refused(request, absl::StatusCode::kNotFound, "ring");
  request = made.Request();
  request.set_slot_count(kSlots * 2);  // larger than the object
  expect_refused(request, absl::StatusCode::kInvalidArgument, "ring");
  request = made.Request();
  request.set_slot_count(kSlots / 2);  // fits, but the header says 4
  expect_refused(request, absl::StatusCode::kInvalidArgument, "header");
  made.header()->magic = 0;
  expect_refused(made.Request(), absl::StatusCode::kInvalidArgument, "magic");
}

TEST(AttachedRingTest, SkipsBadEntriesAndReportsBadPayloads) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_FALSE((*ring)->Take().has_value());

  made.Submit(kSlots + 7);  // out of range: skipped
  made.Submit(1);           // not in kSubmitted: skipped
  ring::SlotHeader* garbage = made.Slot(2);
  std::memset(ring::Payload(garbage), 0xff, 40);
  garbage->request_bytes = 40;
  garbage->state.store(ring::kSubmitted);
  made.Submit(2);
  ring::SlotHeader* too_long = made.Slot(3);
  too_long->request_bytes = kSlotBytes;  // more than the payload holds
  too_long->state.store(ring::kSubmitted);
  made.Submit(3);

  std::optional<uint32_t> taken = (*ring)->Take();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, 2u);
  v1::MatmulRequest request;
  absl::Duration timeout;
  absl::Status read = (*ring)->ReadRequest(2, &request, &timeout);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.message()), HasSubstr("MatmulRequest"));

  taken = (*ring)->Take();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, 3u);
  read = (*ring)->ReadRequest(3, &request, &timeout);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.message()), HasSubstr("request_bytes"));
  EXPECT_FALSE((*ring)->Take().has_value());
}

TEST(AttachedRingTest, ASlotRunsOnceUntilCompleted) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  made.Slot(1)->state.store(ring::kSubmitted);
  made.Submit(1);
  made.Submit(1);  // published twice
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(1));
  EXPECT_FALSE((*ring)->Take().has_value());
  (*ring)->Complete(1, v1::MatmulResponse());
  made.Slot(1)->state.store(ring::kSubmitted);  // the client reuses it
  made.Submit(1);
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(1));

  // A queue full of bad entries: all skipped, then the ring goes on.
  for (uint32_t i = 0; i < kSlots; ++i) made.Submit(kSlots + 1);
  EXPECT_FALSE((*ring)->Take().has_value());
  made.Slot(3)->state.store(ring::kSubmitted);
  made.Submit(3);
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(3));
}

// A client that publishes a slot twice while its answer is being written
// (the soak's ring_chaos found it): the second publication must not take
// the slot again, which would parse the answer as a request and overwrite
// the good answer with INVALID_ARGUMENT. Each round publishes the slot a
// second time and takes, over and over, while another thread answers it.
TEST(AttachedRingTest, ASecondPublicationDuringTheAnswerIsNotTaken) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  const absl::Time end = absl::Now() + absl::Milliseconds(500);
  int rounds = 0, taken_again = 0;
  for (; absl::Now() < end || rounds < 1000; ++rounds) {
    made.Slot(1)->state.store(ring::kSubmitted);
    made.Submit(1);
    ASSERT_EQ((*ring)->Take(), std::optional<uint32_t>(1)) << rounds;
    std::atomic<bool> answered{false};
    std::thread answer([&] {
      (*ring)->Complete(1, v1::MatmulResponse());
      answered.store(true);
    });
    while (!answered.load()) {
      made.Submit(1);
      if ((*ring)->Take().has_value()) ++taken_again;
    }
    answer.join();
    made.Submit(1);
    if ((*ring)->Take().has_value()) ++taken_again;
    ASSERT_EQ(made.Slot(1)->state.load(), ring::kDone);
  }
  EXPECT_EQ(taken_again, 0) << "in " << rounds << " rounds";
}

TEST(AttachedRingTest, CompleteWritesTheResponseOrSaysItDoesNotFit) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  v1::MatmulResponse response;
  response.set_request_id(42);
  response.set_kernel("cublaslt");
  (*ring)->Complete(0, response);
  ring::SlotHeader* slot = made.Slot(0);
  EXPECT_EQ(slot->state.load(), ring::kDone);
  v1::MatmulResponse read;
  ASSERT_TRUE(read.ParseFromArray(ring::Payload(slot),
                                  static_cast<int>(slot->response_bytes)));
  EXPECT_EQ(read.request_id(), 42u);
  EXPECT_EQ(read.kernel(), "cublaslt");

  // A `notify` slot is announced in the completion queue.
  EXPECT_EQ(made.header()->complete_tail.load(), 0u);
  made.Slot(2)->notify = 1;
  (*ring)->Complete(2, response);
  EXPECT_EQ(made.header()->complete_tail.load(), 1u);
  EXPECT_EQ(made.header()->answers.load(), 1u);
  EXPECT_EQ(made.CompleteEntry(0).slot, 2u);
  EXPECT_EQ(made.CompleteEntry(0).sequence.load(), 1u);

  response.set_status_message(std::string(kSlotBytes, 'x'));
  (*ring)->Complete(1, response);
  slot = made.Slot(1);
  ASSERT_TRUE(read.ParseFromArray(ring::Payload(slot),
                                  static_cast<int>(slot->response_bytes)));
  EXPECT_EQ(read.request_id(), 42u);
  EXPECT_EQ(read.status_code(),
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(read.status_message(), HasSubstr("does not fit"));
}

TEST(AttachedRingTest, ATruncatedRingFaultsInsteadOfKillingTheDaemon) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  made.Slot(1)->state.store(ring::kSubmitted);
  made.Submit(1);
  EXPECT_FALSE((*ring)->faulted());
  made.Truncate();
  // Every access the poller and the completions make survives; the ring
  // reads as empty and says why it is dead.
  EXPECT_FALSE((*ring)->Take().has_value());
  EXPECT_TRUE((*ring)->faulted());
  (*ring)->WaitForDoorbell(absl::Milliseconds(1));
  v1::MatmulResponse response;
  response.set_request_id(5);
  (*ring)->Complete(1, response);
  const absl::Status status = (*ring)->FaultedStatus();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("truncated or otherwise changed while attached"));
  // A truncated object is refused up front.
  auto again = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument)
      << again.status();
}

TEST(AttachedRingTest, ARingOfAnotherUserIsRefused) {
  HandMadeRing made;
  PeerCredentials stranger = ThisProcess();
  stranger.uid = getuid() == 65534 ? 65533 : 65534;
  auto ring = AttachedRing::Open(made.Request(), "matmul", stranger);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kPermissionDenied)
      << ring.status();
  EXPECT_THAT(std::string(ring.status().message()),
              HasSubstr(absl::StrCat("belongs to uid ", getuid())));
  EXPECT_TRUE(AttachedRing::Open(made.Request(), "matmul", stranger,
                                 /*allow_other_shm_owners=*/true)
                  .ok());
}

// The address of this process's other mapping of /dev/shm/`name` (not
// `own`): AttachedRing's. Null when there is none.
void* OtherMapping(const std::string& name, const void* own) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (!absl::EndsWith(line, " /dev/shm/" + name)) continue;
    const uintptr_t start =
        std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    if (start != reinterpret_cast<uintptr_t>(own)) {
      return reinterpret_cast<void*>(start);
    }
  }
  return nullptr;
}

// Client threads (sleeping on their slots, and one on the completion
// queue) against a poller and workers that answer out of order, with no
// spinning anywhere: every request and answer crosses the ring's ordering
// and sleeping protocol. Every request must be answered once, with its own
// answer, and no wait may sleep out its timeout (a lost wake-up). The
// client side uses AttachedRing's own mapping, so that ThreadSanitizer sees
// both sides' accesses at one address. An x86 CPU cannot show most of the
// reorderings a weaker order would allow on arm64: this guards the protocol
// and gives TSan its view, it does not prove the ordering.
TEST(AttachedRingTest, ManyThreadsOnBothSidesLoseNothing) {
  HandMadeRing made;
  auto opened = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(opened.ok()) << opened.status();
  AttachedRing& ring = **opened;
  void* const shared = OtherMapping(made.name(), made.base());
  ASSERT_NE(shared, nullptr);
  constexpr int kRounds = 1000;
  constexpr uint32_t kSyncSlots = 2;  // one thread each; the rest: async
  constexpr uint64_t kStop = ~uint64_t{0};

  // The daemon: a poller hands requests to two workers, which answer.
  absl::Mutex mu;
  std::deque<std::pair<uint32_t, uint64_t>> work;  // guarded by mu
  bool stopping = false;                           // guarded by mu
  std::thread poller([&] {
    while (true) {
      std::optional<uint32_t> slot = ring.Take();
      if (!slot.has_value()) {
        ring.WaitForDoorbell(kLostWakeup);
        continue;
      }
      v1::MatmulRequest request;
      absl::Duration timeout;
      EXPECT_TRUE(ring.ReadRequest(*slot, &request, &timeout).ok());
      absl::MutexLock lock(&mu);
      if (request.request_id() == kStop) {
        stopping = true;
        return;
      }
      work.emplace_back(*slot, request.request_id());
    }
  });
  auto has_work_or_stops = [&] { return !work.empty() || stopping; };
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&] {
      while (true) {
        std::pair<uint32_t, uint64_t> next;
        {
          absl::MutexLock lock(&mu);
          mu.Await(absl::Condition(&has_work_or_stops));
          if (work.empty()) return;
          next = work.front();
          work.pop_front();
        }
        v1::MatmulResponse response;
        response.set_request_id(next.second);
        ring.Complete(next.first, response);
      }
    });
  }

  // The clients: sleepers on their own slots, and a completion thread that
  // keeps the other slots in flight.
  HandMadeClient client(shared);
  std::atomic<int64_t> longest_wait_ns{0};
  auto note_wait = [&](absl::Time since) {
    const int64_t ns = absl::ToInt64Nanoseconds(absl::Now() - since);
    int64_t seen = longest_wait_ns.load();
    while (ns > seen && !longest_wait_ns.compare_exchange_weak(seen, ns)) {
    }
  };
  auto id = [](uint32_t slot, int round) {
    return uint64_t{slot} << 32 | static_cast<uint64_t>(round);
  };
  std::vector<std::thread> clients;
  for (uint32_t slot = 0; slot < kSyncSlots; ++slot) {
    clients.emplace_back([&, slot] {
      HandMadeClient own(shared);
      for (int round = 0; round < kRounds; ++round) {
        const absl::Time sent = absl::Now();
        own.Submit(slot, id(slot, round), /*notify=*/false);
        EXPECT_EQ(own.WaitForAnswer(slot), id(slot, round));
        note_wait(sent);
      }
    });
  }
  clients.emplace_back([&] {
    std::vector<int> rounds(kSlots, 0);
    for (uint32_t slot = kSyncSlots; slot < kSlots; ++slot) {
      client.Submit(slot, id(slot, 0), /*notify=*/true);
    }
    int in_flight = kSlots - kSyncSlots;
    absl::Time last = absl::Now();
    while (in_flight > 0) {
      const uint32_t slot = client.NextCompletion();
      note_wait(last);
      last = absl::Now();
      ASSERT_GE(slot, kSyncSlots);
      ASSERT_LT(slot, kSlots);
      EXPECT_EQ(client.Answer(slot), id(slot, rounds[slot]));
      if (++rounds[slot] < kRounds) {
        client.Submit(slot, id(slot, rounds[slot]), /*notify=*/true);
      } else {
        --in_flight;
      }
    }
  });
  for (std::thread& thread : clients) thread.join();
  // Every slot is free again: slot 0 carries the request that stops the
  // daemon's threads.
  client.Submit(0, kStop, /*notify=*/false);
  poller.join();
  for (std::thread& thread : workers) thread.join();
  EXPECT_LT(absl::Nanoseconds(longest_wait_ns.load()), kLostWakeup);
}

}  // namespace
}  // namespace matmul
