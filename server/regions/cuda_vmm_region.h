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
#include "server/regions/region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// The most chunks one region may have. PyTorch's large-pool chunks are
// 20 MiB and its segments reserve 9/8 of the GPU's memory, so a 141 GiB H200
// needs at most ~8k; the bound keeps one request from holding the daemon in
// a long import loop.
inline constexpr int kMaxCudaVmmChunks = 1 << 16;

// What a CudaVmmRegion request asks for, in one shape for both of its forms
// (one allocation is one chunk of `size_bytes`).
struct CudaVmmLayout {
  int32_t pid = 0;
  std::vector<int32_t> chunk_fds;  // in the client's process, address order
  uint64_t chunk_bytes = 0;        // each chunk's allocation size
  uint64_t size_bytes = 0;         // the region: <= chunks * chunk_bytes
  bool one_allocation = false;     // sent as fd + size_bytes (error wording)
};

// Checks a request without touching CUDA, so a malformed one is refused
// (INVALID_ARGUMENT, saying what was expected) on any backend: pid > 0;
// either `fd` >= 0 with size_bytes > 0, or 1..kMaxCudaVmmChunks `chunk_fds`
// (each >= 0, `fd` left 0) with chunk_bytes > 0 and size_bytes in
// ((n - 1) * chunk_bytes, n * chunk_bytes]; the mapped total must fit in
// int64 without overflow. Granularity needs the device: OpenCudaVmmRegion
// checks it.
absl::StatusOr<CudaVmmLayout> ParseCudaVmmRegion(const v1::CudaVmmRegion& vmm);

// PERMISSION_DENIED unless the layout's pid is `peer`'s (the caller as the
// transport identifies it, never as the request describes itself): the
// daemon takes descriptors out of the calling process only. Touches no
// CUDA API.
absl::Status CheckCudaVmmCaller(const CudaVmmLayout& layout,
                                const PeerCredentials& peer);

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
