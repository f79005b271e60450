// GPU memory that a client registers with the daemon as a zero-copy region:
// plain cudaMalloc memory, shared through a CUDA IPC handle (kind
// "cuda_ipc"), or a cuMemCreate allocation exported as a POSIX file
// descriptor (kind "cuda_vmm", what cudaMallocAsync pools and PyTorch's
// expandable segments use). RAII: freed (and for VMM unmapped, released and
// its fd closed) on destruction; unregister the region first.
#ifndef MATMUL_CLIENT_CUDA_MEMORY_H_
#define MATMUL_CLIENT_CUDA_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cuda_driver_api.h"
#include "common/unique_fd.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

class CudaMemory {
 public:
  enum class Kind { kIpc, kVmm };

  // At least `bytes` on `device` (VMM sizes round up to the allocation
  // granularity). FAILED_PRECONDITION without a usable GPU. For kVmm this
  // also lets any process ptrace-attach this one (PR_SET_PTRACER), which
  // the daemon's pidfd_getfd needs under Yama's ptrace_scope 1.
  static absl::StatusOr<std::unique_ptr<CudaMemory>> Create(Kind kind,
                                                            int64_t bytes,
                                                            int device = 0);
  ~CudaMemory();

  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  void* data() const { return data_; }
  int64_t size_bytes() const { return size_; }

  // The RegisterRegion request for this memory (session_id left empty).
  v1::RegisterRegionRequest RegisterRequest() const;

  // Synchronous copies between host bytes and the start of this memory.
  absl::Status CopyFromHost(absl::Span<const char> bytes);
  absl::Status CopyToHost(absl::Span<char> bytes) const;

 private:
  CudaMemory(Kind kind, int device) : kind_(kind), device_(device) {}

  const Kind kind_;
  const int device_;
  void* data_ = nullptr;
  int64_t size_ = 0;
  std::string ipc_handle_;  // kIpc only: the cudaIpcMemHandle_t bytes
  // kVmm only.
  absl::StatusOr<CudaDriverApi> driver_;
  CUmemGenericAllocationHandle handle_ = 0;
  bool mapped_ = false;
  UniqueFd fd_;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_CUDA_MEMORY_H_
