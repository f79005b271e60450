// The request ring: a transport for clients on the daemon's host that skips
// gRPC on the hot path. The client creates a POSIX shared-memory object with
// this layout and attaches it with the AttachRing RPC (the stream that stays
// open while the ring is in use). From then on a request is a serialized
// MatmulRequest written into a slot, and its answer a serialized
// MatmulResponse written back into the same slot; both sides poll, then
// sleep on futexes in the shared mapping, so a round trip costs a few cache
// line transfers instead of a socket round trip and several thread wake-ups.
//
//   [RingHeader][submission queue][completion queue][slot 0][slot 1]...
//   queues: QueueEntry x slot_count each; everything 64-byte aligned
//   slot: [SlotHeader][payload: slot_bytes - sizeof(SlotHeader)]
//
// Submitting (client): write the request into a free slot, set its state to
// kSubmitted, reserve a submission queue position (submit_tail), publish the
// slot index there (QueueEntry::sequence = position + 1), bump the doorbell
// and wake the daemon if it sleeps. Completing (daemon): write the response
// and set the state to kDone; then, for a slot marked `notify`, publish it
// in the completion queue the same way (complete_tail), bump `answers` and
// wake the client's completion thread if it sleeps; otherwise wake the
// client if it sleeps on the slot itself. Many requests in flight are best
// served by one client thread reading the completion queue: the daemon
// then makes no system call per answer while that thread is busy. These
// steps are written once, in the ring codec (common/ring/): RingView's
// single steps, and ClientProtocol and DaemonProtocol built from them.
//
// The daemon trusts nothing in the mapping: it keeps its own queue head,
// checks every slot index, state and length, and copies a request out of
// the slot before parsing it. A client that scribbles on its ring can only
// lose its own requests.
//
// Memory ordering (either side may run on a weakly ordered CPU, arm64):
// - A slot's fields and payload are written before its state is stored
//   with release, and read only after an acquire load saw that state
//   (kSubmitted: the daemon; kDone: the client).
// - A queue entry's `slot` is written before its `sequence` is stored with
//   release; a reader loads `sequence` with acquire before it reads `slot`.
// - Sleeping: the sleeper sets its flag (daemon_sleeping, client_sleeping,
//   client_waiting), then loads the futex word and re-checks; the waker
//   publishes (bumps the futex word or stores the state), then loads the
//   flag. Each side is a store followed by a load of another location,
//   which only seq_cst orders (Dekker): with anything weaker both sides can
//   miss each other's store, and the wake-up is lost until the timeout.
// - The daemon reads each field the client writes once (LoadOnce) and
//   checks that copy; a torn or changing value can only fail the client.
#ifndef MATMUL_COMMON_REQUEST_RING_LAYOUT_H_
#define MATMUL_COMMON_REQUEST_RING_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/time/time.h"

namespace matmul::ring {

inline constexpr uint32_t kMagic = 0x474e524d;  // "MRNG"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxSlots = 4096;
inline constexpr uint32_t kMinSlotBytes = 512;
inline constexpr uint32_t kMaxSlotBytes = 1u << 20;

// A slot's state; the client owns a slot in kFree and kDone, the daemon in
// kSubmitted.
enum SlotState : uint32_t { kFree = 0, kSubmitted = 1, kDone = 2 };

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_bytes;  // header included; a multiple of 64
  // Next queue position a client reserves (fetch_add). Positions are 64
  // bits: they never wrap, so `position % slot_count` names one entry.
  alignas(64) std::atomic<uint64_t> submit_tail;
  // Bumped after every submission: the daemon's futex word.
  alignas(64) std::atomic<uint32_t> doorbell;
  // Set by the daemon before it sleeps on the doorbell.
  std::atomic<uint32_t> daemon_sleeping;
  // Next completion queue position the daemon reserves.
  alignas(64) std::atomic<uint64_t> complete_tail;
  // Bumped after every completion queue entry: the client's futex word.
  alignas(64) std::atomic<uint32_t> answers;
  // Set by the client before it sleeps on `answers`.
  std::atomic<uint32_t> client_sleeping;
};

