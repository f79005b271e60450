// matmul::ring::DaemonProtocol: the daemon's side of a request ring, built
// from RingView's steps (ring_view.h): take the next published submission
// at its own queue head, sleep on the doorbell (daemon_sleeping), and
// complete a slot (mark it done, then publish it in the completion queue
// for a notify slot, else wake a client that sleeps on it). AttachedRing
// (server/ring/) runs it with its own checks around it: the slot index,
// state and lengths, and who on the daemon's side holds each slot.
//
//   DaemonProtocol daemon(RingView(base, slot_count, slot_bytes));
//   daemon.StartAtTail();
//   while (std::optional<uint32_t> slot = daemon.NextSubmission()) {
//     ... check *slot, read its request, write the answer's bytes ...
//     daemon.WriteResponseBytes(*slot, bytes);
//     const bool notify = daemon.NotifyWanted(*slot);
//     daemon.MarkDone(*slot);
//     daemon.TellClient(*slot, notify);
//   }
//
// NextSubmission and the doorbell's calls on one thread (they own the
// queue head); completing is thread-safe for distinct slots.
#ifndef MATMUL_COMMON_RING_DAEMON_PROTOCOL_H_
#define MATMUL_COMMON_RING_DAEMON_PROTOCOL_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "common/request_ring_layout.h"
#include "common/ring/ring_view.h"

namespace matmul::ring {

class DaemonProtocol {
 public:
  explicit DaemonProtocol(RingView view) : view_(view) {}

  const RingView& view() const { return view_; }

  // Starts the queue head where the clients are now (submit_tail). From
  // then on the head is the daemon's own, never read from the mapping.
  void StartAtTail() {
    head_ = view_.header()->submit_tail.load(std::memory_order_acquire);
  }

  // The slot published at the head, moving past it, or nullopt while the
  // entry there is unpublished. The slot is whatever the client wrote
  // (read once): check it.
  std::optional<uint32_t> NextSubmission() {
    if (!view_.SubmissionPublished(head_)) return std::nullopt;
    const uint32_t slot = view_.SubmittedSlot(head_);
    ++head_;
    return slot;
  }

  // The doorbell's sleeping protocol in two halves, so that one thread
  // can sleep on many rings' doorbells at once (FutexWaitAny).
  // PrepareToSleep tells clients that the daemon may sleep and returns the
  // doorbell's word and the value to wait on; nullopt (and nothing told)
  // when a submission is waiting already. Awake tells them it polls again.
  std::optional<FutexWaitTarget> PrepareToSleep() {
    RingHeader* header = view_.header();
    // seq_cst, as the client's doorbell bump and daemon_sleeping load
    // (RingView::RingDoorbell; Dekker): weaker, both could miss the
    // other's store and a submission would wait out this sleep.
    header->daemon_sleeping.store(1);
    const uint32_t rung = header->doorbell.load();
    // A submission published before the load above is seen here; one
    // after it changes the doorbell, so the futex returns at once.
    if (view_.SubmissionPublished(head_)) {
      header->daemon_sleeping.store(0);
      return std::nullopt;
    }
    return FutexWaitTarget{&header->doorbell, rung};
  }
  void Awake() { view_.header()->daemon_sleeping.store(0); }

  // --- Completing a slot, in this order: write the answer's bytes at
  // view().payload(slot), WriteResponseBytes, NotifyWanted, MarkDone,
  // TellClient.

  void WriteResponseBytes(uint32_t slot, uint32_t bytes) const {
    view_.slot(slot)->response_bytes = bytes;
  }
  // Whether the client asked for the answer in the completion queue, read
  // once. Read it before MarkDone: from then on the slot is the client's,
  // which may write its next request there.
  bool NotifyWanted(uint32_t slot) const {
    return LoadOnce(view_.slot(slot)->notify) != 0;
  }
  // Stores kDone. Release: the answer and response_bytes before the state
  // the client acquires. seq_cst: ordered before TellClient's
  // client_waiting load (Dekker with the client's client_waiting store and
  // state load, ClientProtocol::SleepUntilDone; weaker could lose its
  // wake-up).
  void MarkDone(uint32_t slot) const { view_.slot(slot)->state.store(kDone); }
  // For a `notify` slot, publishes it in the completion queue and wakes the
  // client's completion thread if it sleeps; otherwise wakes a client that
  // sleeps on the slot.
  void TellClient(uint32_t slot, bool notify) const {
    if (!notify) {
      SlotHeader* header = view_.slot(slot);
      if (header->client_waiting.load() != 0) FutexWakeAll(header->state);
      return;
    }
    view_.PublishCompletion(view_.ReserveCompletion(), slot);
    view_.AnnounceCompletion();
  }

 private:
  RingView view_;
  uint64_t head_ = 0;
};

}  // namespace matmul::ring

#endif  // MATMUL_COMMON_RING_DAEMON_PROTOCOL_H_
