#include "server/backends/cuda_versions.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

// "13.0" from 13000, "13.1.0" from 130100: CUDA's integer version codes.
std::string CudaVersionText(int code, bool with_patch) {
  if (code <= 0) return "none";
  const int major = with_patch ? code / 10000 : code / 1000;
  const int minor = with_patch ? code % 10000 / 100 : code % 1000 / 10;
  return with_patch ? absl::StrCat(major, ".", minor, ".", code % 100)
                    : absl::StrCat(major, ".", minor);
}

}  // namespace

CudaVersions LinkedCudaVersions() {
  // The runtime's version needs no driver: it is known on the CPU too.
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  return {.runtime = CudaVersionText(runtime, /*with_patch=*/false),
          .cublas = CudaVersionText(static_cast<int>(cublasLtGetVersion()),
                                    /*with_patch=*/true)};
}

}  // namespace matmul
