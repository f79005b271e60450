// Opens the memory a RegisterRegion request describes, as a Region the
// backend can use: shared memory everywhere; CUDA IPC and VMM allocations
// only on the CUDA backend.
#ifndef MATMUL_SERVER_REGIONS_REGION_OPENER_H_
#define MATMUL_SERVER_REGIONS_REGION_OPENER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "matmul/v1/matmul.pb.h"
#include "server/regions/region.h"

namespace matmul {

struct RegionOpenOptions {
  std::string shm_prefix = "matmul";  // shm names must start with it
  bool cuda_backend = false;
};

absl::StatusOr<std::unique_ptr<Region>> OpenRegion(
    const v1::RegisterRegionRequest& request, const RegionOpenOptions& options);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_REGION_OPENER_H_
