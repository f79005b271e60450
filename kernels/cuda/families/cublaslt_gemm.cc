#include "kernels/cuda/families/cublaslt_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/gemm/matrix_layout.h"
#include "common/gemm/shape_name.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::cuda {
namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

// The operand's layout; cuBLASLt takes no other than row- or column-major.
absl::StatusOr<MatrixLayout> Classify(const Strides& strides, int64_t rows,
                                      int64_t cols, const char* name) {
  const MatrixLayout layout = ClassifyLayout(strides, rows, cols);
  if (layout.order != MatrixOrder::kStrided) return layout;
  return absl::InvalidArgumentError(absl::StrCat(
      "cuBLASLt needs operand ", name,
      " with unit row or column stride and a leading dimension at least its "
      "extent; got row stride ",
      strides.row, ", col stride ", strides.col, " for ", rows, "x", cols));
}

// cuBLASLt's description of one column-major operand.
struct LtOperand {
  cublasOperation_t op;
  uint64_t rows;
  uint64_t cols;
  int64_t ld;
};

// The column-major operand that yields X (want_transpose false) or X^T
// (true) for an R x C matrix X stored as `c`.
LtOperand Describe(const MatrixLayout& c, int64_t rows, int64_t cols,
                   bool want_transpose) {
  const bool stored_col_major = c.order == MatrixOrder::kColMajor;
  // Stored column-major: the layout is R x C. Stored row-major: the memory
  // is X^T column-major, C x R.
  const uint64_t lr = stored_col_major ? rows : cols;
  const uint64_t lc = stored_col_major ? cols : rows;
  const bool layout_is_x = stored_col_major;
  const bool need_transpose_op = layout_is_x == want_transpose;
  return LtOperand{need_transpose_op ? CUBLAS_OP_T : CUBLAS_OP_N, lr, lc, c.ld};
}

size_t ProblemAlignment(const void* data, const void* const* pointers,
                        int pointer_alignment, size_t element_bytes) {
  // Entries of a pointer array may not be visible on the host: unless the
  // caller says, assume only element alignment.
  if (pointers != nullptr) {
    return pointer_alignment > 0 ? static_cast<size_t>(pointer_alignment)
                                 : element_bytes;
  }
  return PointerAlignment(data);
}

absl::Status LayoutAttr(cublasLtMatrixLayout_t layout,
                        cublasLtMatrixLayoutAttribute_t attr, const void* value,
                        size_t size) {
  return CublasStatus(
      cublasLtMatrixLayoutSetAttribute(layout, attr, value, size),
      "cublasLtMatrixLayoutSetAttribute");
}

absl::StatusOr<cublasLtMatrixLayout_t> MakeLayout(cudaDataType type,
                                                  uint64_t rows, uint64_t cols,
                                                  int64_t ld, int64_t batch,
                                                  int64_t batch_stride,
                                                  bool pointer_array) {
  cublasLtMatrixLayout_t layout = nullptr;
  RETURN_IF_ERROR(
      CublasStatus(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld),
                   "cublasLtMatrixLayoutCreate"));
  // Owned by the caller from here on; destroy it if an attribute fails.
  auto guard = std::unique_ptr<cublasLtMatrixLayoutOpaque_t,
                               decltype(&cublasLtMatrixLayoutDestroy)>(
      layout, &cublasLtMatrixLayoutDestroy);
  // Pointer-array mode must be set even for a batch of one: the "matrix"
  // pointers passed to cublasLtMatmul are then arrays.
  if (pointer_array) {
    const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    RETURN_IF_ERROR(LayoutAttr(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                               sizeof(mode)));
  }
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    RETURN_IF_ERROR(LayoutAttr(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                               &count, sizeof(count)));
    if (!pointer_array) {
      RETURN_IF_ERROR(LayoutAttr(layout,
                                 CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                 &batch_stride, sizeof(batch_stride)));
    }
  }
  return guard.release();
}

}  // namespace

size_t PointerAlignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  size_t alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

