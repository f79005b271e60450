#include "server/regions/cuda_vmm_layout.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace matmul {

absl::StatusOr<CudaVmmLayout> ParseCudaVmmRegion(const v1::CudaVmmRegion& vmm) {
  if (vmm.pid() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_vmm region needs the client's pid (> 0); got ", vmm.pid()));
  }
  CudaVmmLayout layout;
  layout.pid = vmm.pid();
  layout.size_bytes = vmm.size_bytes();
  if (vmm.chunk_fds().empty()) {
    if (vmm.chunk_bytes() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_vmm chunk_bytes (", vmm.chunk_bytes(),
          ") needs chunk_fds; for one allocation send fd and size_bytes"));
    }
    if (vmm.fd() < 0 || vmm.size_bytes() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_vmm region of one allocation needs fd >= 0 and size_bytes > "
          "0; got fd ",
          vmm.fd(), ", size_bytes ", vmm.size_bytes()));
    }
    layout.one_allocation = true;
    layout.chunk_fds = {vmm.fd()};
    layout.chunk_bytes = vmm.size_bytes();
  } else {
    // proto3 cannot tell an unset fd from fd 0, so 0 is the only value that
    // does not contradict chunk_fds.
    if (vmm.fd() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_vmm region: set either fd (one allocation) or chunk_fds, not "
          "both; got fd ",
          vmm.fd(), " and ", vmm.chunk_fds_size(), " chunk_fds"));
    }
    if (vmm.chunk_fds_size() > kMaxCudaVmmChunks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_vmm region has ", vmm.chunk_fds_size(), " chunk_fds; at most ",
          kMaxCudaVmmChunks, " are accepted (use fewer, larger chunks)"));
    }
    for (int i = 0; i < vmm.chunk_fds_size(); ++i) {
      if (vmm.chunk_fds(i) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cuda_vmm chunk_fds[", i, "] is ", vmm.chunk_fds(i),
                         "; expected a file descriptor >= 0"));
      }
    }
    if (vmm.chunk_bytes() == 0) {
      return absl::InvalidArgumentError(
          "cuda_vmm chunk_fds need chunk_bytes > 0 (the size of each chunk's "
          "allocation)");
    }
    layout.chunk_fds.assign(vmm.chunk_fds().begin(), vmm.chunk_fds().end());
    layout.chunk_bytes = vmm.chunk_bytes();
  }
  const uint64_t chunks = layout.chunk_fds.size();
  uint64_t total = 0;
  if (__builtin_mul_overflow(chunks, layout.chunk_bytes, &total) ||
      total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_vmm region of ", chunks, " chunk(s) of ",
                     layout.chunk_bytes, " bytes overflows 63-bit sizes"));
  }
  // Every chunk must hold some of the region: one past the end would be
  // imported and mapped for nothing, and says the sizes are confused.
  if (layout.size_bytes == 0 || layout.size_bytes > total ||
      layout.size_bytes <= total - layout.chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_vmm size_bytes ", layout.size_bytes, " does not match ", chunks,
        " chunk(s) of ", layout.chunk_bytes, " bytes: expected more than ",
        total - layout.chunk_bytes, " and at most ", total));
  }
  return layout;
}

absl::Status CheckCudaVmmCaller(const CudaVmmLayout& layout,
                                const PeerCredentials& peer) {
  if (peer.pid <= 0) {
    return absl::PermissionDeniedError(
        "cuda_vmm regions need a caller the daemon can identify (a unix "
        "socket connection, whose peer process the kernel names)");
  }
  if (layout.pid != peer.pid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cuda_vmm region names pid ", layout.pid, " but the caller is pid ",
        peer.pid,
        " (as the daemon sees it); a region can take descriptors only "
        "from the calling process (a client in another PID namespace must "
        "share the daemon's: --pid=host or --pid=container:<daemon>)"));
  }
  return absl::OkStatus();
}

}  // namespace matmul
