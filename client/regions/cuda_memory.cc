#include "client/regions/cuda_memory.h"

#include <cuda_runtime_api.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda_driver_api.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace matmul {
namespace {

absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), ")"));
}

absl::Status Driver(const CudaDriverApi& api, CUresult result,
                    const char* what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", api.ErrorText(result)));
}

class CudaDeviceMemory final : public CudaMemory {
 public:
  CudaDeviceMemory(Kind kind, int device) : kind_(kind), device_(device) {}
  ~CudaDeviceMemory() override;

  // CudaMemory::Create on a device; see there.
  static absl::StatusOr<std::unique_ptr<CudaMemory>> Allocate(Kind kind,
                                                              int64_t bytes,
                                                              int device);

  void* data() const override { return data_; }
  int64_t size_bytes() const override { return size_; }
  v1::RegisterRegionRequest RegisterRequest() const override;
  absl::Status CopyFromHost(absl::Span<const char> bytes) override;
  absl::Status CopyToHost(absl::Span<char> bytes) const override;

 private:
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

absl::StatusOr<std::unique_ptr<CudaMemory>> CudaDeviceMemory::Allocate(
    Kind kind, int64_t bytes, int device) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA region size ", bytes, " must be positive"));
  }
  RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  auto memory = std::make_unique<CudaDeviceMemory>(kind, device);
  if (kind == Kind::kIpc) {
    RETURN_IF_ERROR(Cuda(cudaMalloc(&memory->data_, static_cast<size_t>(bytes)),
                         "cudaMalloc"));
    memory->size_ = bytes;
    cudaIpcMemHandle_t handle{};
    RETURN_IF_ERROR(Cuda(cudaIpcGetMemHandle(&handle, memory->data_),
                         "cudaIpcGetMemHandle"));
    memory->ipc_handle_.assign(reinterpret_cast<const char*>(&handle),
                               sizeof(handle));
    return memory;
  }
  RETURN_IF_ERROR(Cuda(cudaFree(nullptr), "creating the CUDA context"));
  memory->driver_ = LoadCudaDriverApi();
  if (!memory->driver_.ok()) return memory->driver_.status();
  const CudaDriverApi& api = *memory->driver_;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  RETURN_IF_ERROR(
      Driver(api,
             api.mem_get_granularity(&granularity, &prop,
                                     CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             "cuMemGetAllocationGranularity"));
  const size_t size = (static_cast<size_t>(bytes) + granularity - 1) /
                      granularity * granularity;
  RETURN_IF_ERROR(Driver(api, api.mem_create(&memory->handle_, size, &prop, 0),
                         "cuMemCreate"));
  memory->size_ = static_cast<int64_t>(size);
  CUdeviceptr address = 0;
  RETURN_IF_ERROR(Driver(api, api.mem_address_reserve(&address, size, 0, 0, 0),
                         "cuMemAddressReserve"));
  memory->data_ = reinterpret_cast<void*>(address);
  RETURN_IF_ERROR(Driver(api, api.mem_map(address, size, 0, memory->handle_, 0),
                         "cuMemMap"));
  memory->mapped_ = true;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  RETURN_IF_ERROR(Driver(api, api.mem_set_access(address, size, &access, 1),
                         "cuMemSetAccess"));
  int exported_fd = -1;
  RETURN_IF_ERROR(
      Driver(api,
             api.mem_export(&exported_fd, memory->handle_,
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             "cuMemExportToShareableHandle"));
  memory->fd_.reset(exported_fd);
  // The daemon takes the fd with pidfd_getfd, which needs ptrace rights
  // over this process; under Yama (ptrace_scope 1) a process must allow it.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  return memory;
}

CudaDeviceMemory::~CudaDeviceMemory() {
  if (kind_ == Kind::kIpc) {
    if (data_ != nullptr) cudaFree(data_);
    return;
  }
  if (!driver_.ok()) return;
  const CudaDriverApi& api = *driver_;
  const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(data_);
  fd_.reset();
  if (mapped_) api.mem_unmap(address, static_cast<size_t>(size_));
  if (address != 0) api.mem_address_free(address, static_cast<size_t>(size_));
  if (handle_ != 0) api.mem_release(handle_);
}

v1::RegisterRegionRequest CudaDeviceMemory::RegisterRequest() const {
  v1::RegisterRegionRequest request;
  const std::string uuid = CudaDeviceUuid(device_);
  if (kind_ == Kind::kIpc) {
    cudaIpcMemHandle_t handle{};
    cudaIpcGetMemHandle(&handle, data_);
    v1::CudaIpcRegion* ipc = request.mutable_cuda_ipc();
    ipc->set_handle(
        std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    ipc->set_device_ordinal(device_);
    ipc->set_device_uuid(uuid);
    ipc->set_size_bytes(static_cast<uint64_t>(size_));
  } else {
    v1::CudaVmmRegion* vmm = request.mutable_cuda_vmm();
    vmm->set_pid(getpid());
    vmm->set_fd(fd_.get());
    vmm->set_size_bytes(static_cast<uint64_t>(size_));
    vmm->set_device_ordinal(device_);
    vmm->set_device_uuid(uuid);
  }
  return request;
}

absl::Status CudaDeviceMemory::CopyFromHost(absl::Span<const char> bytes) {
  if (static_cast<int64_t>(bytes.size()) > size_) {
    return absl::InvalidArgumentError("copy larger than the CUDA region");
  }
  RETURN_IF_ERROR(Cuda(
      cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
      "cudaMemcpy to the region"));
  // From pageable memory cudaMemcpy may return before its DMA lands; the
  // daemon reads the region from its own streams, which nothing orders
  // after that DMA. Wait for it here.
  return Cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}

absl::Status CudaDeviceMemory::CopyToHost(absl::Span<char> bytes) const {
  if (static_cast<int64_t>(bytes.size()) > size_) {
    return absl::InvalidArgumentError("copy larger than the CUDA region");
  }
  return Cuda(
      cudaMemcpy(bytes.data(), data_, bytes.size(), cudaMemcpyDeviceToHost),
      "cudaMemcpy from the region");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaMemory>> CudaMemory::Create(Kind kind,
                                                               int64_t bytes,
                                                               int device) {
  return CudaDeviceMemory::Allocate(kind, bytes, device);
}

}  // namespace matmul
