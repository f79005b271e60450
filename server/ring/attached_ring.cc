#include "server/ring/attached_ring.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<AttachedRing>> AttachedRing::Open(
    const v1::AttachRingRequest& request, const std::string& shm_prefix,
    const PeerCredentials& peer, bool allow_other_shm_owners) {
  const uint32_t slots = request.slot_count();
  const uint32_t slot_bytes = request.slot_bytes();
  if (slots < 1 || slots > ring::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot_count is ", slots, "; expected 1..", ring::kMaxSlots));
  }
  if (slot_bytes < ring::kMinSlotBytes || slot_bytes > ring::kMaxSlotBytes ||
      slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot_bytes is ", slot_bytes, "; expected a multiple of ",
                     "64 in ", ring::kMinSlotBytes, "..", ring::kMaxSlotBytes));
  }
  const uint64_t bytes = ring::RingBytes(slots, slot_bytes);
  absl::StatusOr<std::unique_ptr<ShmRegion>> mapping = ShmRegion::Open(
      request.shm_name(), shm_prefix, 0, bytes, peer, allow_other_shm_owners);
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat("ring: ", mapping.status().message()));
  }
  auto ring = std::unique_ptr<AttachedRing>(
      new AttachedRing(*std::move(mapping), slots, slot_bytes));
  // Read once: the client may rewrite the header while we check it, and
  // the message must report what was checked.
  const ring::RingHeader* header = ring::Header(ring->base_);
  const uint32_t magic = ring::LoadOnce(header->magic);
  const uint32_t version = ring::LoadOnce(header->version);
  const uint32_t header_slots = ring::LoadOnce(header->slot_count);
  const uint32_t header_slot_bytes = ring::LoadOnce(header->slot_bytes);
  // The header read zeros if the segment shrank under us: say that, not
  // that it disagrees.
  if (ring->faulted()) return ring->FaultedStatus();
  if (magic != ring::kMagic || version != ring::kVersion ||
      header_slots != slots || header_slot_bytes != slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring: the header (magic ", magic, ", version ", version, ", ",
        header_slots, " slots of ", header_slot_bytes,
        " bytes) does not match the request (magic ", ring::kMagic,
        ", version ", ring::kVersion, ", ", slots, " x ", slot_bytes, ")"));
  }
  // Clients reserve positions from the tail; start where they are.
  ring->head_ = header->submit_tail.load(std::memory_order_acquire);
  return ring;
}

AttachedRing::AttachedRing(std::unique_ptr<ShmRegion> mapping,
                           uint32_t slot_count, uint32_t slot_bytes)
    : mapping_(std::move(mapping)),
      base_(mapping_->host_data()),
      slot_count_(slot_count),
      slot_bytes_(slot_bytes),
      holder_(std::make_unique<std::atomic<uint8_t>[]>(slot_count)) {}

absl::Status AttachedRing::FaultedStatus() const {
  return absl::FailedPreconditionError(
      "ring: the ring's shm segment was truncated or otherwise changed while "
      "attached (an access past its end faulted); the daemon answers nothing "
      "more through it: attach a new ring");
}

ring::SlotHeader* AttachedRing::SlotAt(uint32_t index) const {
  return ring::Slot(base_, slot_count_, slot_bytes_, index);
}

std::optional<uint32_t> AttachedRing::Take() {
  for (uint32_t skipped = 0; skipped < slot_count_; ++skipped) {
    ring::QueueEntry& entry = ring::SubmitQueue(base_)[head_ % slot_count_];
    if (entry.sequence.load(std::memory_order_acquire) != head_ + 1) {
      return std::nullopt;
    }
    const uint32_t slot = ring::LoadOnce(entry.slot);
    ++head_;
    if (slot < slot_count_ && TakeIfSubmitted(slot)) return slot;
  }
  return std::nullopt;
}

bool AttachedRing::TakeIfSubmitted(uint32_t slot) {
  const std::atomic<uint32_t>& state = SlotAt(slot)->state;
  std::atomic<uint8_t>& holder = holder_[slot];
  for (;;) {
    if (state.load(std::memory_order_acquire) != ring::kSubmitted) {
      return false;
    }
    uint8_t held = kIdle;
    if (holder.compare_exchange_strong(held, kTaken)) {
      // An answer may have come and gone between the two: taken only if
      // the slot is still submitted now that nobody else can answer it.
      if (state.load() == ring::kSubmitted) return true;
      holder.store(kIdle);
      return false;
    }
    // Taken and running: this is a second publication of it.
    if (held == kTaken) return false;
    // Being answered: kDone is stored or about to be; the state read after
    // the answer tells a second publication from the next submission.
    while (holder.load() == kAnswering) std::this_thread::yield();
  }
}

