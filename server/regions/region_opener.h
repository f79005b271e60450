// Opens the memory a RegisterRegion request describes as a Region the
// backend can use: shared memory everywhere (registered with CUDA on a GPU
// backend, so kernels read it in place); CUDA IPC and VMM allocations only
// on the CUDA backend. One per daemon: it owns the cache of opened IPC
// handles and must outlive every region it opened.
#ifndef MATMUL_SERVER_REGIONS_REGION_OPENER_H_
#define MATMUL_SERVER_REGIONS_REGION_OPENER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/cuda_region_opener.h"
#include "server/regions/region.h"
#include "server/regions/shm_region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

struct RegionOpenOptions {
  ShmAccess shm;
  int cuda_device = -1;  // the backend's device; -1 on the CPU backend
};

class RegionOpener {
 public:
  explicit RegionOpener(const RegionOpenOptions& options);

  RegionOpener(const RegionOpener&) = delete;
  RegionOpener& operator=(const RegionOpener&) = delete;

  // Opens the region for `peer`, the caller as the transport identifies
  // it: its uid must own a shm segment, its pid is the process whose
  // descriptors a cuda_vmm region takes (PERMISSION_DENIED otherwise).
  absl::StatusOr<std::unique_ptr<Region>> Open(
      const v1::RegisterRegionRequest& request, const PeerCredentials& peer);

 private:
  absl::StatusOr<std::unique_ptr<Region>> OpenShm(const v1::ShmRegion& shm,
                                                  const PeerCredentials& peer);

  const RegionOpenOptions options_;
  const std::unique_ptr<CudaRegionOpener> cuda_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_REGION_OPENER_H_
