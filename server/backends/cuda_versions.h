// The CUDA runtime and cuBLASLt versions the daemon runs with, for the
// matmul_build_info metric. A build without CUDA (MATMUL_CUDA=OFF) links
// cuda_versions_unavailable.cc instead, which names neither.
#ifndef MATMUL_SERVER_BACKENDS_CUDA_VERSIONS_H_
#define MATMUL_SERVER_BACKENDS_CUDA_VERSIONS_H_

#include <string>

namespace matmul {

struct CudaVersions {
  std::string runtime;  // "13.0"; "none" without one
  std::string cublas;   // "13.1.0"; "none" without one
};

CudaVersions LinkedCudaVersions();

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_CUDA_VERSIONS_H_
