// The CUDA half of RegionOpener: shm mappings registered with the device,
// and the cuda_ipc and cuda_vmm kinds of region. RegionOpener makes the
// checks that need no CUDA (malformed requests, the caller's pid) and hands
// the rest here. A build without CUDA (MATMUL_CUDA=OFF) links
// cuda_region_opener_unavailable.cc instead, whose opener refuses every
// CUDA region with FAILED_PRECONDITION.
#ifndef MATMUL_SERVER_REGIONS_CUDA_REGION_OPENER_H_
#define MATMUL_SERVER_REGIONS_CUDA_REGION_OPENER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// The bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE), known without
// the CUDA headers so that every build refuses a malformed handle alike.
inline constexpr size_t kCudaIpcHandleBytes = 64;

class CudaRegionOpener {
 public:
  virtual ~CudaRegionOpener() = default;

  // OK when CUDA regions can be opened here; otherwise FAILED_PRECONDITION
  // saying why not (a CPU daemon, no driver, a build without CUDA).
  virtual absl::Status Ready() const = 0;

  // `host` (a shm mapping) registered with the device, so kernels read and
  // write it in place.
  virtual absl::StatusOr<std::unique_ptr<Region>> RegisterHost(
      std::unique_ptr<Region> host) = 0;

  // Call only when Ready(); the handle has kCudaIpcHandleBytes bytes.
  virtual absl::StatusOr<std::unique_ptr<Region>> OpenIpc(
      const v1::CudaIpcRegion& ipc) = 0;

  // Call only when Ready(), for a request ParseCudaVmmRegion and
  // CheckCudaVmmCaller accepted.
  virtual absl::StatusOr<std::unique_ptr<Region>> OpenVmm(
      const v1::CudaVmmRegion& vmm, const PeerCredentials& peer) = 0;
};

// The opener for a daemon on `cuda_device` (-1: the CPU backend, whose
// opener is never Ready()). It must outlive every region it opened.
std::unique_ptr<CudaRegionOpener> CreateCudaRegionOpener(int cuda_device);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_REGION_OPENER_H_
