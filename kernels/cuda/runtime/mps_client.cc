#include "kernels/cuda/runtime/mps_client.h"

#include <cuda.h>

#include "common/cuda_driver_api.h"

namespace matmul::cuda {

bool IsMpsClient(int device) {
  const absl::StatusOr<CudaDriverApi> api = LoadCudaDriverApi();
  if (!api.ok()) return false;
  int supported = 0;
  return api->device_exec_affinity_support(&supported,
                                           CU_EXEC_AFFINITY_TYPE_SM_COUNT,
                                           device) == CUDA_SUCCESS &&
         supported == 1;
}

}  // namespace matmul::cuda