void AttachedRing::WaitForDoorbell(absl::Duration timeout) {
  if (std::optional<ring::FutexWaitTarget> doorbell = PrepareToSleep()) {
    ring::FutexWait(*doorbell->word, doorbell->expected, timeout);
    Awake();
  }
}

std::optional<ring::FutexWaitTarget> AttachedRing::PrepareToSleep() {
  ring::RingHeader* header = ring::Header(base_);
  // seq_cst, as the client's doorbell bump and daemon_sleeping load
  // (Dekker): weaker, both could miss the other's store and a submission
  // would wait out this sleep.
  header->daemon_sleeping.store(1);
  const uint32_t rung = header->doorbell.load();
  // A submission published before the load above is seen here; one after
  // it changes the doorbell, so the futex returns at once.
  const ring::QueueEntry& next = ring::SubmitQueue(base_)[head_ % slot_count_];
  if (next.sequence.load(std::memory_order_acquire) == head_ + 1) {
    header->daemon_sleeping.store(0);
    return std::nullopt;
  }
  return ring::FutexWaitTarget{&header->doorbell, rung};
}

void AttachedRing::Awake() { ring::Header(base_)->daemon_sleeping.store(0); }

absl::Status AttachedRing::ReadRequest(uint32_t slot,
                                       v1::MatmulRequest* request,
                                       absl::Duration* timeout) {
  ring::SlotHeader* header = SlotAt(slot);
  const uint32_t bytes = ring::LoadOnce(header->request_bytes);
  const int64_t timeout_ns = ring::LoadOnce(header->timeout_ns);
  const size_t capacity = ring::PayloadBytes(slot_bytes_);
  if (bytes > capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring slot ", slot, ": request_bytes is ", bytes,
                     "; the payload holds ", capacity));
  }
  // The client may write the slot while we read: parse a private copy.
  scratch_.assign(ring::Payload(header), bytes);
  if (!request->ParseFromString(scratch_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring slot ", slot, ": the ", bytes,
        " bytes there are not a serialized matmul.v1.MatmulRequest"));
  }
  *timeout =
      timeout_ns > 0 ? absl::Nanoseconds(timeout_ns) : absl::ZeroDuration();
  return absl::OkStatus();
}

void AttachedRing::Complete(uint32_t slot, const v1::MatmulResponse& response) {
  // The mapping is private zeros now: nobody would read the answer.
  if (faulted()) return;
  ring::SlotHeader* header = SlotAt(slot);
  const size_t capacity = ring::PayloadBytes(slot_bytes_);
  const size_t bytes = response.ByteSizeLong();
  if (bytes <= capacity) {
    response.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(ring::Payload(header)));
    header->response_bytes = static_cast<uint32_t>(bytes);
  } else {
    v1::MatmulResponse too_big;
    too_big.set_request_id(response.request_id());
    too_big.set_status_code(
        static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
    too_big.set_status_message(absl::StrCat(
        "the response (", bytes, " bytes) does not fit the ring slot (",
        capacity, " bytes); send requests with an inline output over gRPC"));
    too_big.SerializeToArray(ring::Payload(header), static_cast<int>(capacity));
    header->response_bytes = static_cast<uint32_t>(too_big.ByteSizeLong());
  }
  const bool notify = ring::LoadOnce(header->notify) != 0;
  holder_[slot].store(kAnswering);
  // Release: the response and response_bytes before the state the client
  // acquires. seq_cst: ordered before the client_waiting load (Dekker with
  // the client's client_waiting store and state load; weaker could lose
  // its wake-up).
  header->state.store(ring::kDone);
  holder_[slot].store(kIdle);
  if (!notify) {
    if (header->client_waiting.load() != 0) ring::FutexWakeAll(header->state);
    return;
  }
  ring::RingHeader* ring_header = ring::Header(base_);
  const uint64_t position = ring_header->complete_tail.fetch_add(1);
  ring::QueueEntry& entry =
      ring::CompleteQueue(base_, slot_count_)[position % slot_count_];
  entry.slot = slot;
  entry.sequence.store(position + 1, std::memory_order_release);
  // seq_cst, as the client's client_sleeping store and `answers` load
  // (Dekker): weaker, both could miss the other's store.
  ring_header->answers.fetch_add(1);
  if (ring_header->client_sleeping.load() != 0) {
    ring::FutexWakeAll(ring_header->answers);
  }
}

}  // namespace matmul
