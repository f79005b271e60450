// A registered piece of memory that requests read operands from and write
// results to in place. Subclasses own the underlying handle (an mmap, an
// opened CUDA IPC handle, an imported VMM allocation) and release it in
// their destructor; the RegionRegistry shares ownership with in-flight
// requests, so a region outlives its unregistration until they finish.
#ifndef MATMUL_SERVER_REGIONS_REGION_H_
#define MATMUL_SERVER_REGIONS_REGION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace matmul {

class Region {
 public:
  virtual ~Region() = default;

  // "shm", "cuda_ipc" or "cuda_vmm"; "shared" for one opened from
  // another session's share (RegionRegistry::OpenShared).
  virtual std::string kind() const = 0;
  virtual int64_t size_bytes() const = 0;
  // The region's first byte as the host addresses it; null when the host
  // cannot (device memory).
  virtual void* host_data() const = 0;
  // The region's first byte as the backend's GPU addresses it; null when
  // the GPU cannot (a shared-memory region on the CPU backend).
  virtual void* device_data() const = 0;

  // Where the region's bytes live: two regions over the same memory (one
  // shm object registered twice, say) name the same `object`, and `offset`
  // places the region's first byte in it. Overlap checks compare these,
  // not addresses, which differ between two mappings of one object.
  struct Placement {
    std::string object;
    uint64_t offset = 0;
  };
  virtual Placement placement() const = 0;

  // The CUDA device whose memory this is (products that use it run there);
  // -1 for host memory, which any device of the daemon can reach.
  virtual int cuda_device() const { return -1; }

  // False for a region another session shared with this one: products
  // read A and B from it but never write C to it.
  virtual bool writable() const { return true; }

  // OK while the memory is still what the client registered; otherwise
  // (FAILED_PRECONDITION, saying why) every product that used it since is
  // suspect and the region serves no more.
  virtual absl::Status CheckIntact() const { return absl::OkStatus(); }
};

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_REGION_H_
