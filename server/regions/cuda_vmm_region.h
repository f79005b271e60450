// Regions over another process's cuMemCreate allocation (what cudaMallocAsync
// pools and PyTorch's expandable segments use), exported by the client as a
// POSIX file descriptor. The daemon takes a copy of that descriptor with
// pidfd_open + pidfd_getfd, imports the allocation and maps it into its own
// address space.
#ifndef MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_
#define MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/cuda_driver_api.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/region.h"

namespace matmul {

// NOT_FOUND when the process does not exist; FAILED_PRECONDITION, naming the
// fix, when the kernel refuses to hand over the descriptor (ptrace rules,
// other PID namespace) or CUDA cannot import or map it. `driver` must
// outlive the region.
absl::StatusOr<std::unique_ptr<Region>> OpenCudaVmmRegion(
    const v1::CudaVmmRegion& vmm, int device, const CudaDriverApi& driver);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_VMM_REGION_H_
