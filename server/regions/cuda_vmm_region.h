// Regions over another process's cuMemCreate allocations (what cudaMallocAsync
// pools and PyTorch's expandable segments use), exported by the client as
// POSIX file descriptors. The daemon takes a copy of each descriptor with
// pidfd_open + pidfd_getfd, imports the allocations and maps them back to
// back into one address range of its own, so a tensor that spans several
// chunks of an expandable segment is one contiguous region here too.
#ifndef MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_
#define MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cuda_driver_api.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/cuda_vmm_layout.h"
#include "server/regions/region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// Opens a region on `device` for `peer`: INVALID_ARGUMENT as
// ParseCudaVmmRegion, or for a chunk size that is not a multiple of the
// device's allocation granularity; PERMISSION_DENIED as CheckCudaVmmCaller
// (checked before any CUDA call); NOT_FOUND when the process does not exist;
// FAILED_PRECONDITION, naming the fix, when the kernel refuses to hand over
// a descriptor (ptrace rules, other PID namespace) or CUDA cannot import or
// map it. Nothing stays imported or mapped after a failure. `driver` must
// outlive the region.
absl::StatusOr<std::unique_ptr<Region>> OpenCudaVmmRegion(
    const v1::CudaVmmRegion& vmm, int device, const CudaDriverApi& driver,
    const PeerCredentials& peer);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_
