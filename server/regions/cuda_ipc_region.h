// Regions over another process's cudaMalloc memory, opened from a
// cudaIpcMemHandle. A process may open a given handle only once, so opened
// handles are shared: every region registered with the same handle bytes
// (by any session) uses one mapping, closed when the last of them goes.
#ifndef MATMUL_SERVER_REGIONS_CUDA_IPC_REGION_H_
#define MATMUL_SERVER_REGIONS_CUDA_IPC_REGION_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda_driver_api.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/region.h"

namespace matmul {

class CudaIpcOpener {
 public:
  // `driver` must outlive the opener; the opener must outlive its regions.
  CudaIpcOpener(int device, const CudaDriverApi& driver)
      : device_(device), driver_(driver) {}

  // INVALID_ARGUMENT for a handle that is not 64 bytes or a size beyond the
  // allocation; FAILED_PRECONDITION, with the CUDA error and its likely
  // cause, when the handle cannot be opened here.
  absl::StatusOr<std::unique_ptr<Region>> Open(const v1::CudaIpcRegion& ipc);

 private:
  absl::StatusOr<std::shared_ptr<void>> OpenHandle(const std::string& handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  const CudaDriverApi& driver_;
  absl::Mutex mu_;
  // Handle bytes -> the mapping; the shared_ptr's deleter erases the entry
  // and closes the handle under mu_.
  absl::flat_hash_map<std::string, std::weak_ptr<void>> opened_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_IPC_REGION_H_
