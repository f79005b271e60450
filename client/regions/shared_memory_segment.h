// matmul::SharedMemorySegment: a POSIX shared-memory object this process
// creates and maps, for operands the daemon reads (and results it writes)
// in place once the segment is registered as a region.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SharedMemorySegment> segment,
//                    SharedMemorySegment::Create(bytes));
//   std::memcpy(segment->data(), a, a_bytes);
//
// The object is created with O_CREAT | O_EXCL under a fresh random name
// that starts with the daemon's --shm_prefix, so it never reuses (or lets
// anyone hand us) an existing object. It is mode 0600: only the same user
// (the daemon runs as it, or as root) can open it.
//
// The name carries this process's pid and pid namespace
// (client/regions/segment_names.h): the first segment of a prefix that a
// process creates removes the names of that prefix that dead clients of this
// user left behind, killed before they could unlink them.
#ifndef MATMUL_CLIENT_REGIONS_SHARED_MEMORY_SEGMENT_H_
#define MATMUL_CLIENT_REGIONS_SHARED_MEMORY_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace matmul {

class SharedMemorySegment {
 public:
  // Creates, sizes (ftruncate, so it reads as zeros) and maps `size_bytes`
  // bytes. The name is `prefix` + "-<pid>-<pid namespace>-<16 random hex
  // digits>"; the first call for a prefix in this process first reaps that
  // prefix's orphaned names (ReapOrphanedSegmentsOnce, best effort).
  // INVALID_ARGUMENT for a size < 1 or a prefix the daemon would refuse
  // (characters other than [A-Za-z0-9._-]); the errno text otherwise.
  static absl::StatusOr<std::unique_ptr<SharedMemorySegment>> Create(
      int64_t size_bytes, absl::string_view prefix = "matmul");

  // Unmaps the segment and unlinks its name (unless Unlink ran already).
  // Memory the daemon still maps stays valid for it until it unmaps.
  ~SharedMemorySegment();

  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;

  // The shm_open name without the leading '/', as ShmRegion.name wants it.
  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  int64_t size_bytes() const { return size_; }
  absl::Span<char> bytes() const {
    return absl::Span<char>(data_, static_cast<size_t>(size_));
  }

  // Removes the name now, while the mapping (and any daemon-side mapping
  // made by RegisterRegion) stays valid. Call it once every registration of
  // the segment is done: the object then disappears with the last mapping
  // even if this process is killed before its destructor runs, and no other
  // local client can register it by name any more (names are listed in
  // /dev/shm, and the daemon opens any object of its prefix that it may).
  void Unlink();

 private:
  SharedMemorySegment(std::string name, char* data, int64_t size)
      : name_(std::move(name)), data_(data), size_(size) {}

  const std::string name_;
  char* const data_;
  const int64_t size_;
  bool linked_ = true;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_REGIONS_SHARED_MEMORY_SEGMENT_H_
