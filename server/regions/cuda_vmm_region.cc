#include "server/regions/cuda_vmm_region.h"

#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/regions/cuda_ipc_region.h"

namespace matmul {
namespace {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

// The imported allocation, mapped at a reserved address range; undone in
// reverse order.
class CudaVmmRegion final : public Region {
 public:
  CudaVmmRegion(const CudaDriverApi& driver, int64_t size)
      : driver_(driver), size_(size) {}
  ~CudaVmmRegion() override {
    if (mapped_) driver_.mem_unmap(address_, size_);
    if (address_ != 0) driver_.mem_address_free(address_, size_);
    if (handle_ != 0) driver_.mem_release(handle_);
  }

  std::string kind() const override { return "cuda_vmm"; }
  int64_t size_bytes() const override { return size_; }
  void* host_data() const override { return nullptr; }
  void* device_data() const override {
    return reinterpret_cast<void*>(address_);
  }
  // Two imports of one allocation are not recognised as the same memory;
  // the address identifies this mapping only.
  Placement placement() const override { return {"cuda", address_}; }

  absl::Status Map(int fd, int device) {
    CUresult result = driver_.mem_import(
        &handle_, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (result != CUDA_SUCCESS) {
      handle_ = 0;
      return Failed("cuMemImportFromShareableHandle", result);
    }
    result = driver_.mem_address_reserve(&address_, size_, 0, 0, 0);
    if (result != CUDA_SUCCESS) {
      address_ = 0;
      return Failed("cuMemAddressReserve", result);
    }
    result = driver_.mem_map(address_, size_, 0, handle_, 0);
    if (result != CUDA_SUCCESS) {
      return Failed("cuMemMap (is size_bytes the allocation's size?)", result);
    }
    mapped_ = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    result = driver_.mem_set_access(address_, size_, &access, 1);
    if (result != CUDA_SUCCESS) return Failed("cuMemSetAccess", result);
    return absl::OkStatus();
  }

 private:
  absl::Status Failed(const char* call, CUresult result) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_vmm region: ", call, ": ", driver_.ErrorText(result)));
  }

  const CudaDriverApi& driver_;
  const int64_t size_;
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  bool mapped_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> OpenCudaVmmRegion(
    const v1::CudaVmmRegion& vmm, int device, const CudaDriverApi& driver) {
  if (vmm.pid() <= 0 || vmm.fd() < 0 || vmm.size_bytes() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_vmm region needs pid > 0, fd >= 0 and size_bytes > 0; got pid ",
        vmm.pid(), ", fd ", vmm.fd(), ", size ", vmm.size_bytes()));
  }
  if (absl::Status status =
          CheckRegionDevice(device, vmm.device_ordinal(), vmm.device_uuid());
      !status.ok()) {
    return status;
  }
  Fd process(static_cast<int>(syscall(SYS_pidfd_open, vmm.pid(), 0)));
  if (process.get() < 0) {
    const int error = errno;
    if (error == ESRCH) {
      return absl::NotFoundError(absl::StrCat(
          "no process ", vmm.pid(),
          " is visible to the daemon (another PID "
          "namespace? run the daemon's container with --pid=host or share "
          "the client's with --pid=container:<client>)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("pidfd_open(", vmm.pid(), "): ", strerror(error)));
  }
  Fd fd(static_cast<int>(syscall(SYS_pidfd_getfd, process.get(), vmm.fd(), 0)));
  if (fd.get() < 0) {
    const int error = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "pidfd_getfd(pid ", vmm.pid(), ", fd ", vmm.fd(),
        "): ", strerror(error),
        error == EPERM
            ? ". The kernel applies ptrace rules: run the daemon as the "
              "client's user with kernel.yama.ptrace_scope <= 1 and the "
              "client calling prctl(PR_SET_PTRACER, <daemon pid>) (or "
              "PR_SET_PTRACER_ANY), or give the daemon CAP_SYS_PTRACE "
              "(docker run --cap-add=SYS_PTRACE); in containers also share "
              "the PID namespace (--pid=host or --pid=container:X)"
            : ""));
  }
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaSetDevice(", device, "): ", cudaGetErrorString(error)));
  }
  auto region = std::make_unique<CudaVmmRegion>(
      driver, static_cast<int64_t>(vmm.size_bytes()));
  if (absl::Status status = region->Map(fd.get(), device); !status.ok()) {
    return status;
  }
  return std::unique_ptr<Region>(std::move(region));
}

}  // namespace matmul
