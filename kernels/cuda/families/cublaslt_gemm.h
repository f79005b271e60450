// cuBLASLt as a GEMM backend for GemmProblem: descriptors built from the
// problem's element strides, heuristic top-k candidate algorithms, and a run
// with a chosen candidate. Used by GemmSelector (which times the candidates
// against the project's own kernels) and by matmul-bench.
//
// cuBLASLt is column-major; our matrices are described by (row, col)
// strides. A row-major C is computed as C^T = B^T * A^T (operands swapped),
// a column-major C directly. Each input may be row-major (col stride 1) or
// column-major (row stride 1), which becomes cuBLASLt's op N or op T. Strided
// batches (batch stride 0 broadcasts) and pointer-array batches (all three
// matrices given as pointer arrays) are supported.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_GEMM_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

// The descriptors and heuristic candidates for one problem layout (shape,
// strides, dtype, batch, pointer alignment); not tied to the data pointers.
// Immutable once built, so runs on many threads may share one.
class CublasLtPlan {
 public:
  ~CublasLtPlan();
  CublasLtPlan(const CublasLtPlan&) = delete;
  CublasLtPlan& operator=(const CublasLtPlan&) = delete;

  // Number of heuristic candidates, best-first as cuBLASLt ranks them.
  int algo_count() const { return static_cast<int>(results_.size()); }
  size_t workspace_bytes(int index) const {
    return results_[index].workspaceSize;
  }
  // cuBLASLt's own id of candidate `index` (CUBLASLT_ALGO_CONFIG_ID), for
  // logs: the index, not this id, is what names a candidate.
  int algo_id(int index) const;
  // The key this plan was built for (see CublasLtGemm::PlanKey).
  const std::string& key() const { return key_; }
  // Candidate `index` as cuBLASLt describes it (for CublasLtGemm::RunAlgo).
  const cublasLtMatmulHeuristicResult_t& result(int index) const {
    return results_[index];
  }

 private:
  friend class CublasLtGemm;
  CublasLtPlan() = default;

  std::string key_;
  bool swap_operands_ = false;
  bool pointer_array_ = false;
  cudaDataType c_type_ = CUDA_R_16BF;
  size_t min_alignment_[3] = {16, 16, 16};  // a, b, c (our names)
  cublasLtMatmulDesc_t desc_ = nullptr;
  // cuBLASLt's A, B, C (=D) layouts, in cuBLASLt's naming.
  cublasLtMatrixLayout_t layout_a_ = nullptr;
  cublasLtMatrixLayout_t layout_b_ = nullptr;
  cublasLtMatrixLayout_t layout_c_ = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> results_;
};

class CublasLtGemm {
 public:
  // How many candidates the heuristic is asked for.
  static constexpr int kDefaultTopK = 8;

  // Creates a handle on `device` (made current for the call). The workspace
  // cap is 32 MiB on sm_90 and later (cuBLASLt's Hopper and Blackwell
  // kernels want it) and 4 MiB before.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      int device, int top_k = kDefaultTopK);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Whether cuBLASLt can express `problem` at all, with the reason when not
  // (e.g. an operand with no unit stride, sizes over int32, a pointer array
  // on only some operands). Cheap: no GPU work, no heuristic query.
  static absl::Status CanImplement(const GemmProblem& problem);

  // The plan for `problem`'s layout, built on first use and cached. Fails
  // with NOT_FOUND when the heuristic offers no algorithm.
  absl::StatusOr<std::shared_ptr<const CublasLtPlan>> GetPlan(
      const GemmProblem& problem);

  // Runs candidate `algo_index` of `plan` on `problem` (whose layout must be
  // the plan's) on `stream`. `workspace` must hold workspace_bytes().
  absl::Status Run(const CublasLtPlan& plan, int algo_index,
                   const GemmProblem& problem, cudaStream_t stream,
                   void* workspace, size_t workspace_bytes) const;

  // Every configuration of every cuBLASLt algorithm for `plan`'s layout that
  // cublasLtMatmulAlgoCheck accepts within the workspace: each algorithm id
  // with each of its tiles, stage counts and CTA swizzles, no split-K. An
  // exhaustive search beyond the heuristic's top-k (up to thousands of
  // checks), for the cublaslt-survey tool; `on_algo` is told each algorithm
  // id as it is searched.
  absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> AllAlgos(
      const CublasLtPlan& plan,
      const std::function<void(int index, int count, int algo_id)>& on_algo)
      const;

  // Runs `algo` (one of plan.result(i) or of AllAlgos(plan)) on `problem`,
  // whose layout must be the plan's.
  absl::Status RunAlgo(const CublasLtPlan& plan,
                       const cublasLtMatmulHeuristicResult_t& algo,
                       const GemmProblem& problem, cudaStream_t stream,
                       void* workspace, size_t workspace_bytes) const;

  // cuBLASLt's own id of an algorithm (CUBLASLT_ALGO_CONFIG_ID) and one of
  // its configuration attributes, read back.
  static int AlgoId(const cublasLtMatmulAlgo_t& algo);
  static uint32_t AlgoConfig(const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoConfigAttributes_t attr);

  // The cache key of `problem`'s plan: shape, strides, dtype, batch mode and
  // the alignment class of its pointers.
  static std::string PlanKey(const GemmProblem& problem);

  size_t workspace_bytes() const { return workspace_bytes_; }
  int device() const { return device_; }
  // cublasLtGetVersion(), e.g. 130100.
  static size_t Version();

 private:
  CublasLtGemm(int device, int top_k, size_t workspace_bytes,
               cublasLtHandle_t handle)
      : device_(device),
        top_k_(top_k),
        workspace_bytes_(workspace_bytes),
        handle_(handle) {}

  absl::StatusOr<std::unique_ptr<CublasLtPlan>> BuildPlan(
      const GemmProblem& problem, std::string key) const;

  const int device_;
  const int top_k_;
  const size_t workspace_bytes_;
  cublasLtHandle_t handle_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const CublasLtPlan>> plans_
      ABSL_GUARDED_BY(mu_);
};

// Alignment in bytes (power of two, capped at 16) of a pointer.
size_t PointerAlignment(const void* pointer);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_CUBLASLT_GEMM_H_
