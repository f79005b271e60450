// A request ring for the ring's unit tests: the shm object with a valid
// header, and a client that follows the ring's protocol
// (ring::ClientProtocol, as RequestRing does) on a mapping of it, without
// RequestRing's spinning, so that every answer goes through the sleeping
// protocol.
#ifndef MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_
#define MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/ring/client_protocol.h"
#include "common/ring/ring_view.h"
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
    view().WriteRingHeader();
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

  ring::RingView view() const { return {base_, kSlots, kSlotBytes}; }
  ring::SlotHeader* Slot(uint32_t index) { return view().slot(index); }

  // Publishes `slot` in the queue as a client would (without touching the
  // slot or ringing the doorbell).
  void Submit(uint32_t slot) {
    view().PublishSubmission(view().ReserveSubmissions(), slot);
  }

  ring::RingHeader* header() { return view().header(); }
  const std::string& name() const { return name_; }
  void* base() const { return base_; }
  ring::QueueEntry& CompleteEntry(uint32_t position) {
    return view().complete_entry(position);
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

// The client's side of the ring protocol (ring::ClientProtocol, as
// RequestRing runs it) on a mapping of the ring.
class HandMadeClient {
 public:
  explicit HandMadeClient(void* base)
      : protocol_(ring::RingView(base, kSlots, kSlotBytes)) {}

  // Writes a request with `request_id` into `index` and publishes it.
  void Submit(uint32_t index, uint64_t request_id, bool notify) {
    v1::MatmulRequest request;
    request.set_request_id(request_id);
    Submit(index, request, notify, absl::ZeroDuration());
  }

  // Writes `request` into `index` with `timeout` (0: none) and publishes it.
  void Submit(uint32_t index, const v1::MatmulRequest& request, bool notify,
              absl::Duration timeout) {
    const auto bytes = static_cast<uint32_t>(request.ByteSizeLong());
    request.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(protocol_.view().payload(index)));
    protocol_.Submit(index, bytes, absl::ToInt64Nanoseconds(timeout), notify);
  }

  // Sleeps (no spinning, so that every answer goes through the sleeping
  // protocol) until `index` is done; the answer, and the slot is free.
  v1::MatmulResponse WaitForResponse(uint32_t index) {
    while (!protocol_.Done(index)) protocol_.SleepUntilDone(index, kLostWakeup);
    return Response(index);
  }

  // WaitForResponse's request id.
  uint64_t WaitForAnswer(uint32_t index) {
    return WaitForResponse(index).request_id();
  }

  // The next slot announced in the completion queue, sleeping for it.
  uint32_t NextCompletion() {
    for (;;) {
      if (std::optional<uint32_t> slot = protocol_.TakeCompletion()) {
        return *slot;
      }
      protocol_.SleepUntilCompletion(kLostWakeup);
    }
  }

  // The request id of the answer in done slot `index`, which is then free.
  uint64_t Answer(uint32_t index) { return Response(index).request_id(); }

  // The answer in done slot `index`, which is then free.
  v1::MatmulResponse Response(uint32_t index) {
    const ring::RingView& view = protocol_.view();
    const uint32_t bytes = view.ResponseBytes(index);
    v1::MatmulResponse response;
    EXPECT_TRUE(
        bytes <= view.payload_bytes() &&
        response.ParseFromArray(view.payload(index), static_cast<int>(bytes)));
    protocol_.Free(index);
    return response;
  }

 private:
  ring::ClientProtocol protocol_;  // NextCompletion on one thread only
};

}  // namespace matmul

#endif  // MATMUL_SERVER_RING_TESTING_HAND_MADE_RING_H_