struct QueueEntry {
  std::atomic<uint64_t> sequence;  // position + 1 once `slot` is published
  uint32_t slot;
};

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> state;           // SlotState; the client's futex word
  std::atomic<uint32_t> client_waiting;  // set before the client sleeps
  uint32_t request_bytes;
  uint32_t response_bytes;
  uint32_t notify;  // 1: announce the answer in the completion queue
  // Time the request may wait in the daemon before it is dropped with
  // DEADLINE_EXCEEDED, from when the daemon takes it; 0: no limit.
  int64_t timeout_ns;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

inline constexpr size_t AlignUp64(size_t bytes) { return (bytes + 63) & ~63ul; }

inline constexpr size_t SubmitQueueOffset() {
  return AlignUp64(sizeof(RingHeader));
}
inline constexpr size_t CompleteQueueOffset(uint32_t slot_count) {
  return AlignUp64(SubmitQueueOffset() + sizeof(QueueEntry) * slot_count);
}
inline constexpr size_t SlotsOffset(uint32_t slot_count) {
  return AlignUp64(CompleteQueueOffset(slot_count) +
                   sizeof(QueueEntry) * slot_count);
}
// Total bytes of a ring; the shm object must be exactly this large.
inline constexpr size_t RingBytes(uint32_t slot_count, uint32_t slot_bytes) {
  return SlotsOffset(slot_count) + size_t{slot_count} * slot_bytes;
}
inline constexpr size_t PayloadBytes(uint32_t slot_bytes) {
  return slot_bytes - sizeof(SlotHeader);
}

// Views of a mapped ring (no checks: the caller validated the header).
inline RingHeader* Header(void* base) { return static_cast<RingHeader*>(base); }
inline QueueEntry* SubmitQueue(void* base) {
  return reinterpret_cast<QueueEntry*>(static_cast<char*>(base) +
                                       SubmitQueueOffset());
}
inline QueueEntry* CompleteQueue(void* base, uint32_t slot_count) {
  return reinterpret_cast<QueueEntry*>(static_cast<char*>(base) +
                                       CompleteQueueOffset(slot_count));
}
inline SlotHeader* Slot(void* base, uint32_t slot_count, uint32_t slot_bytes,
                        uint32_t index) {
  return reinterpret_cast<SlotHeader*>(static_cast<char*>(base) +
                                       SlotsOffset(slot_count) +
                                       size_t{index} * slot_bytes);
}
inline char* Payload(SlotHeader* slot) {
  return reinterpret_cast<char*>(slot) + sizeof(SlotHeader);
}

// Futexes on the shared mapping (not FUTEX_PRIVATE: the waker is another
// process). FutexWait returns when *word != expected, on a wake, after
// `timeout`, or spuriously: callers re-check their condition.
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               absl::Duration timeout);
void FutexWakeAll(std::atomic<uint32_t>& word);

// One word of a FutexWaitAny: the wait ends when it no longer holds
// `expected` (or on a wake).
struct FutexWaitTarget {
  std::atomic<uint32_t>* word;
  uint32_t expected;
};
// The most words one FutexWaitAny sleeps on (the kernel's limit).
inline constexpr size_t kMaxFutexWaitTargets = 128;
// Sleeps until any of `targets` changes or is woken, `timeout` passes, or
// spuriously, like FutexWait (futex_waitv, Linux 5.16). Returns false at
// once, without sleeping, where the kernel lacks futex_waitv or `targets`
// holds more than kMaxFutexWaitTargets words: the caller polls instead.
bool FutexWaitAny(std::span<const FutexWaitTarget> targets,
                  absl::Duration timeout);

// One read of a field the other process may write at any time (the
// compiler must not read it again after a check).
template <typename T>
T LoadOnce(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

// A pause in a spin loop (lets the sibling hyperthread run).
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace matmul::ring

#endif  // MATMUL_COMMON_REQUEST_RING_LAYOUT_H_
