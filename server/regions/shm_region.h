// A POSIX shared-memory object mapped read-write into the daemon. Names are
// confined to one prefix and a plain character set, so a client cannot
// reach any other shm object (or, through '/', any file).
#ifndef MATMUL_SERVER_REGIONS_SHM_REGION_H_
#define MATMUL_SERVER_REGIONS_SHM_REGION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/regions/region.h"

namespace matmul {

class ShmRegion final : public Region {
 public:
  // Opens /dev/shm/<name>, checks [offset, offset + size) against its size
  // (fstat) and maps that range. INVALID_ARGUMENT for a bad name or range,
  // NOT_FOUND when no such object exists, PERMISSION_DENIED when the daemon
  // may not open it.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(
      const std::string& name, const std::string& required_prefix,
      uint64_t offset_bytes, uint64_t size_bytes);
  ~ShmRegion() override;

  std::string kind() const override { return "shm"; }
  int64_t size_bytes() const override { return size_; }
  void* host_data() const override { return data_; }
  // The CPU backend reads host memory directly; GPU backends register the
  // mapping (see device_data of the registered wrapper).
  void* device_data() const override { return nullptr; }
  Placement placement() const override { return placement_; }

 private:
  ShmRegion(void* mapping, size_t mapping_bytes, void* data, int64_t size,
            Placement placement)
      : mapping_(mapping),
        mapping_bytes_(mapping_bytes),
        data_(data),
        size_(size),
        placement_(std::move(placement)) {}

  void* const mapping_;  // page-aligned start of the mmap
  const size_t mapping_bytes_;
  void* const data_;  // mapping_ + (offset within the page)
  const int64_t size_;
  const Placement placement_;  // the object's device and inode
};

// Checks an shm name: non-empty, starts with `prefix`, at most 200 bytes of
// [A-Za-z0-9._-], and not "." or "..".
absl::Status CheckShmName(const std::string& name, const std::string& prefix);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_SHM_REGION_H_
