// The daemon built without CUDA (MATMUL_CUDA=OFF) runs with no CUDA runtime
// and no cuBLASLt; "none" is what a CUDA build reports where they are absent.
#include "server/backends/cuda_versions.h"

namespace matmul {

CudaVersions LinkedCudaVersions() {
  return {.runtime = "none", .cublas = "none"};
}

}  // namespace matmul