CublasLtPlan::~CublasLtPlan() {
  if (layout_c_ != nullptr) cublasLtMatrixLayoutDestroy(layout_c_);
  if (layout_b_ != nullptr) cublasLtMatrixLayoutDestroy(layout_b_);
  if (layout_a_ != nullptr) cublasLtMatrixLayoutDestroy(layout_a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

int CublasLtPlan::algo_id(int index) const {
  return CublasLtGemm::AlgoId(results_[index].algo);
}

int CublasLtGemm::AlgoId(const cublasLtMatmulAlgo_t& algo) {
  return static_cast<int>(AlgoConfig(algo, CUBLASLT_ALGO_CONFIG_ID));
}

uint32_t CublasLtGemm::AlgoConfig(const cublasLtMatmulAlgo_t& algo,
                                  cublasLtMatmulAlgoConfigAttributes_t attr) {
  // The attributes are 16- or 32-bit; read into a zeroed 32-bit word
  // (little-endian, so a 16-bit value lands in its low half).
  uint32_t value = 0;
  size_t written = 0;
  for (size_t size : {sizeof(uint32_t), sizeof(uint16_t)}) {
    if (cublasLtMatmulAlgoConfigGetAttribute(
            &algo, attr, &value, size, &written) == CUBLAS_STATUS_SUCCESS) {
      return value;
    }
    value = 0;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(int device,
                                                                   int top_k) {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device));
  int major = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
      "cudaDeviceGetAttribute(ComputeCapabilityMajor)"));
  cublasLtHandle_t handle = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&handle), "cublasLtCreate"));
  const size_t workspace = major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20);
  return std::unique_ptr<CublasLtGemm>(
      new CublasLtGemm(device, std::max(1, top_k), workspace, handle));
}

CublasLtGemm::~CublasLtGemm() {
  {
    absl::MutexLock lock(&mu_);
    plans_.clear();
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

size_t CublasLtGemm::Version() { return cublasLtGetVersion(); }

absl::Status CublasLtGemm::CanImplement(const GemmProblem& p) {
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLASLt: sizes must be >= 1, got batch ", p.batch, " m ",
                     p.m, " n ", p.n, " k ", p.k));
  }
  if (p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim || p.batch > kMaxDim) {
    return absl::InvalidArgumentError(
        "cuBLASLt: sizes and batch must fit in int32");
  }
  const int pointer_arrays = (p.a.pointers != nullptr) +
                             (p.b.pointers != nullptr) +
                             (p.c.pointers != nullptr);
  if (pointer_arrays != 0 && pointer_arrays != 3) {
    return absl::InvalidArgumentError(
        "cuBLASLt: pointer-array batches need pointer arrays for A, B and C "
        "alike");
  }
  if (pointer_arrays == 0 && p.batch > 1 && p.c.strides.batch == 0) {
    return absl::InvalidArgumentError(
        "cuBLASLt: C cannot be broadcast (batch stride 0) over a batch");
  }
  RETURN_IF_ERROR(Classify(p.a.strides, p.m, p.k, "A").status());
  RETURN_IF_ERROR(Classify(p.b.strides, p.k, p.n, "B").status());
  RETURN_IF_ERROR(Classify(p.c.strides, p.m, p.n, "C").status());
  return absl::OkStatus();
}

std::string CublasLtGemm::PlanKey(const GemmProblem& p) {
  const bool pointer_array = p.a.pointers != nullptr;
  auto strides = [](const Strides& s) {
    return absl::StrCat(s.batch, ",", s.row, ",", s.col);
  };
  return absl::StrCat(
      p.batch, "x", p.m, "x", p.n, "x", p.k, "|", strides(p.a.strides), "|",
      strides(p.b.strides), "|", strides(p.c.strides), "|",
      DTypeName(p.c_dtype), "|", pointer_array ? "ptr" : "strided", "|",
      ProblemAlignment(p.a.data, p.a.pointers, p.a.pointer_alignment, 2), ",",
      ProblemAlignment(p.b.data, p.b.pointers, p.b.pointer_alignment, 2), ",",
      ProblemAlignment(p.c.data, p.c.pointers, p.c.pointer_alignment,
                       DTypeSize(p.c_dtype)));
}

