// matmul::ring::ClientProtocol: the client's side of a request ring, built
// from RingView's steps (ring_view.h): submit a request in a slot, wait for
// the slot to be done (client_waiting), read the answer and free the slot,
// or take answers from the completion queue (client_sleeping). RequestRing
// (client/ring/) runs it with its slot bookkeeping, deadlines and spinning
// around it; the ring's tests run it bare.
//
//   ClientProtocol client(RingView(base, slot_count, slot_bytes));
//   request.SerializeToArray(client.view().payload(slot), size);
//   client.Submit(slot, size, timeout_ns, /*notify=*/false);
//   while (!client.Done(slot)) client.SleepUntilDone(slot, timeout);
//   ... parse client.view().ResponseBytes(slot) bytes of the payload ...
//   client.Free(slot);
//
// Thread-safe for distinct slots; TakeCompletion and SleepUntilCompletion
// on one thread only (they own the completion queue's head).
#ifndef MATMUL_COMMON_RING_CLIENT_PROTOCOL_H_
#define MATMUL_COMMON_RING_CLIENT_PROTOCOL_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/ring/ring_view.h"

namespace matmul::ring {

class ClientProtocol {
 public:
  explicit ClientProtocol(RingView view) : view_(view) {}

  const RingView& view() const { return view_; }

  // Hands a slot this client owns (kFree or kDone) to the daemon, its
  // request's `request_bytes` already written at view().payload(slot):
  // writes the fields, stores kSubmitted, publishes the slot in the
  // submission queue and rings the doorbell. `timeout_ns`: how long the
  // request may wait in the daemon (0: no limit).
  void Submit(uint32_t slot, uint32_t request_bytes, int64_t timeout_ns,
              bool notify) const {
    view_.WriteRequestFields(slot, request_bytes, timeout_ns, notify);
    view_.PublishState(slot, kSubmitted);
    view_.PublishSubmission(view_.ReserveSubmissions(), slot);
    view_.RingDoorbell();
  }

  // True once the daemon answered `slot` (acquire: its answer may be read).
  bool Done(uint32_t slot) const { return view_.State(slot) == kDone; }

  // One sleep on `slot`'s state: returns once it is done, on a wake-up,
  // after `timeout` or spuriously; the caller checks Done again.
  void SleepUntilDone(uint32_t slot, absl::Duration timeout) const {
    SlotHeader* header = view_.slot(slot);
    // seq_cst, as the daemon's state store and client_waiting load
    // (DaemonProtocol::MarkDone, TellClient; Dekker, see RingDoorbell):
    // weaker could lose the wake-up.
    header->client_waiting.store(1);
    if (header->state.load() != kDone) {
      FutexWait(header->state, kSubmitted, timeout);
    }
    header->client_waiting.store(0, std::memory_order_relaxed);
  }

  // Gives a done slot back to this client once its answer is read
  // (relaxed: the daemon takes a slot only in kSubmitted, which the next
  // Submit stores with release).
  void Free(uint32_t slot) const {
    view_.slot(slot)->state.store(kFree, std::memory_order_relaxed);
  }

  // The slot of the next completion queue entry, moving past it, or
  // nullopt while the daemon has not published it. The slot is as the
  // daemon wrote it: check it is in range.
  std::optional<uint32_t> TakeCompletion() {
    if (!view_.CompletionPublished(complete_head_)) return std::nullopt;
    const uint32_t slot = view_.CompletedSlot(complete_head_);
    ++complete_head_;
    return slot;
  }

  // One sleep on `answers`: returns once the next completion is published
  // (or `*stopping` is set, checked after the client_sleeping flag is up),
  // on a wake-up, after `timeout` or spuriously; the caller tries
  // TakeCompletion again.
  void SleepUntilCompletion(absl::Duration timeout,
                            const std::atomic<bool>* stopping = nullptr) {
    RingHeader* header = view_.header();
    // seq_cst, as the daemon's bump of `answers` and client_sleeping load
    // (RingView::AnnounceCompletion; Dekker, see RingDoorbell): weaker
    // could lose the wake-up.
    header->client_sleeping.store(1);
    const uint32_t seen = header->answers.load();
    if (view_.complete_entry(complete_head_).sequence.load() !=
            complete_head_ + 1 &&
        (stopping == nullptr || !stopping->load())) {
      FutexWait(header->answers, seen, timeout);
    }
    header->client_sleeping.store(0, std::memory_order_relaxed);
  }

  // Ends a SleepUntilCompletion at once: a wake-up alone is lost when the
  // sleeper is between its last check and its FutexWait, so this changes
  // the futex word (the wait then returns at once) and wakes.
  void InterruptCompletionSleep() const {
    RingHeader* header = view_.header();
    header->answers.fetch_add(1);
    FutexWakeAll(header->answers);
  }

 private:
  RingView view_;
  uint64_t complete_head_ = 0;
};

}  // namespace matmul::ring

#endif  // MATMUL_COMMON_RING_CLIENT_PROTOCOL_H_
