// The daemon's side of one request ring (common/request_ring_layout.h): the
// client's shm object mapped here, read and written through checks only;
// the protocol's steps are ring::DaemonProtocol's (common/ring/).
// Thread-compatible for Take and the doorbell's calls (one poller); ReadRequest
// and Complete may run on any thread for distinct slots.
#ifndef MATMUL_SERVER_RING_ATTACHED_RING_H_
#define MATMUL_SERVER_RING_ATTACHED_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/ring/daemon_protocol.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/shm_region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

class AttachedRing {
 public:
  // Maps the ring that `request` names and checks its header against the
  // slot count and size it declares. INVALID_ARGUMENT for a bad name, a
  // slot count outside 1..4096, a slot size outside 512 B..1 MiB or not a
  // multiple of 64, an object smaller than RingBytes or a header that
  // disagrees;
  // NOT_FOUND / PERMISSION_DENIED as ShmRegion::Open says (the segment
  // must belong to `peer`'s uid unless `allow_other_shm_owners`).
  static absl::StatusOr<std::unique_ptr<AttachedRing>> Open(
      const v1::AttachRingRequest& request, const std::string& shm_prefix,
      const PeerCredentials& peer, bool allow_other_shm_owners = false);

  uint32_t slot_count() const { return protocol_.view().slot_count(); }

  // The next slot a client submitted, or nullopt when the queue is empty.
  // Entries naming a slot out of range, not in kSubmitted or already taken
  // (and not yet completed) are skipped, at most slot_count per call so
  // that a client cannot keep the poller here.
  std::optional<uint32_t> Take();

  // Sleeps until a client rings the doorbell or `timeout` passes (returns
  // at once when a submission is already waiting).
  void WaitForDoorbell(absl::Duration timeout);

  // WaitForDoorbell in two halves, for a poller that sleeps on many rings
  // at once (ring::FutexWaitAny). PrepareToSleep tells the client that the
  // daemon may sleep and returns the doorbell's word and value to wait on;
  // nullopt (and nothing told) when a submission is waiting already.
  // After the sleep, Awake tells the client that the daemon polls again.
  std::optional<ring::FutexWaitTarget> PrepareToSleep();
  void Awake();

  // Copies the slot's request out of the mapping and parses it (poller
  // thread only, like Take).
  // INVALID_ARGUMENT when its length or bytes are not a MatmulRequest.
  // `timeout` gets the slot's timeout (zero: none).
  absl::Status ReadRequest(uint32_t slot, v1::MatmulRequest* request,
                           absl::Duration* timeout);

  // Writes `response` into the slot (or, when it does not fit, a
  // RESOURCE_EXHAUSTED response that says so), marks it done and tells the
  // client: through the completion queue for a `notify` slot, else by
  // waking a client that sleeps on the slot. Does nothing once faulted().
  // Thread-safe.
  void Complete(uint32_t slot, const v1::MatmulResponse& response);

  // True once the client shrank the ring's segment under the daemon: the
  // mapping reads zeros from then on and nothing more is written to it
  // (Complete does nothing). The status the stream ends with says so.
  bool faulted() const { return mapping_->faulted(); }
  absl::Status FaultedStatus() const;

  // The client ended the AttachRing stream: its queued requests are
  // dropped as cancelled.
  void MarkClientGone() { client_gone_.store(true); }
  bool client_gone() const { return client_gone_.load(); }

 private:
  AttachedRing(std::unique_ptr<ShmRegion> mapping, uint32_t slot_count,
               uint32_t slot_bytes);

  ring::SlotHeader* SlotAt(uint32_t index) const {
    return protocol_.view().slot(index);
  }
  // Take's claim of one published slot: true when it is in kSubmitted and
  // no product of it is running or being answered.
  bool TakeIfSubmitted(uint32_t slot);

  const std::unique_ptr<ShmRegion> mapping_;
  // Over mapping_; holds our own queue head, never read from the mapping.
  ring::DaemonProtocol protocol_;
  std::string scratch_;  // ReadRequest's copy of a request, reused
  std::atomic<bool> client_gone_{false};
  // Who holds each slot on the daemon's side, so that a slot published
  // twice runs once. Complete marks kDone in the slot while it still holds
  // it (kAnswering), then lets go: a second publication seen in between
  // cannot take the slot again, and a client's next submission of it,
  // which may follow kDone at once, waits out those few stores instead of
  // being skipped.
  enum Holder : uint8_t { kIdle, kTaken, kAnswering };
  const std::unique_ptr<std::atomic<uint8_t>[]> holder_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_RING_ATTACHED_RING_H_
