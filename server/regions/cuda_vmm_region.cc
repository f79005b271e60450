#include "server/regions/cuda_vmm_region.h"

#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "server/regions/cuda_region_device.h"

namespace matmul {
namespace {

// "fd 7" for one allocation, "chunk 2 of 5 (fd 9)" otherwise: the words of
// every message about one descriptor.
std::string DescribeFd(const CudaVmmLayout& layout, size_t i) {
  if (layout.one_allocation) return absl::StrCat("fd ", layout.chunk_fds[i]);
  return absl::StrCat("chunk ", i, " of ", layout.chunk_fds.size(), " (fd ",
                      layout.chunk_fds[i], ")");
}

// What to do about a pidfd_getfd failure, as the end of its message.
const char* PidfdGetfdHint(int error) {
  switch (error) {
    case EPERM:
      return ". The kernel applies ptrace rules: run the daemon as the "
             "client's user with kernel.yama.ptrace_scope <= 1 and the "
             "client calling prctl(PR_SET_PTRACER, <daemon pid>) (or "
             "PR_SET_PTRACER_ANY), or give the daemon CAP_SYS_PTRACE "
             "(docker run --cap-add=SYS_PTRACE); in containers also share "
             "the PID namespace (--pid=host or --pid=container:X)";
    case EBADF:
      return ". No such descriptor is open in that process: was the memory "
             "freed (and its fd closed) before it was registered?";
    default:
      return "";
  }
}

// The imported chunks, mapped back to back in one reserved address range.
// Everything acquired is undone in reverse order, also after a failure
// half-way through set-up.
class CudaVmmRegion final : public Region {
 public:
  CudaVmmRegion(const CudaDriverApi& driver, const CudaVmmLayout& layout,
                int device)
      : driver_(driver),
        device_(device),
        chunk_bytes_(layout.chunk_bytes),
        size_(static_cast<int64_t>(layout.size_bytes)) {
    // Reserved up front so that recording an imported handle cannot throw
    // and leak it.
    handles_.reserve(layout.chunk_fds.size());
  }
  ~CudaVmmRegion() override {
    for (size_t i = mapped_; i > 0; --i) {
      driver_.mem_unmap(address_ + (i - 1) * chunk_bytes_, chunk_bytes_);
    }
    if (address_ != 0) driver_.mem_address_free(address_, reserved_bytes_);
    for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) {
      driver_.mem_release(*it);
    }
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
  // Mapped, and made accessible, for this device only.
  int cuda_device() const override { return device_; }

  // Imports the allocation behind `fd` (this process's copy of the client's
  // descriptor) as the next chunk. The fd may be closed afterwards: the
  // imported handle keeps the allocation alive.
  absl::Status Import(int fd, const std::string& what) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult result = driver_.mem_import(
        &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (result != CUDA_SUCCESS) {
      return Failed(
          absl::StrCat("cuMemImportFromShareableHandle of ", what,
                       " (is it a cuMemCreate allocation exported as a POSIX "
                       "fd, on this daemon's GPU?)"),
          result);
    }
    handles_.push_back(handle);
    return absl::OkStatus();
  }

  // Reserves one range for every imported chunk, maps chunk i at byte
  // i * chunk_bytes and lets the device read and write all of it.
  absl::Status Map() {
    reserved_bytes_ = handles_.size() * chunk_bytes_;
    CUresult result =
        driver_.mem_address_reserve(&address_, reserved_bytes_, 0, 0, 0);
    if (result != CUDA_SUCCESS) {
      address_ = 0;
      return Failed(
          absl::StrCat("cuMemAddressReserve of ", reserved_bytes_, " bytes"),
          result);
    }
    for (size_t i = 0; i < handles_.size(); ++i) {
      result = driver_.mem_map(address_ + i * chunk_bytes_, chunk_bytes_, 0,
                               handles_[i], 0);
      if (result != CUDA_SUCCESS) {
        return Failed(absl::StrCat("cuMemMap of chunk ", i, " of ",
                                   handles_.size(), " (", chunk_bytes_,
                                   " bytes: is that the allocation's size?)"),
                      result);
      }
      ++mapped_;
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    result = driver_.mem_set_access(address_, reserved_bytes_, &access, 1);
    if (result != CUDA_SUCCESS) return Failed("cuMemSetAccess", result);
    return absl::OkStatus();
  }

 private:
  absl::Status Failed(const std::string& call, CUresult result) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_vmm region: ", call, ": ", driver_.ErrorText(result)));
  }

