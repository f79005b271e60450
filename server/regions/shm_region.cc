#include "server/regions/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace matmul {

absl::Status CheckShmName(const std::string& name, const std::string& prefix) {
  if (name.empty() || name.size() > 200 || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("shm name '", name, "' is empty, too long or a dot name"));
  }
  for (char ch : name) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                       ch == '-';
    if (!plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shm name '", name,
          "' may hold only letters, digits, '.', '_' and '-' (no '/'; give "
          "the name without the leading slash)"));
    }
  }
  if (!absl::StartsWith(name, prefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm name '", name, "' must start with '", prefix,
                     "' (the daemon's --shm_prefix)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Open(
    const std::string& name, const std::string& required_prefix,
    uint64_t offset_bytes, uint64_t size_bytes, const PeerCredentials& peer,
    bool allow_other_owners) {
  RETURN_IF_ERROR(CheckShmName(name, required_prefix));
  // Both fit in int64_t when their sum does.
  int64_t end;
  if (size_bytes == 0 || offset_bytes > static_cast<uint64_t>(INT64_MAX) ||
      size_bytes > static_cast<uint64_t>(INT64_MAX) ||
      AddOverflows(static_cast<int64_t>(offset_bytes),
                   static_cast<int64_t>(size_bytes), &end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm region: offset ", offset_bytes, " + size ",
                     size_bytes, " is empty or overflows"));
  }
  UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    const int error = errno;
    const std::string message =
        absl::StrCat("shm_open('/", name, "'): ", strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat(message, " (the daemon runs as uid ", getuid(), ")"));
    }
    return absl::FailedPreconditionError(message);
  }
  // Checked on the object just opened, so that it cannot be swapped for
  // another between the check and the mmap.
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("fstat of shm '", name, "': ", strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm '", name, "' is not a plain shared-memory object"));
  }
  if (!allow_other_owners && peer.uid != 0 && info.st_uid != peer.uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shm '", name, "' belongs to uid ", info.st_uid,
        " but the caller runs as uid ", peer.uid,
        "; the daemon uses a segment only for its owner (create it as the "
        "calling user)"));
  }
  if (end > info.st_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm region [", offset_bytes, ", ", end, ") reaches past the end of '",
        name, "', which has ", info.st_size, " bytes"));
  }
  // mmap offsets must be page-aligned: map from the page that holds the
  // region's first byte.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_offset = offset_bytes / page * page;
  const size_t map_bytes =
      static_cast<size_t>(static_cast<uint64_t>(end) - map_offset);
  void* mapping = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd.get(), static_cast<off_t>(map_offset));
  if (mapping == MAP_FAILED) {
    return absl::FailedPreconditionError(
        absl::StrCat("mmap of shm '", name, "': ", strerror(errno)));
  }
  // The mapping keeps the object alive once `fd` closes.
  absl::StatusOr<std::unique_ptr<SigbusGuard>> guard =
      SigbusGuard::Create(mapping, map_bytes);
  if (!guard.ok()) {
    munmap(mapping, map_bytes);
    return guard.status();
  }
  void* data = static_cast<char*>(mapping) + (offset_bytes - map_offset);
  Placement placement{absl::StrCat("shm:", info.st_dev, ":", info.st_ino),
                      offset_bytes};
  return std::unique_ptr<ShmRegion>(new ShmRegion(
      name, mapping, map_bytes, data, static_cast<int64_t>(size_bytes),
      std::move(placement), *std::move(guard)));
}

ShmRegion::~ShmRegion() {
  // Unregistered first: once unmapped, the range may be mapped again for
  // something the fault handler must never replace.
  guard_.reset();
  munmap(mapping_, mapping_bytes_);
}

absl::Status ShmRegion::CheckIntact() const {
  // A GPU reads the pinned pages of a registered mapping and never faults
  // here, and a product may not touch every page: touch the region's last
  // byte, which a segment cut anywhere short of the region's end no longer
  // has (the guard turns that fault into its flag).
  (void)*(static_cast<const volatile char*>(data_) + size_ - 1);
  if (!guard_->faulted()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "shm '", name_,
      "' was truncated or otherwise changed while in use (an access past "
      "its end faulted); results that used it are lost: unregister the "
      "region and register it again"));
}

}  // namespace matmul