absl::StatusOr<std::shared_ptr<const CublasLtPlan>> CublasLtGemm::GetPlan(
    const GemmProblem& problem) {
  RETURN_IF_ERROR(CanImplement(problem));
  std::string key = PlanKey(problem);
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  // Built outside the lock: the heuristic query takes a while and other
  // shapes should not wait for it. Two threads may build the same plan; the
  // first one stored wins.
  ASSIGN_OR_RETURN(std::unique_ptr<CublasLtPlan> built,
                   BuildPlan(problem, key));
  std::shared_ptr<const CublasLtPlan> plan = std::move(built);
  absl::MutexLock lock(&mu_);
  // A bound on the cache: a daemon fed endless distinct shapes must not
  // grow without limit. Dropping everything is crude but rare.
  if (plans_.size() >= 4096) plans_.clear();
  auto [it, inserted] = plans_.emplace(std::move(key), plan);
  return it->second;
}

absl::StatusOr<std::unique_ptr<CublasLtPlan>> CublasLtGemm::BuildPlan(
    const GemmProblem& p, std::string key) const {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  ASSIGN_OR_RETURN(MatrixLayout a, Classify(p.a.strides, p.m, p.k, "A"));
  ASSIGN_OR_RETURN(MatrixLayout b, Classify(p.b.strides, p.k, p.n, "B"));
  ASSIGN_OR_RETURN(MatrixLayout c, Classify(p.c.strides, p.m, p.n, "C"));

  auto plan = std::unique_ptr<CublasLtPlan>(new CublasLtPlan());
  plan->key_ = std::move(key);
  plan->pointer_array_ = p.a.pointers != nullptr;
  plan->swap_operands_ = c.order == MatrixOrder::kRowMajor;
  plan->min_alignment_[0] =
      ProblemAlignment(p.a.data, p.a.pointers, p.a.pointer_alignment, 2);
  plan->min_alignment_[1] =
      ProblemAlignment(p.b.data, p.b.pointers, p.b.pointer_alignment, 2);
  plan->min_alignment_[2] = ProblemAlignment(
      p.c.data, p.c.pointers, p.c.pointer_alignment, DTypeSize(p.c_dtype));

  // Row-major C: D' = C^T (n x m) = B^T * A^T, cuBLASLt's A is our B.
  // Column-major C: D = C (m x n) = A * B.
  LtOperand lt_a, lt_b;
  int64_t stride_a, stride_b;
  uint64_t c_rows, c_cols;
  size_t align_a, align_b;
  if (plan->swap_operands_) {
    lt_a = Describe(b, p.k, p.n, /*want_transpose=*/true);
    lt_b = Describe(a, p.m, p.k, /*want_transpose=*/true);
    stride_a = p.b.strides.batch;
    stride_b = p.a.strides.batch;
    align_a = plan->min_alignment_[1];
    align_b = plan->min_alignment_[0];
    c_rows = p.n;
    c_cols = p.m;
  } else {
    lt_a = Describe(a, p.m, p.k, /*want_transpose=*/false);
    lt_b = Describe(b, p.k, p.n, /*want_transpose=*/false);
    stride_a = p.a.strides.batch;
    stride_b = p.b.strides.batch;
    align_a = plan->min_alignment_[0];
    align_b = plan->min_alignment_[1];
    c_rows = p.m;
    c_cols = p.n;
  }

  RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescCreate(&plan->desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "cublasLtMatmulDescCreate"));
  const int32_t op_a = lt_a.op, op_b = lt_b.op;
  RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSA,
                                     &op_a, sizeof(op_a)),
      "cublasLtMatmulDescSetAttribute(TRANSA)"));
  RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSB,
                                     &op_b, sizeof(op_b)),
      "cublasLtMatmulDescSetAttribute(TRANSB)"));

  const cudaDataType c_type =
      p.c_dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  plan->c_type_ = c_type;
  ASSIGN_OR_RETURN(plan->layout_a_,
                   MakeLayout(CUDA_R_16BF, lt_a.rows, lt_a.cols, lt_a.ld,
                              p.batch, stride_a, plan->pointer_array_));
  ASSIGN_OR_RETURN(plan->layout_b_,
                   MakeLayout(CUDA_R_16BF, lt_b.rows, lt_b.cols, lt_b.ld,
                              p.batch, stride_b, plan->pointer_array_));
  ASSIGN_OR_RETURN(plan->layout_c_,
                   MakeLayout(c_type, c_rows, c_cols, c.ld, p.batch,
                              p.c.strides.batch, plan->pointer_array_));

  cublasLtMatmulPreference_t preference = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasLtMatmulPreferenceCreate(&preference),
                               "cublasLtMatmulPreferenceCreate"));
  auto preference_guard =
      std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                      decltype(&cublasLtMatmulPreferenceDestroy)>(
          preference, &cublasLtMatmulPreferenceDestroy);
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr,
                      auto value) -> absl::Status {
    return CublasStatus(cublasLtMatmulPreferenceSetAttribute(
                            preference, attr, &value, sizeof(value)),
                        "cublasLtMatmulPreferenceSetAttribute");
  };
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                           uint64_t{workspace_bytes_}));
  // Without these cuBLASLt assumes 256-byte aligned buffers and may pick a
  // kernel that faults on an offset into a registered region.
  RETURN_IF_ERROR(
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(align_a)));
  RETURN_IF_ERROR(
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(align_b)));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                           uint32_t(plan->min_alignment_[2])));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                           uint32_t(plan->min_alignment_[2])));

  plan->results_.resize(top_k_);
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc_, plan->layout_a_, plan->layout_b_, plan->layout_c_,
      plan->layout_c_, preference, top_k_, plan->results_.data(), &returned);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || returned == 0) {
    return absl::NotFoundError(
        absl::StrCat("cuBLASLt heuristic offers no algorithm for ",
                     ShapeName(p), " (", plan->key_, ")"));
  }
  RETURN_IF_ERROR(CublasStatus(status, "cublasLtMatmulAlgoGetHeuristic"));
  plan->results_.resize(returned);
  return plan;
}

