// Both sides of a request ring laid out by hand, for the ring's unit
// tests: the shm object with a valid header, and a client that follows the
// ring's protocol (as RequestRing does) on a mapping of it.
#ifndef MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_
#define MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "gtest/gtest.h"
#include "matmul/v1/matmul.pb.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// The caller as the daemon would see this process over a unix socket.
inline PeerCredentials ThisProcess() { return {getpid(), getuid(), getgid()}; }

inline constexpr uint32_t kSlots = 4;
inline constexpr uint32_t kSlotBytes = 1024;

// A ring's shm object, created and mapped here, with a valid header.
class HandMadeRing {
 public:
  HandMadeRing(size_t bytes = ring::RingBytes(kSlots, kSlotBytes)) {
    name_ = absl::StrCat("matmul-ringtest-", getpid(), "-", counter_++);
    const int fd =
        shm_open(("/" + name_).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(base_, MAP_FAILED);
    close(fd);
    bytes_ = bytes;
    ring::RingHeader* header = ring::Header(base_);
    header->magic = ring::kMagic;
    header->version = ring::kVersion;
    header->slot_count = kSlots;
    header->slot_bytes = kSlotBytes;
  }
  ~HandMadeRing() {
    munmap(base_, bytes_);
    shm_unlink(("/" + name_).c_str());
  }

  v1::AttachRingRequest Request() const {
    v1::AttachRingRequest request;
    request.set_shm_name(name_);
    request.set_slot_count(kSlots);
    request.set_slot_bytes(kSlotBytes);
    return request;
  }

  ring::SlotHeader* Slot(uint32_t index) {
    return ring::Slot(base_, kSlots, kSlotBytes, index);
  }

  // Publishes `slot` in the queue as a client would.
  void Submit(uint32_t slot) {
    ring::RingHeader* header = ring::Header(base_);
    const uint64_t position = header->submit_tail.fetch_add(1);
    ring::QueueEntry& entry = ring::SubmitQueue(base_)[position % kSlots];
    entry.slot = slot;
    entry.sequence.store(position + 1);
  }

  ring::RingHeader* header() { return ring::Header(base_); }
  const std::string& name() const { return name_; }
  void* base() const { return base_; }
  ring::QueueEntry& CompleteEntry(uint32_t position) {
    return ring::CompleteQueue(base_, kSlots)[position];
  }

  // Shrinks the object to nothing, as a hostile client would. This side's
  // own mapping must not be touched afterwards.
  void Truncate() {
    const int fd = shm_open(("/" + name_).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, 0), 0);
    close(fd);
  }

 private:
  static inline int counter_ = 0;
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// Longer than any round trip can take on a loaded machine: a wait that
// lasts this long lost its wake-up (both sides sleep this long at most).
inline constexpr absl::Duration kLostWakeup = absl::Seconds(5);

// The client's side of the ring protocol, done by hand (as RequestRing
// does it) on a mapping of the ring.
class HandMadeClient {
 public:
  explicit HandMadeClient(void* base) : base_(base) {}

  // Writes a request with `request_id` into `index` and publishes it.
  void Submit(uint32_t index, uint64_t request_id, bool notify) {
    v1::MatmulRequest request;
    request.set_request_id(request_id);
    Submit(index, request, notify, absl::ZeroDuration());
  }

  // Writes `request` into `index` with `timeout` (0: none) and publishes it.
  void Submit(uint32_t index, const v1::MatmulRequest& request, bool notify,
              absl::Duration timeout) {
    ring::SlotHeader* slot = ring::Slot(base_, kSlots, kSlotBytes, index);
    slot->request_bytes = static_cast<uint32_t>(request.ByteSizeLong());
    request.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(ring::Payload(slot)));
    slot->notify = notify ? 1 : 0;
    slot->timeout_ns = absl::ToInt64Nanoseconds(timeout);
    slot->state.store(ring::kSubmitted, std::memory_order_release);
    ring::RingHeader* header = ring::Header(base_);
    const uint64_t position = header->submit_tail.fetch_add(1);
    ring::QueueEntry& entry = ring::SubmitQueue(base_)[position % kSlots];
    entry.slot = index;
    entry.sequence.store(position + 1, std::memory_order_release);
    header->doorbell.fetch_add(1);
    if (header->daemon_sleeping.load() != 0) {
      ring::FutexWakeAll(header->doorbell);
    }
  }

  // Sleeps (no spinning, so that every answer goes through the sleeping
  // protocol) until `index` is done; the answer, and the slot is free.
  v1::MatmulResponse WaitForResponse(uint32_t index) {
    ring::SlotHeader* slot = ring::Slot(base_, kSlots, kSlotBytes, index);
    while (slot->state.load(std::memory_order_acquire) != ring::kDone) {
      slot->client_waiting.store(1);
      if (slot->state.load() != ring::kDone) {
        ring::FutexWait(slot->state, ring::kSubmitted, kLostWakeup);
      }
      slot->client_waiting.store(0, std::memory_order_relaxed);
    }
    return Response(index);
  }

  // WaitForResponse's request id.
  uint64_t WaitForAnswer(uint32_t index) {
    return WaitForResponse(index).request_id();
  }

  // The next slot announced in the completion queue, sleeping for it.
  uint32_t NextCompletion() {
    ring::RingHeader* header = ring::Header(base_);
    ring::QueueEntry& next =
        ring::CompleteQueue(base_, kSlots)[complete_head_ % kSlots];
    while (next.sequence.load(std::memory_order_acquire) !=
           complete_head_ + 1) {
      header->client_sleeping.store(1);
      const uint32_t seen = header->answers.load();
      if (next.sequence.load() != complete_head_ + 1) {
        ring::FutexWait(header->answers, seen, kLostWakeup);
      }
      header->client_sleeping.store(0, std::memory_order_relaxed);
    }
    ++complete_head_;
    return next.slot;
  }

  // The request id of the answer in done slot `index`, which is then free.
  uint64_t Answer(uint32_t index) { return Response(index).request_id(); }

  // The answer in done slot `index`, which is then free.
  v1::MatmulResponse Response(uint32_t index) {
    ring::SlotHeader* slot = ring::Slot(base_, kSlots, kSlotBytes, index);
    v1::MatmulResponse response;
    EXPECT_TRUE(response.ParseFromArray(
        ring::Payload(slot), static_cast<int>(slot->response_bytes)));
    slot->state.store(ring::kFree, std::memory_order_relaxed);
    return response;
  }

 private:
  void* const base_;
  uint64_t complete_head_ = 0;  // NextCompletion's thread only
};

}  // namespace matmul

#endif  // MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_
