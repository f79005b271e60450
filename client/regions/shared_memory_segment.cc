#include "client/regions/shared_memory_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "client/regions/segment_names.h"
#include "common/unique_fd.h"

namespace matmul {
namespace {

bool PlainName(absl::string_view text) {
  for (char ch : text) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                       ch == '-';
    if (!plain) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemorySegment>>
SharedMemorySegment::Create(int64_t size_bytes, absl::string_view prefix) {
  if (size_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory segment of ", size_bytes,
                     " bytes; expected at least 1"));
  }
  if (prefix.empty() || !PlainName(prefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm prefix '", prefix,
                     "' must be non-empty and hold only [A-Za-z0-9._-]"));
  }
  // Best effort: a /dev/shm this process cannot read keeps its leftovers,
  // and the segment is made all the same.
  ReapOrphanedSegmentsOnce(prefix).IgnoreError();
  std::string name;
  int fd = -1;
  // A collision of 64 random bits is only conceivable, but retrying costs
  // nothing.
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    name = NewSegmentName(prefix);
    fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                  0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("shm_open('/", name, "')"));
  }
  const UniqueFd owned(fd);  // the mapping keeps the object alive
  if (ftruncate(fd, static_cast<off_t>(size_bytes)) != 0) {
    const int error = errno;
    shm_unlink(("/" + name).c_str());
    return absl::ErrnoToStatus(
        error, absl::StrCat("ftruncate of shm '", name, "' to ", size_bytes,
                            " bytes"));
  }
  void* data = mmap(nullptr, static_cast<size_t>(size_bytes),
                    PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    shm_unlink(("/" + name).c_str());
    return absl::ErrnoToStatus(error, absl::StrCat("mmap of shm '", name, "'"));
  }
  // The constructor is private, so std::make_unique cannot reach it.
  return absl::WrapUnique(new SharedMemorySegment(
      std::move(name), static_cast<char*>(data), size_bytes));
}

SharedMemorySegment::~SharedMemorySegment() {
  munmap(data_, static_cast<size_t>(size_));
  Unlink();
}

void SharedMemorySegment::Unlink() {
  if (!linked_) return;
  shm_unlink(("/" + name_).c_str());
  linked_ = false;
}

}  // namespace matmul
