// What a cuda_vmm RegisterRegion request describes, and the checks made on
// it before any CUDA call: a malformed request or one naming another
// process is refused the same way on every backend, and by a daemon built
// without CUDA. cuda_vmm_region.h opens the region the layout describes.
#ifndef MATMUL_SERVER_REGIONS_CUDA_VMM_LAYOUT_H_
#define MATMUL_SERVER_REGIONS_CUDA_VMM_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "matmul/v1/matmul.pb.h"
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

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_VMM_LAYOUT_H_