absl::Status CublasLtGemm::Run(const CublasLtPlan& plan, int algo_index,
                               const GemmProblem& p, cudaStream_t stream,
                               void* workspace, size_t workspace_bytes) const {
  if (algo_index < 0 || algo_index >= plan.algo_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLASLt candidate ", algo_index, " out of range [0, ",
                     plan.algo_count(), ")"));
  }
  return RunAlgo(plan, plan.results_[algo_index], p, stream, workspace,
                 workspace_bytes);
}

absl::Status CublasLtGemm::RunAlgo(
    const CublasLtPlan& plan, const cublasLtMatmulHeuristicResult_t& result,
    const GemmProblem& p, cudaStream_t stream, void* workspace,
    size_t workspace_bytes) const {
  if (result.workspaceSize > workspace_bytes ||
      (result.workspaceSize > 0 && workspace == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuBLASLt algorithm ", AlgoId(result.algo), " needs ",
        result.workspaceSize, " bytes of workspace, got ", workspace_bytes));
  }
  // The plan's algorithms were chosen for pointers at least this aligned.
  if (ProblemAlignment(p.a.data, p.a.pointers, p.a.pointer_alignment, 2) <
          plan.min_alignment_[0] ||
      ProblemAlignment(p.b.data, p.b.pointers, p.b.pointer_alignment, 2) <
          plan.min_alignment_[1] ||
      ProblemAlignment(p.c.data, p.c.pointers, p.c.pointer_alignment,
                       DTypeSize(p.c_dtype)) < plan.min_alignment_[2]) {
    return absl::FailedPreconditionError(
        "cuBLASLt plan was built for more strictly aligned pointers");
  }
  const void* a =
      plan.pointer_array_ ? static_cast<const void*>(p.a.pointers) : p.a.data;
  const void* b =
      plan.pointer_array_ ? static_cast<const void*>(p.b.pointers) : p.b.data;
  void* c = plan.pointer_array_
                ? static_cast<void*>(const_cast<void**>(p.c.pointers))
                : p.c.data;
  const void* lt_a = plan.swap_operands_ ? b : a;
  const void* lt_b = plan.swap_operands_ ? a : b;
  return CublasStatus(
      cublasLtMatmul(handle_, plan.desc_, &p.alpha, lt_a, plan.layout_a_, lt_b,
                     plan.layout_b_, &p.beta, c, plan.layout_c_, c,
                     plan.layout_c_, &result.algo, workspace,
                     result.workspaceSize, stream),
      "cublasLtMatmul");
}

absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>>
CublasLtGemm::AllAlgos(const CublasLtPlan& plan,
                       const std::function<void(int index, int count,
                                                int algo_id)>& on_algo) const {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  std::vector<int> ids(1024);
  int id_count = 0;
  RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmulAlgoGetIds(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                               CUDA_R_16BF, CUDA_R_16BF, plan.c_type_,
                               plan.c_type_, static_cast<int>(ids.size()),
                               ids.data(), &id_count),
      "cublasLtMatmulAlgoGetIds"));
  ids.resize(id_count);

  // A capability that lists ids (tiles, stages), or {0} (undefined: the
  // algorithm chooses) where it lists none.
  auto id_list = [](const cublasLtMatmulAlgo_t& algo,
                    cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    std::vector<uint32_t> values;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) ==
            CUBLAS_STATUS_SUCCESS &&
        bytes >= sizeof(uint32_t)) {
      values.resize(bytes / sizeof(uint32_t));
      if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, values.data(), bytes,
                                            &bytes) != CUBLAS_STATUS_SUCCESS) {
        values.clear();
      }
    }
    if (values.empty()) values.push_back(0);
    return values;
  };

  std::vector<cublasLtMatmulHeuristicResult_t> found;
  for (int i = 0; i < id_count; ++i) {
    if (on_algo) on_algo(i, id_count, ids[i]);
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                               CUDA_R_16BF, CUDA_R_16BF, plan.c_type_,
                               plan.c_type_, ids[i],
                               &algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    uint32_t swizzle_support = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(
        &algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_support,
        sizeof(swizzle_support), &written);
    for (uint32_t tile : id_list(algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint32_t stages : id_list(algo, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
        for (uint32_t swizzle = 0; swizzle <= (swizzle_support ? 1u : 0u);
             ++swizzle) {
          cublasLtMatmulAlgo_t configured = algo;
          auto set = [&](cublasLtMatmulAlgoConfigAttributes_t attr,
                         uint32_t value) {
            return cublasLtMatmulAlgoConfigSetAttribute(
                       &configured, attr, &value, sizeof(value)) ==
                   CUBLAS_STATUS_SUCCESS;
          };
          if (!set(CUBLASLT_ALGO_CONFIG_TILE_ID, tile) ||
              !set(CUBLASLT_ALGO_CONFIG_STAGES_ID, stages) ||
              !set(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle)) {
            continue;
          }
          cublasLtMatmulHeuristicResult_t result{};
          if (cublasLtMatmulAlgoCheck(handle_, plan.desc_, plan.layout_a_,
                                      plan.layout_b_, plan.layout_c_,
                                      plan.layout_c_, &configured,
                                      &result) != CUBLAS_STATUS_SUCCESS ||
              result.workspaceSize > workspace_bytes_) {
            continue;
          }
          // The check reports but never fills in the algorithm.
          result.algo = configured;
          found.push_back(result);
        }
      }
    }
  }
  return found;
}

}  // namespace matmul::cuda
