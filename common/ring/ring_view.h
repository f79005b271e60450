// matmul::ring::RingView: one mapping of a request ring
// (common/request_ring_layout.h) and the single steps of its protocol: write
// a slot, hand it over by its state, reserve and publish queue entries, ring
// the doorbell, announce a completion. Every writer of a ring goes through
// these steps: the client (ClientProtocol, client_protocol.h), the daemon
// (DaemonProtocol, daemon_protocol.h), and the soak's raw writer, which calls
// them on their own and out of order to break the protocol on purpose.
//
//   RingView view(base, slot_count, slot_bytes);
//   std::memcpy(view.payload(3), bytes.data(), bytes.size());
//   view.WriteRequestFields(3, bytes.size(), /*timeout_ns=*/0, false);
//   view.PublishState(3, kSubmitted);
//   view.PublishSubmission(view.ReserveSubmissions(), 3);
//   view.RingDoorbell();
//
// Each step carries the memory ordering its half of the protocol needs (the
// layout's "Memory ordering"); the order of the steps is the caller's. No
// checks: the caller validated the geometry, and a reader checks what the
// other side wrote (an index, a length) before it uses it. A view is a
// pointer: copies see the same ring, and its const calls write the ring.
// Header-only, so that the hot path inlines as the hand-written code did.
#ifndef MATMUL_COMMON_RING_RING_VIEW_H_
#define MATMUL_COMMON_RING_RING_VIEW_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/request_ring_layout.h"

namespace matmul::ring {

class RingView {
 public:
  RingView(void* base, uint32_t slot_count, uint32_t slot_bytes)
      : base_(base), slot_count_(slot_count), slot_bytes_(slot_bytes) {}

  void* base() const { return base_; }
  uint32_t slot_count() const { return slot_count_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  size_t payload_bytes() const { return PayloadBytes(slot_bytes_); }

  RingHeader* header() const { return Header(base_); }
  SlotHeader* slot(uint32_t index) const {
    return Slot(base_, slot_count_, slot_bytes_, index);
  }
  char* payload(uint32_t index) const { return Payload(slot(index)); }
  // The queue entry that queue position `position` uses.
  QueueEntry& submit_entry(uint64_t position) const {
    return SubmitQueue(base_)[position % slot_count_];
  }
  QueueEntry& complete_entry(uint64_t position) const {
    return CompleteQueue(base_, slot_count_)[position % slot_count_];
  }

  // The client's header, written once into an object that reads as zeros
  // (then every atomic is 0 and every slot kFree).
  void WriteRingHeader() const {
    RingHeader* ring = header();
    ring->magic = kMagic;
    ring->version = kVersion;
    ring->slot_count = slot_count_;
    ring->slot_bytes = slot_bytes_;
  }

  // --- A slot. The side that owns it writes its payload and fields, then
  // hands it over by storing its state.

  // A request's fields, whatever they say (the payload is written before
  // or after, but before PublishState); clears response_bytes.
  void WriteRequestFields(uint32_t index, uint32_t request_bytes,
                          int64_t timeout_ns, bool notify) const {
    SlotHeader* header = slot(index);
    header->request_bytes = request_bytes;
    header->response_bytes = 0;
    header->notify = notify ? 1 : 0;
    header->timeout_ns = timeout_ns;
  }
  // Stores `state` with release: the payload and fields written before are
  // seen by whoever sees the state (State, acquire).
  void PublishState(uint32_t index, uint32_t state) const {
    slot(index)->state.store(state, std::memory_order_release);
  }
  // The slot's state, with acquire: what was written before it was stored
  // may be read after.
  uint32_t State(uint32_t index) const {
    return slot(index)->state.load(std::memory_order_acquire);
  }
  // response_bytes, read once; unchecked (compare with payload_bytes()).
  uint32_t ResponseBytes(uint32_t index) const {
    return LoadOnce(slot(index)->response_bytes);
  }

  // --- The submission queue (clients write, the daemon reads).

  // Reserves `count` positions from submit_tail; the first. Positions never
  // wrap; several clients reserve at once.
  uint64_t ReserveSubmissions(uint64_t count = 1) const {
    return header()->submit_tail.fetch_add(count);
  }
  // Writes the entry of `position`: its slot, then its sequence with
  // release. position + 1 publishes it; any other sequence leaves it
  // unpublished (what a broken client writes).
  void PublishSubmission(uint64_t position, uint32_t slot_index,
                         uint64_t sequence) const {
    QueueEntry& entry = submit_entry(position);
    entry.slot = slot_index;
    entry.sequence.store(sequence, std::memory_order_release);
  }
  void PublishSubmission(uint64_t position, uint32_t slot_index) const {
    PublishSubmission(position, slot_index, position + 1);
  }
  // True once the entry of `position` is published (sequence, acquired, is
  // position + 1): its slot may be read then.
  bool SubmissionPublished(uint64_t position) const {
    return submit_entry(position).sequence.load(std::memory_order_acquire) ==
           position + 1;
  }
  // The slot a published entry names, read once; unchecked.
  uint32_t SubmittedSlot(uint64_t position) const {
    return LoadOnce(submit_entry(position).slot);
  }
  // Tells the daemon that a submission is published: bumps the doorbell,
  // and wakes the daemon if it sleeps on it.
  void RingDoorbell() const {
    RingHeader* ring = header();
    // seq_cst, as the daemon's daemon_sleeping store and doorbell load
    // (DaemonProtocol::PrepareToSleep): each side stores, then loads what
    // the other stored (Dekker); weaker, both could miss the other's
    // store, and this request would wait out the daemon's sleep.
    ring->doorbell.fetch_add(1);
    if (ring->daemon_sleeping.load() != 0) FutexWakeAll(ring->doorbell);
  }

  // --- The completion queue (the daemon writes, the client reads).

  uint64_t ReserveCompletion() const {
    return header()->complete_tail.fetch_add(1);
  }
  // Writes the entry of `position` (its slot, then its sequence, position
  // + 1, with release).
  void PublishCompletion(uint64_t position, uint32_t slot_index) const {
    QueueEntry& entry = complete_entry(position);
    entry.slot = slot_index;
    entry.sequence.store(position + 1, std::memory_order_release);
  }
  bool CompletionPublished(uint64_t position) const {
    return complete_entry(position).sequence.load(std::memory_order_acquire) ==
           position + 1;
  }
  uint32_t CompletedSlot(uint64_t position) const {
    return LoadOnce(complete_entry(position).slot);
  }
  // Tells the client that a completion is published: bumps `answers`, and
  // wakes the client's completion thread if it sleeps on it.
  void AnnounceCompletion() const {
    RingHeader* ring = header();
    // seq_cst, as the client's client_sleeping store and `answers` load
    // (ClientProtocol::SleepUntilCompletion; Dekker): weaker, both could
    // miss the other's store.
    ring->answers.fetch_add(1);
    if (ring->client_sleeping.load() != 0) FutexWakeAll(ring->answers);
  }

 private:
  void* base_;
  uint32_t slot_count_;
  uint32_t slot_bytes_;
};

}  // namespace matmul::ring

#endif  // MATMUL_COMMON_RING_RING_VIEW_H_
