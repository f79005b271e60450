// GPU memory that a client registers with the daemon as a zero-copy region:
// plain cudaMalloc memory, shared through a CUDA IPC handle (kind
// "cuda_ipc"), or a cuMemCreate allocation exported as a POSIX file
// descriptor (kind "cuda_vmm", what cudaMallocAsync pools and PyTorch's
// expandable segments use). RAII: freed (and for VMM unmapped, released and
// its fd closed) on destruction; unregister the region first.
#ifndef MATMUL_CLIENT_REGIONS_CUDA_MEMORY_H_
#define MATMUL_CLIENT_REGIONS_CUDA_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

class CudaMemory {
 public:
  enum class Kind { kIpc, kVmm };

  // At least `bytes` on `device` (VMM sizes round up to the allocation
  // granularity). FAILED_PRECONDITION without a usable GPU, or in a build
  // without CUDA (MATMUL_CUDA=OFF links cuda_memory_unavailable.cc). For
  // kVmm this also lets any process ptrace-attach this one
  // (PR_SET_PTRACER), which the daemon's pidfd_getfd needs under Yama's
  // ptrace_scope 1.
  static absl::StatusOr<std::unique_ptr<CudaMemory>> Create(Kind kind,
                                                            int64_t bytes,
                                                            int device = 0);
  CudaMemory() = default;
  virtual ~CudaMemory() = default;

  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  virtual void* data() const = 0;
  virtual int64_t size_bytes() const = 0;

  // The RegisterRegion request for this memory (session_id left empty).
  virtual v1::RegisterRegionRequest RegisterRequest() const = 0;

  // Synchronous copies between host bytes and the start of this memory.
  virtual absl::Status CopyFromHost(absl::Span<const char> bytes) = 0;
  virtual absl::Status CopyToHost(absl::Span<char> bytes) const = 0;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_REGIONS_CUDA_MEMORY_H_
