#include "server/regions/cuda_ipc_region.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/regions/cuda_region_device.h"

namespace matmul {
namespace {

class CudaIpcRegion final : public Region {
 public:
  CudaIpcRegion(std::shared_ptr<void> mapping, int64_t size, int device)
      : mapping_(std::move(mapping)), size_(size), device_(device) {}
  std::string kind() const override { return "cuda_ipc"; }
  int64_t size_bytes() const override { return size_; }
  void* host_data() const override { return nullptr; }
  void* device_data() const override { return mapping_.get(); }
  // Every registration of one handle shares one mapping: its address
  // identifies the memory.
  Placement placement() const override {
    return {"cuda", reinterpret_cast<uintptr_t>(mapping_.get())};
  }
  int cuda_device() const override { return device_; }

 private:
  std::shared_ptr<void> mapping_;
  const int64_t size_;
  const int device_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<void>> CudaIpcOpener::OpenHandle(
    const std::string& handle) {
  if (auto it = opened_.find(handle); it != opened_.end()) {
    if (std::shared_ptr<void> mapping = it->second.lock()) return mapping;
  }
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  void* base = nullptr;
  cudaError_t error =
      cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaIpcOpenMemHandle failed: ", cudaGetErrorName(error), " (",
        cudaGetErrorString(error),
        "). Likely causes: the exporting process runs in another PID "
        "namespace (run both containers with --pid=host or "
        "--pid=container:<daemon> and --ipc=host); the memory is on another "
        "device; the exporting process freed it or exited; or it came from "
        "cudaMallocAsync / expandable segments, which need a cuda_vmm "
        "region"));
  }
  std::shared_ptr<void> mapping(base, [this, handle](void* pointer) {
    absl::MutexLock lock(&mu_);
    opened_.erase(handle);
    cudaIpcCloseMemHandle(pointer);
  });
  opened_[handle] = mapping;
  return mapping;
}

absl::StatusOr<std::unique_ptr<Region>> CudaIpcOpener::Open(
    const v1::CudaIpcRegion& ipc) {
  if (ipc.handle().size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc handle has ", ipc.handle().size(), " bytes; expected ",
        sizeof(cudaIpcMemHandle_t), " (a cudaIpcMemHandle_t)"));
  }
  if (ipc.size_bytes() == 0) {
    return absl::InvalidArgumentError("cuda_ipc region size_bytes is 0");
  }
  if (absl::Status status =
          CheckRegionDevice(device_, ipc.device_ordinal(), ipc.device_uuid());
      !status.ok()) {
    return status;
  }
  if (cudaError_t error = cudaSetDevice(device_); error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaSetDevice(", device_, "): ", cudaGetErrorString(error)));
  }
  std::shared_ptr<void> mapping;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<void>> opened = OpenHandle(ipc.handle());
    if (!opened.ok()) return opened.status();
    mapping = *std::move(opened);
  }
  // The handle covers the whole allocation; the region may not exceed it.
  CUdeviceptr base = 0;
  size_t allocation = 0;
  CUresult result = driver_.mem_get_address_range(
      &base, &allocation, reinterpret_cast<CUdeviceptr>(mapping.get()));
  if (result != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuMemGetAddressRange on the opened handle: ",
                     driver_.ErrorText(result)));
  }
  const uint64_t usable =
      allocation - (reinterpret_cast<CUdeviceptr>(mapping.get()) - base);
  if (ipc.size_bytes() > usable) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc region of ", ipc.size_bytes(),
                     " bytes exceeds its allocation of ", usable, " bytes"));
  }
  return std::unique_ptr<Region>(new CudaIpcRegion(
      std::move(mapping), static_cast<int64_t>(ipc.size_bytes()), device_));
}

}  // namespace matmul
