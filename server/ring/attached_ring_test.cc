// AttachedRing against rings laid out by hand: what it refuses to attach,
// and what it does with a client that writes nonsense into its ring.
#include "server/ring/attached_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// The caller as the daemon would see this process over a unix socket.
PeerCredentials ThisProcess() { return {getpid(), getuid(), getgid()}; }

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 1024;

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

TEST(AttachedRingTest, RefusesBadGeometryNamesAndHeaders) {
  HandMadeRing made;
  auto expect_refused = [&](v1::AttachRingRequest request,
                            absl::StatusCode code, const std::string& text) {
    auto ring = AttachedRing::Open(request, "matmul", ThisProcess());
    ASSERT_FALSE(ring.ok()) << request.ShortDebugString();
    EXPECT_EQ(ring.status().code(), code) << ring.status();
    EXPECT_THAT(std::string(ring.status().message()), HasSubstr(text));
  };
  v1::AttachRingRequest request = made.Request();
  request.set_slot_count(0);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_count");
  request.set_slot_count(ring::kMaxSlots + 1);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_count");
  request = made.Request();
  request.set_slot_bytes(1000);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_bytes");
  request.set_slot_bytes(256);
  expect_refused(request, absl::StatusCode::kInvalidArgument, "slot_bytes");
  request = made.Request();
  request.set_shm_name("../etc/passwd");
  expect_refused(request, absl::StatusCode::kInvalidArgument, "ring");
  request.set_shm_name("matmul-no-such-ring");
  expect_refused(request, absl::StatusCode::kNotFound, "ring");
  request = made.Request();
  request.set_slot_count(kSlots * 2);  // larger than the object
  expect_refused(request, absl::StatusCode::kInvalidArgument, "ring");
  request = made.Request();
  request.set_slot_count(kSlots / 2);  // fits, but the header says 4
  expect_refused(request, absl::StatusCode::kInvalidArgument, "header");
  made.header()->magic = 0;
  expect_refused(made.Request(), absl::StatusCode::kInvalidArgument, "magic");
}

TEST(AttachedRingTest, SkipsBadEntriesAndReportsBadPayloads) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_FALSE((*ring)->Take().has_value());

  made.Submit(kSlots + 7);  // out of range: skipped
  made.Submit(1);           // not in kSubmitted: skipped
  ring::SlotHeader* garbage = made.Slot(2);
  std::memset(ring::Payload(garbage), 0xff, 40);
  garbage->request_bytes = 40;
  garbage->state.store(ring::kSubmitted);
  made.Submit(2);
  ring::SlotHeader* too_long = made.Slot(3);
  too_long->request_bytes = kSlotBytes;  // more than the payload holds
  too_long->state.store(ring::kSubmitted);
  made.Submit(3);

  std::optional<uint32_t> taken = (*ring)->Take();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, 2u);
  v1::MatmulRequest request;
  absl::Duration timeout;
  absl::Status read = (*ring)->ReadRequest(2, &request, &timeout);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.message()), HasSubstr("MatmulRequest"));

  taken = (*ring)->Take();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, 3u);
  read = (*ring)->ReadRequest(3, &request, &timeout);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.message()), HasSubstr("request_bytes"));
  EXPECT_FALSE((*ring)->Take().has_value());
}

TEST(AttachedRingTest, ASlotRunsOnceUntilCompleted) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  made.Slot(1)->state.store(ring::kSubmitted);
  made.Submit(1);
  made.Submit(1);  // published twice
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(1));
  EXPECT_FALSE((*ring)->Take().has_value());
  (*ring)->Complete(1, v1::MatmulResponse());
  made.Slot(1)->state.store(ring::kSubmitted);  // the client reuses it
  made.Submit(1);
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(1));

  // A queue full of bad entries: all skipped, then the ring goes on.
  for (uint32_t i = 0; i < kSlots; ++i) made.Submit(kSlots + 1);
  EXPECT_FALSE((*ring)->Take().has_value());
  made.Slot(3)->state.store(ring::kSubmitted);
  made.Submit(3);
  EXPECT_EQ((*ring)->Take(), std::optional<uint32_t>(3));
}

TEST(AttachedRingTest, CompleteWritesTheResponseOrSaysItDoesNotFit) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  v1::MatmulResponse response;
  response.set_request_id(42);
  response.set_kernel("cublaslt");
  (*ring)->Complete(0, response);
  ring::SlotHeader* slot = made.Slot(0);
  EXPECT_EQ(slot->state.load(), ring::kDone);
  v1::MatmulResponse read;
  ASSERT_TRUE(read.ParseFromArray(ring::Payload(slot),
                                  static_cast<int>(slot->response_bytes)));
  EXPECT_EQ(read.request_id(), 42u);
  EXPECT_EQ(read.kernel(), "cublaslt");

  // A `notify` slot is announced in the completion queue.
  EXPECT_EQ(made.header()->complete_tail.load(), 0u);
  made.Slot(2)->notify = 1;
  (*ring)->Complete(2, response);
  EXPECT_EQ(made.header()->complete_tail.load(), 1u);
  EXPECT_EQ(made.header()->answers.load(), 1u);
  EXPECT_EQ(made.CompleteEntry(0).slot, 2u);
  EXPECT_EQ(made.CompleteEntry(0).sequence.load(), 1u);

  response.set_status_message(std::string(kSlotBytes, 'x'));
  (*ring)->Complete(1, response);
  slot = made.Slot(1);
  ASSERT_TRUE(read.ParseFromArray(ring::Payload(slot),
                                  static_cast<int>(slot->response_bytes)));
  EXPECT_EQ(read.request_id(), 42u);
  EXPECT_EQ(read.status_code(),
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(read.status_message(), HasSubstr("does not fit"));
}

TEST(AttachedRingTest, ATruncatedRingFaultsInsteadOfKillingTheDaemon) {
  HandMadeRing made;
  auto ring = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  ASSERT_TRUE(ring.ok()) << ring.status();
  made.Slot(1)->state.store(ring::kSubmitted);
  made.Submit(1);
  EXPECT_FALSE((*ring)->faulted());
  made.Truncate();
  // Every access the poller and the completions make survives; the ring
  // reads as empty and says why it is dead.
  EXPECT_FALSE((*ring)->Take().has_value());
  EXPECT_TRUE((*ring)->faulted());
  (*ring)->WaitForDoorbell(absl::Milliseconds(1));
  v1::MatmulResponse response;
  response.set_request_id(5);
  (*ring)->Complete(1, response);
  const absl::Status status = (*ring)->FaultedStatus();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("truncated or otherwise changed while attached"));
  // A truncated object is refused up front.
  auto again = AttachedRing::Open(made.Request(), "matmul", ThisProcess());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument)
      << again.status();
}

TEST(AttachedRingTest, ARingOfAnotherUserIsRefused) {
  HandMadeRing made;
  PeerCredentials stranger = ThisProcess();
  stranger.uid = getuid() == 65534 ? 65533 : 65534;
  auto ring = AttachedRing::Open(made.Request(), "matmul", stranger);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kPermissionDenied)
      << ring.status();
  EXPECT_THAT(std::string(ring.status().message()),
              HasSubstr(absl::StrCat("belongs to uid ", getuid())));
  EXPECT_TRUE(AttachedRing::Open(made.Request(), "matmul", stranger,
                                 /*allow_other_shm_owners=*/true)
                  .ok());
}

}  // namespace
}  // namespace matmul
