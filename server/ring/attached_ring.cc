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
  const ring::RingHeader* header = ring->protocol_.view().header();
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
  ring->protocol_.StartAtTail();
  return ring;
}

AttachedRing::AttachedRing(std::unique_ptr<ShmRegion> mapping,
                           uint32_t slot_count, uint32_t slot_bytes)
    : mapping_(std::move(mapping)),
      protocol_(ring::RingView(mapping_->host_data(), slot_count, slot_bytes)),
      holder_(std::make_unique<std::atomic<uint8_t>[]>(slot_count)) {}

absl::Status AttachedRing::FaultedStatus() const {
  return absl::FailedPreconditionError(
      "ring: the ring's shm segment was truncated or otherwise changed while "
      "attached (an access past its end faulted); the daemon answers nothing "
      "more through it: attach a new ring");
}

std::optional<uint32_t> AttachedRing::Take() {
  for (uint32_t skipped = 0; skipped < slot_count(); ++skipped) {
    const std::optional<uint32_t> slot = protocol_.NextSubmission();
    if (!slot.has_value()) return std::nullopt;
    if (*slot < slot_count() && TakeIfSubmitted(*slot)) return slot;
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
  return protocol_.PrepareToSleep();
}

void AttachedRing::Awake() { protocol_.Awake(); }

absl::Status AttachedRing::ReadRequest(uint32_t slot,
                                       v1::MatmulRequest* request,
                                       absl::Duration* timeout) {
  ring::SlotHeader* header = SlotAt(slot);
  const uint32_t bytes = ring::LoadOnce(header->request_bytes);
  const int64_t timeout_ns = ring::LoadOnce(header->timeout_ns);
  const size_t capacity = protocol_.view().payload_bytes();
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
  const ring::RingView& view = protocol_.view();
  char* const payload = view.payload(slot);
  const size_t capacity = view.payload_bytes();
  const size_t bytes = response.ByteSizeLong();
  if (bytes <= capacity) {
    response.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(payload));
    protocol_.WriteResponseBytes(slot, static_cast<uint32_t>(bytes));
  } else {
    v1::MatmulResponse too_big;
    too_big.set_request_id(response.request_id());
    too_big.set_status_code(
        static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
    too_big.set_status_message(absl::StrCat(
        "the response (", bytes, " bytes) does not fit the ring slot (",
        capacity, " bytes); send requests with an inline output over gRPC"));
    too_big.SerializeToArray(payload, static_cast<int>(capacity));
    protocol_.WriteResponseBytes(slot,
                                 static_cast<uint32_t>(too_big.ByteSizeLong()));
  }
  const bool notify = protocol_.NotifyWanted(slot);
  // kDone is stored while we hold the slot: see holder_.
  holder_[slot].store(kAnswering);
  protocol_.MarkDone(slot);
  holder_[slot].store(kIdle);
  protocol_.TellClient(slot, notify);
}

}  // namespace matmul
