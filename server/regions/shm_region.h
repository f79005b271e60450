// A POSIX shared-memory object mapped read-write into the daemon. Names are
// confined to one prefix and a plain character set, so a client cannot
// reach any other shm object (or, through '/', any file); an object is used
// only for the user who owns it, so the daemon's own rights reach nothing
// its caller could not; and the mapping is guarded (SigbusGuard), so a
// client that shrinks the object cannot kill the daemon.
#ifndef MATMUL_SERVER_REGIONS_SHM_REGION_H_
#define MATMUL_SERVER_REGIONS_SHM_REGION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/regions/region.h"
#include "server/regions/sigbus_guard.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// Which shm objects the daemon serves, regions and rings alike
// (--shm_prefix, --allow_other_shm_owners).
struct ShmAccess {
  // Names must start with it.
  std::string prefix = "matmul";
  // Objects another user owns are served too (otherwise only their owner,
  // or a root caller, may use them): only where the operator vouches for
  // every local user.
  bool allow_other_owners = false;
};

class ShmRegion final : public Region {
 public:
  // Opens /dev/shm/<name>, checks (fstat of the opened object, before
  // mapping) that `peer` owns it and that [offset, offset + size) lies
  // inside it, and maps that range. INVALID_ARGUMENT for a bad name or
  // range or an object that is not a plain file, NOT_FOUND when no such
  // object exists, PERMISSION_DENIED when the daemon may not open it or
  // another user owns it (a root peer may use any; `allow_other_owners`
  // lifts the check).
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(
      const std::string& name, const std::string& required_prefix,
      uint64_t offset_bytes, uint64_t size_bytes, const PeerCredentials& peer,
      bool allow_other_owners = false);
  ~ShmRegion() override;

  std::string kind() const override { return "shm"; }
  int64_t size_bytes() const override { return size_; }
  void* host_data() const override { return data_; }
  // The CPU backend reads host memory directly; GPU backends register the
  // mapping (see device_data of the registered wrapper).
  void* device_data() const override { return nullptr; }
  Placement placement() const override { return placement_; }
  // FAILED_PRECONDITION once an access faulted because the object shrank:
  // the mapping reads zeros from then on, and the region must be
  // registered again.
  absl::Status CheckIntact() const override;
  bool faulted() const { return guard_->faulted(); }

 private:
  ShmRegion(std::string name, void* mapping, size_t mapping_bytes, void* data,
            int64_t size, Placement placement,
            std::unique_ptr<SigbusGuard> guard)
      : name_(std::move(name)),
        mapping_(mapping),
        mapping_bytes_(mapping_bytes),
        data_(data),
        size_(size),
        placement_(std::move(placement)),
        guard_(std::move(guard)) {}

  const std::string name_;
  void* const mapping_;  // page-aligned start of the mmap
  const size_t mapping_bytes_;
  void* const data_;  // mapping_ + (offset within the page)
  const int64_t size_;
  const Placement placement_;  // the object's device and inode
  // Released before the mapping is unmapped (see the destructor).
  std::unique_ptr<SigbusGuard> guard_;
};

// Checks an shm name: non-empty, starts with `prefix`, at most 200 bytes of
// [A-Za-z0-9._-], and not "." or "..".
absl::Status CheckShmName(const std::string& name, const std::string& prefix);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_SHM_REGION_H_
