// A request ring seen the way a misbehaving client sees it: raw access to
// the shared mapping of a ring this process attached (through
// RequestRing), to write slots and queue entries that the client library
// never would. The ring's object is unlinked once attached; the mapping is
// found by its name in /proc/self/maps (no privilege needed: it is this
// process's own memory).
//
// Each call is one of the ring codec's low-level steps (ring::RingView,
// common/ring/ring_view.h), or a few in a row, with whatever values the
// caller gives. The daemon keeps its own queue head and checks every
// entry, so what is written here can only lose the writer's own requests.
// Positions are reserved from submit_tail like RequestRing's, so the two
// can share a ring as long as the slots written here are not ones
// RequestRing uses.
#ifndef MATMUL_TESTS_SOAK_RAW_RING_H_
#define MATMUL_TESTS_SOAK_RAW_RING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/ring/ring_view.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul::soak {

// Where this process maps the shm object /dev/shm/<name>, from
// /proc/self/maps: its first byte and length. NOT_FOUND when it does not.
struct Mapping {
  char* data = nullptr;
  size_t bytes = 0;
};
absl::StatusOr<Mapping> FindMapping(const std::string& shm_name);

class RawRing {
 public:
  // The ring of `slot_count` slots of `slot_bytes` mapped at `mapping`;
  // FAILED_PRECONDITION when the mapping is smaller than the layout.
  static absl::StatusOr<RawRing> Open(Mapping mapping, uint32_t slot_count,
                                      uint32_t slot_bytes);

  uint32_t slot_count() const { return view_.slot_count(); }
  uint32_t payload_bytes() const {
    return static_cast<uint32_t>(view_.payload_bytes());
  }
  ring::RingHeader* header() const { return view_.header(); }
  ring::SlotHeader* slot(uint32_t index) const { return view_.slot(index); }

  // Writes `payload` (cut to the slot) into the slot with the fields
  // given, whatever they say, then stores `state` (release).
  void WriteSlot(uint32_t index, absl::string_view payload,
                 uint32_t request_bytes, int64_t timeout_ns, bool notify,
                 uint32_t state = ring::kSubmitted);
  // A well-formed submission of `request` into the slot; false (nothing
  // written) when it does not fit.
  bool WriteRequest(uint32_t index, const v1::MatmulRequest& request,
                    int64_t timeout_ns, bool notify);

  // Reserves `count` queue positions (as RequestRing does); the first.
  uint64_t Reserve(uint64_t count = 1);
  // Writes the entry of `position` (its slot, then its sequence with
  // release) and rings the doorbell. The right sequence is position + 1;
  // anything else leaves the entry unpublished.
  void Publish(uint64_t position, uint32_t slot, uint64_t sequence);
  void Publish(uint64_t position, uint32_t slot) {
    Publish(position, slot, position + 1);
  }
  void RingDoorbell() { view_.RingDoorbell(); }

  // Polls until the slot is kDone or `deadline` passes (false).
  bool WaitDone(uint32_t index, absl::Time deadline) const;
  // The answer in a kDone slot, and its in-band status; INTERNAL when the
  // bytes there are not a MatmulResponse.
  absl::Status ReadAnswer(uint32_t index, v1::MatmulResponse* response) const;
  // Completion queue entries published in [from, to) that name `index`
  // (positions older than a lap are overwritten: keep to - from within
  // slot_count).
  int CompletionsOf(uint32_t index, uint64_t from, uint64_t to) const;

 private:
  explicit RawRing(ring::RingView view) : view_(view) {}

  ring::RingView view_;
};

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_RAW_RING_H_
