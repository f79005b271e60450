// Keeps a client from killing the daemon through a shared mapping. A client
// that shrinks (ftruncate) a shm object the daemon maps makes every access
// past the new end raise SIGBUS, on whichever thread touches it: a poller,
// a worker, an OpenBLAS thread. A SigbusGuard registers one mapping with a
// process-wide SIGBUS handler; an access past the object's end (BUS_ADRERR)
// inside a registered range replaces the whole range with private zero
// pages (the faulting instruction then re-runs and succeeds) and marks the
// guard faulted, so that its owner can refuse whatever used the memory.
// Any other SIGBUS goes to the handler that was there before (by default:
// the process dies of SIGBUS, as it would have without us).
//
// The owner of a mapping creates the guard after mmap and destroys it
// before munmap, so that the handler never remaps an address range that
// has been given to something else.
#ifndef MATMUL_SERVER_REGIONS_SIGBUS_GUARD_H_
#define MATMUL_SERVER_REGIONS_SIGBUS_GUARD_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace matmul {

class SigbusGuard {
 public:
  // At most this many guards live at once (the kernel's default
  // vm.max_map_count allows about as many mappings per process).
  static constexpr size_t kCapacity = size_t{1} << 16;

  // Guards the mapping [start, start + length) (`start` page-aligned,
  // `length` > 0; rounded up to whole pages). Installs the handler on
  // first use. RESOURCE_EXHAUSTED when kCapacity guards are live;
  // INTERNAL when the handler cannot be installed.
  static absl::StatusOr<std::unique_ptr<SigbusGuard>> Create(void* start,
                                                             size_t length);

  // Unregisters; the mapping may be unmapped once this returns.
  ~SigbusGuard();

  SigbusGuard(const SigbusGuard&) = delete;
  SigbusGuard& operator=(const SigbusGuard&) = delete;

  // True once an access to the range faulted: its contents are zeros from
  // then on and no longer shared with the object. Never goes back to false.
  bool faulted() const;

 private:
  explicit SigbusGuard(size_t slot) : slot_(slot) {}

  const size_t slot_;  // this guard's entry in the handler's table
};

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_SIGBUS_GUARD_H_
