// The daemon's side of a request ring over a ring image the fuzzer writes:
// AttachedRing::Open checks the header, Take follows the submission queue,
// ReadRequest copies and parses slots, and Complete writes answers and the
// completion queue. Whatever the image holds, the daemon stays inside the
// mapping (an access past it is an AddressSanitizer report or a SIGSEGV
// past the object's pages), takes no slot twice and returns.
//
// Input: [slot count selector][slot size selector][flags][shortfall]
// [the ring image, zero-padded to the ring's size]. flags bit 0: write a
// valid header over the image (most inputs reach the slots); bit 1: make
// the object `shortfall` bytes short of the ring (Open must refuse it).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "matmul/v1/matmul.pb.h"
#include "server/ring/attached_ring.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr char kPrefix[] = "matmul-fuzz";

// Writes `image` as the shm object `name`, `bytes` long.
void WriteObject(const std::string& name, const std::string& image,
                 size_t bytes) {
  const int fd =
      shm_open(("/" + name).c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  const size_t n = std::min(bytes, image.size());
  FUZZ_CHECK(pwrite(fd, image.data(), n, 0) == static_cast<ssize_t>(n));
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  matmul::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace matmul;
  if (size < 4) return 0;
  const uint32_t slots = 1 + data[0] % 8;
  const uint32_t slot_bytes = ring::kMinSlotBytes + 64 * (data[1] % 57);
  const uint8_t flags = data[2];
  const size_t ring_bytes = ring::RingBytes(slots, slot_bytes);
  std::string image(reinterpret_cast<const char*>(data + 4), size - 4);
  image.resize(ring_bytes, '\0');
  if (flags & 1) {
    // RingHeader's first four fields.
    const uint32_t header[4] = {ring::kMagic, ring::kVersion, slots,
                                slot_bytes};
    static_assert(offsetof(ring::RingHeader, slot_bytes) == 12);
    std::memcpy(image.data(), header, sizeof(header));
  }
  const size_t shortfall = (flags & 2) ? 1 + data[3] : 0;
  const size_t object_bytes = ring_bytes - std::min(ring_bytes, shortfall);
  static const std::string name = absl::StrCat(kPrefix, "-ring-", getpid());
  WriteObject(name, image, object_bytes);

  v1::AttachRingRequest request;
  request.set_shm_name(name);
  request.set_slot_count(slots);
  request.set_slot_bytes(slot_bytes);
  absl::StatusOr<std::unique_ptr<AttachedRing>> ring = AttachedRing::Open(
      request, kPrefix,
      PeerCredentials{.pid = getpid(), .uid = getuid(), .gid = getgid()});
  shm_unlink(("/" + name).c_str());
  if (!ring.ok()) {
    FUZZ_CHECK(!ring.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(shortfall == 0 || object_bytes == ring_bytes);
  FUZZ_CHECK((*ring)->slot_count() == slots);
  (*ring)->WaitForDoorbell(absl::ZeroDuration());
  // Everything the queue offers, answered in order: an echo of the request
  // (an inline A of the slot's size does not fit, and takes the
  // RESOURCE_EXHAUSTED path), or the parse error.
  for (uint32_t round = 0; round < 2 * slots; ++round) {
    std::optional<uint32_t> slot = (*ring)->Take();
    if (!slot) break;
    FUZZ_CHECK(*slot < slots);
    v1::MatmulRequest parsed;
    absl::Duration timeout;
    v1::MatmulResponse response;
    const absl::Status status = (*ring)->ReadRequest(*slot, &parsed, &timeout);
    if (status.ok()) {
      FUZZ_CHECK(timeout >= absl::ZeroDuration());
      response.set_request_id(parsed.request_id());
      *response.mutable_c() = parsed.a();
    } else {
      response.set_status_code(static_cast<int32_t>(status.code()));
      response.set_status_message(std::string(status.message()));
    }
    (*ring)->Complete(*slot, response);
  }
  return 0;
}
