// A kernel family in the CUTLASS manner: a source of GEMM kernels (cuBLASLt,
// the project's own mma kernels) that lists its candidate configurations
// for a problem and, for a candidate, answers CanImplement ->
// WorkspaceBytes -> Run. The selector (gemm_selector.h) sees only this
// interface and a list of families (gemm_family_registry.h); a family whose
// library is not part of the build is absent from that list.
//
// Every candidate has a stable name ("cublaslt_algo2",
// "mma_128x128x64_s3_w2x2_tma"): the tuning cache stores it and the metrics
// report it, so a family must never rename its candidates.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

class GemmFamily;

// The GB10's (DGX Spark's) opt-in shared memory per block: candidates at
// or under it make the "Spark path" the tools report on.
inline constexpr int kSparkSharedBytes = 101376;

// One runnable kernel: a candidate of a family.
struct KernelChoice {
  // The family that runs it; owned by the selector (or whoever built the
  // family list), which outlives every choice it hands out.
  GemmFamily* family = nullptr;
  // The family's own handle: a config index, or a heuristic rank.
  int index = 0;
  std::string name;             // "mma_128x256x32_s4_w2x4", "cublaslt_algo0"
  bool tuned = false;           // false: heuristic pick, not yet timed
  double median_seconds = 0.0;  // when tuned
};

// A candidate as the tools print it.
struct GemmCandidate {
  KernelChoice choice;
  // The column the tools group it under: the tile shape of an own config
  // ("mma_128x256"), or the family's name ("cublaslt").
  std::string group;
  int shared_bytes = 0;     // per block; 0 where the family does not say
  bool fits_spark = false;  // known to run within kSparkSharedBytes
  // CanImplement on the problem it was listed for; not OK: cannot run it.
  absl::Status status;
};

class GemmFamily {
 public:
  virtual ~GemmFamily() = default;

  // "cublaslt", "mma".
  virtual const std::string& name() const = 0;
  // One line for the tools, e.g. "26 configs".
  virtual std::string Summary() const = 0;
  // The per-block shared memory its candidates are held to (a device's
  // opt-in limit, or one imposed); 0 where the family states none.
  virtual int shared_bytes_limit() const = 0;

  // Every candidate for `problem` (with real device pointers: alignment
  // decides some), each with CanImplement's verdict. Never empty: a family
  // that can offer nothing lists one candidate carrying the reason.
  virtual std::vector<GemmCandidate> Candidates(const GemmProblem& problem) = 0;

  // The candidate a stored name refers to; NOT_FOUND when the name is not
  // one of this family's (e.g. a config this build no longer has).
  virtual absl::StatusOr<KernelChoice> FromName(const std::string& name) = 0;

  // The family's pick for `problem` without timing anything; an error when
  // none of its candidates can run it.
  virtual absl::StatusOr<KernelChoice> Heuristic(
      const GemmProblem& problem) = 0;

  virtual absl::Status CanImplement(const KernelChoice& choice,
                                    const GemmProblem& problem) = 0;
  virtual absl::StatusOr<size_t> WorkspaceBytes(const KernelChoice& choice,
                                                const GemmProblem& problem) = 0;
  // The most workspace any candidate asks for, where the family knows it
  // ahead of time (0 otherwise): reserved up front, so that no timed launch
  // allocates.
  virtual size_t MaxWorkspaceBytes() const = 0;
  // Queues the kernel on `stream` (the family's device current);
  // `workspace` holds at least WorkspaceBytes().
  virtual absl::Status Run(const KernelChoice& choice,
                           const GemmProblem& problem, cudaStream_t stream,
                           void* workspace, size_t workspace_bytes) = 0;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_H_
