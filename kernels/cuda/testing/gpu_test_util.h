// Test helpers shared by this folder's GPU tests: random host problems in
// every layout the GemmProblem contract allows, poisoned outputs, device
// copies, and the FP64 check.
#ifndef MATMUL_KERNELS_CUDA_TESTING_GPU_TEST_UTIL_H_
#define MATMUL_KERNELS_CUDA_TESTING_GPU_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda::testing {

// Returns a reason to skip when no CUDA device is usable, else "".
std::string NoGpuReason();

#define MATMUL_SKIP_WITHOUT_GPU()                                \
  do {                                                           \
    std::string reason = ::matmul::cuda::testing::NoGpuReason(); \
    if (!reason.empty()) GTEST_SKIP() << reason;                 \
  } while (0)

enum class OperandLayout {
  kRowMajor,  // col stride 1 ("N")
  kColMajor,  // row stride 1 ("T")
  kStrided,   // neither stride is 1
};

struct ProblemSpec {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  OperandLayout a = OperandLayout::kRowMajor;
  OperandLayout b = OperandLayout::kRowMajor;
  OperandLayout c = OperandLayout::kRowMajor;
  DType c_dtype = DType::kBF16;
  float alpha = 1.0f, beta = 0.0f;
  bool broadcast_a = false, broadcast_b = false;
  bool pointer_arrays = false;  // A, B and C through pointer arrays
  int64_t pad = 0;              // extra elements on each leading dimension
  std::string Name() const;
};

// A problem that owns its host storage. Padding and gaps are poisoned too,
// so a write outside the matrix shows up in OutsideWritten().
struct HostProblem {
  ProblemSpec spec;
  std::vector<uint16_t> a, b;      // BF16 storage
  std::vector<uint8_t> c;          // BF16 or FP32 storage
  std::vector<uint8_t> c_initial;  // C as it was before the run
  std::vector<const void*> a_ptrs, b_ptrs;
  std::vector<void*> c_ptrs;
  GemmProblem problem;  // points into the vectors above
};

// Random non-zero inputs; C random when beta != 0, else all-NaN poison.
HostProblem MakeHostProblem(const ProblemSpec& spec, std::mt19937_64& rng);

// A random spec over tails, layouts, batch/broadcast, dtypes, alpha/beta.
ProblemSpec RandomSpec(std::mt19937_64& rng, int64_t max_dim,
                       bool allow_strided, bool allow_pointer_arrays);

// The problem's relative error against the FP64 reference (inf on NaN).
double CheckError(const HostProblem& host);

// True when a C byte outside the matrix elements changed.
bool OutsideWritten(const HostProblem& host);

// A device mirror of a HostProblem (same strides, pointer arrays rebuilt
// on the device when used).
struct DeviceProblem {
  cuda::DeviceBuffer a, b, c, a_ptrs, b_ptrs, c_ptrs;
  GemmProblem problem;
};
absl::StatusOr<DeviceProblem> Upload(const HostProblem& host);
// Copies C back into host.c.
absl::Status Download(const DeviceProblem& device, HostProblem& host);

}  // namespace matmul::cuda::testing

#endif  // MATMUL_KERNELS_CUDA_TESTING_GPU_TEST_UTIL_H_