  const CudaDriverApi& driver_;
  const int device_;
  const uint64_t chunk_bytes_;
  const int64_t size_;
  std::vector<CUmemGenericAllocationHandle> handles_;  // imported, in order
  CUdeviceptr address_ = 0;
  uint64_t reserved_bytes_ = 0;
  size_t mapped_ = 0;  // chunks 0 .. mapped_ - 1 are mapped
};

// Every chunk is one allocation, and cuMemCreate sizes are multiples of the
// granularity: anything else cannot be what the client exported.
absl::Status CheckGranularity(const CudaVmmLayout& layout, int device,
                              const CudaDriverApi& driver) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  const CUresult result = driver.mem_get_granularity(
      &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (result != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda_vmm region: cuMemGetAllocationGranularity(device ",
                     device, "): ", driver.ErrorText(result)));
  }
  if (granularity != 0 && layout.chunk_bytes % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_vmm ", layout.one_allocation ? "size_bytes " : "chunk_bytes ",
        layout.chunk_bytes, " is not a multiple of device ", device,
        "'s allocation granularity of ", granularity,
        " bytes (a cuMemCreate allocation's size always is)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> OpenCudaVmmRegion(
    const v1::CudaVmmRegion& vmm, int device, const CudaDriverApi& driver,
    const PeerCredentials& peer) {
  ASSIGN_OR_RETURN(const CudaVmmLayout layout, ParseCudaVmmRegion(vmm));
  RETURN_IF_ERROR(CheckCudaVmmCaller(layout, peer));
  RETURN_IF_ERROR(
      CheckRegionDevice(device, vmm.device_ordinal(), vmm.device_uuid()));
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaSetDevice(", device, "): ", cudaGetErrorString(error)));
  }
  RETURN_IF_ERROR(CheckGranularity(layout, device, driver));
  // The connection's own pidfd names the caller even if its pid has been
  // reused since; pidfd_open(pid) is the fallback for kernels without one.
  UniqueFd opened;
  int process = peer.pidfd;
  if (process < 0) {
    opened.reset(static_cast<int>(syscall(SYS_pidfd_open, layout.pid, 0)));
    process = opened.get();
  }
  if (process < 0) {
    const int error = errno;
    if (error == ESRCH) {
      return absl::NotFoundError(absl::StrCat(
          "no process ", layout.pid,
          " is visible to the daemon (another PID "
          "namespace? run the daemon's container with --pid=host or share "
          "the client's with --pid=container:<client>)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("pidfd_open(", layout.pid, "): ", strerror(error)));
  }
  auto region = std::make_unique<CudaVmmRegion>(driver, layout, device);
  for (size_t i = 0; i < layout.chunk_fds.size(); ++i) {
    UniqueFd fd(static_cast<int>(
        syscall(SYS_pidfd_getfd, process, layout.chunk_fds[i], 0)));
    if (!fd.valid()) {
      const int error = errno;
      return absl::FailedPreconditionError(absl::StrCat(
          "pidfd_getfd(pid ", layout.pid, ", ", DescribeFd(layout, i),
          "): ", strerror(error), PidfdGetfdHint(error)));
    }
    // `region` releases the chunks imported so far if this one fails.
    RETURN_IF_ERROR(region->Import(fd.get(), DescribeFd(layout, i)));
  }
  RETURN_IF_ERROR(region->Map());
  return std::unique_ptr<Region>(std::move(region));
}

}  // namespace matmul
