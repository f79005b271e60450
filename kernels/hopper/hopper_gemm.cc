#include "kernels/hopper/hopper_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/gemm/matrix_layout.h"
#include "common/gemm/shape_name.h"
#include "kernels/hopper/internal/launch.h"
#include "kernels/hopper/internal/params.h"
#include "kernels/hopper/internal/schedule.h"
#include "kernels/hopper/internal/tile_shape.h"
#include "kernels/tma/tensor_maps.h"

namespace matmul::hopper {
namespace {

using internal::kBlockK;
using internal::kBlockM;
using internal::kBlockN;
using internal::kTileElements;
using internal::Schedule;

int64_t CeilDiv(int64_t x, int64_t y) { return (x + y - 1) / y; }

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// The copy engine's rule for a matrix it reads or writes.
absl::Status CheckTmaOperand(const char* name, const void* data, int64_t ld,
                             DType dtype) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0 ||
      ld * static_cast<int64_t>(DTypeSize(dtype)) % 16 != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name,
        ": the Hopper kernel needs a 16-byte aligned base and rows a "
        "multiple of 16 bytes apart; got leading dimension ",
        ld, " of ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

// A batch's matrices must lie whole 16-byte pieces apart for the copy
// engine (or 0 apart: one matrix for the whole batch).
absl::Status CheckBatchStride(const char* name, int64_t stride, DType dtype) {
  if (stride < 0 || stride * static_cast<int64_t>(DTypeSize(dtype)) % 16 != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name,
        ": the Hopper kernel needs a batch's matrices a multiple of 16 "
        "bytes apart (or 0: one for all); got a batch stride of ",
        stride, " ", DTypeName(dtype), " elements"));
  }
  return absl::OkStatus();
}

// The row pitch the tensor map of a matrix stored as `stored_rows` rows of
// pitch `ld` gets. A single row's pitch is never stepped over, so its
// length rounded up to the copy engine's 16 bytes does as well as any.
int64_t MapPitch(int64_t ld, int64_t stored_rows, DType dtype) {
  if (stored_rows > 1) return ld;
  const int64_t per_16_bytes = 16 / static_cast<int64_t>(DTypeSize(dtype));
  return CeilDiv(ld, per_16_bytes) * per_16_bytes;
}

// How the tensor maps see `p`'s operands (row- or column-major A and B,
// row-major C): which of A and B are MN-major, and the pitch each map
// gets. CanImplement checks these pitches, Run encodes them.
struct MapLayout {
  bool a_mn_major = false;  // A stored [k, m]
  bool b_mn_major = false;  // B stored [k, n]
  int64_t lda = 0, ldb = 0, ldc = 0;
};

MapLayout MapLayoutOf(const GemmProblem& p) {
  const MatrixLayout a = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout b = ClassifyLayout(p.b.strides, p.k, p.n);
  MapLayout l;
  l.a_mn_major = a.order == MatrixOrder::kColMajor;
  l.b_mn_major = b.order == MatrixOrder::kRowMajor;
  l.lda = MapPitch(a.ld, l.a_mn_major ? p.k : p.m, DType::kBF16);
  l.ldb = MapPitch(b.ld, l.b_mn_major ? p.k : p.n, DType::kBF16);
  l.ldc = MapPitch(ClassifyLayout(p.c.strides, p.m, p.n).ld, p.m, p.c_dtype);
  return l;
}

// The persistent grid for `p` and the work it walks. The kernel derives
// its schedule from the grid, so the grid is what the schedule was planned
// for: a block per SM where tiles split (the split units need the idle
// clusters), otherwise no more clusters than tiles.
struct Plan {
  int blocks = 0;          // with the workspace: split as the schedule says
  int unsplit_blocks = 0;  // without it
  Schedule schedule{0, 1, 0, false};
  size_t partial_bytes = 0;  // workspace for the split units
  size_t arrival_bytes = 0;
};

absl::StatusOr<Plan> PlanFor(const GemmProblem& p, const Config& c,
                             int device) {
  int sms = 0;
  if (cudaError_t e =
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return CudaError(e, "cudaDeviceGetAttribute(MultiProcessorCount)");
  }
  const int64_t tiles =
      CeilDiv(p.m, c.BlockM() * c.cluster) * CeilDiv(p.n, c.BlockN()) * p.batch;
  const int most = std::max(1, sms / c.cluster);
  const int fewest = static_cast<int>(std::min<int64_t>(most, tiles));
  Plan plan;
  // The ping-pong kernel splits nothing.
  plan.schedule =
      Schedule(static_cast<int>(tiles), most,
               static_cast<int>(CeilDiv(p.k, kBlockK)), !c.pingpong);
  plan.unsplit_blocks = fewest * c.cluster;
  plan.blocks =
      plan.schedule.parts > 1 ? most * c.cluster : plan.unsplit_blocks;
  const int64_t split_tiles = plan.schedule.split_tiles();
  plan.partial_bytes = sizeof(float) * kTileElements * split_tiles *
                       plan.schedule.parts * c.cluster;
  plan.arrival_bytes = sizeof(int) * split_tiles * c.cluster;
  return plan;
}

}  // namespace

int Config::BlockM() const {
  return pingpong ? internal::pingpong::kBlockM : kBlockM;
}

int Config::BlockN() const {
  return pingpong ? internal::pingpong::kBlockN : kBlockN;
}

std::string Config::Name() const {
  std::string name =
      absl::StrCat("wgmma_", BlockM(), "x", BlockN(), "x", kBlockK, "_s",
                   pingpong ? internal::pingpong::kStages : internal::kStages);
  if (cluster > 1) absl::StrAppend(&name, "_c", cluster);
  if (pingpong) absl::StrAppend(&name, "_pp");
  return name;
}

int Config::SharedBytes() const {
  return pingpong ? internal::pingpong::kSharedBytes : internal::kSharedBytes;
}

const std::vector<Config>& AllConfigs() {
  static const std::vector<Config> configs = {
      {1, false}, {2, false}, {1, true}};
  return configs;
}

absl::Status CanImplement(const GemmProblem& p, const Config& c, int device) {
  if ((c.cluster != 1 && c.cluster != 2) || (c.pingpong && c.cluster != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no Hopper config with clusters of ", c.cluster,
                     c.pingpong ? " (ping-pong)" : ""));
  }
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("m, n, k and batch must be >= 1; got m=", p.m, " n=", p.n,
                     " k=", p.k, " batch=", p.batch));
  }
  if (p.a.data == nullptr || p.b.data == nullptr || p.c.data == nullptr) {
    return absl::InvalidArgumentError("A, B and C need data pointers");
  }
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat("m, n and k must be < 2^31; got ", ShapeName(p)));
  }
  if (p.a.pointers != nullptr || p.b.pointers != nullptr ||
      p.c.pointers != nullptr) {
    return absl::FailedPreconditionError(
        "the Hopper kernel runs single products and strided batches, not "
        "pointer arrays");
  }
  if (p.batch > 1) {
    if (auto s = CheckBatchStride("A", p.a.strides.batch, DType::kBF16);
        !s.ok()) {
      return s;
    }
    if (auto s = CheckBatchStride("B", p.b.strides.batch, DType::kBF16);
        !s.ok()) {
      return s;
    }
    if (auto s = CheckBatchStride("C", p.c.strides.batch, p.c_dtype); !s.ok()) {
      return s;
    }
    if (p.c.strides.batch == 0) {
      return absl::InvalidArgumentError(
          "a batch's products cannot all write one C (batch stride 0)");
    }
    // The kernel numbers the tiles of the whole batch in an int; its
    // smallest tiles are 128 x 128.
    if (CeilDiv(p.m, 128) * CeilDiv(p.n, 128) * p.batch > INT_MAX) {
      return absl::FailedPreconditionError(
          absl::StrCat("the Hopper kernel numbers a batch's tiles in 31 bits; ",
                       ShapeName(p), " x ", p.batch, " has more"));
    }
  }
  const MatrixLayout a = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout b = ClassifyLayout(p.b.strides, p.k, p.n);
  const MatrixLayout out = ClassifyLayout(p.c.strides, p.m, p.n);
  if (a.order == MatrixOrder::kStrided || b.order == MatrixOrder::kStrided ||
      out.order != MatrixOrder::kRowMajor) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the Hopper kernel takes row- or column-major A and B and a "
        "row-major C; got ",
        ShapeName(p)));
  }
  const MapLayout maps = MapLayoutOf(p);
  if (auto s = CheckTmaOperand("A", p.a.data, maps.lda, DType::kBF16);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckTmaOperand("B", p.b.data, maps.ldb, DType::kBF16);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckTmaOperand("C", p.c.data, maps.ldc, p.c_dtype); !s.ok()) {
    return s;
  }
  // A TMA store writes whole 16-byte pieces: a row of C that ends inside
  // one would have the elements after it, which may be another tensor's,
  // overwritten.
  if (p.n * static_cast<int64_t>(DTypeSize(p.c_dtype)) % 16 != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the Hopper kernel stores rows of C in 16-byte pieces; a row of ", p.n,
        " ", DTypeName(p.c_dtype), " elements is not a whole number of them"));
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("the Hopper kernel cannot read device ", device, ": ",
                     cudaGetErrorString(e)));
  }
  if (major != 9 || minor != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the Hopper kernel is built for sm_90a; device ", device,
                     " has compute capability ", major, ".", minor));
  }
  if (!tma::HaveTensorMapEncoder()) {
    return absl::FailedPreconditionError(
        "the CUDA driver offers no cuTensorMapEncodeTiled");
  }
  return absl::OkStatus();
}

size_t WorkspaceBytes(const GemmProblem& p, const Config& c, int device) {
  const absl::StatusOr<Plan> plan = PlanFor(p, c, device);
  return plan.ok() ? plan->partial_bytes + plan->arrival_bytes : 0;
}

size_t MaxWorkspaceBytes(int multiprocessors) {
  return static_cast<size_t>(multiprocessors) *
         (sizeof(float) * internal::kTileElements + sizeof(int));
}

absl::Status Run(const GemmProblem& p, const Config& c, int device,
                 cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  if (auto s = CanImplement(p, c, device); !s.ok()) return s;
  const absl::StatusOr<Plan> plan = PlanFor(p, c, device);
  if (!plan.ok()) return plan.status();
  // K-major operands are read in boxes of a tile's rows (B's shared among
  // the cluster), MN-major ones in boxes of 64 K-rows; C is written in
  // chunks of 64 rows. Every box is one 128-byte row wide.
  const MapLayout maps = MapLayoutOf(p);
  const bool a_mn_major = maps.a_mn_major;
  const bool b_mn_major = maps.b_mn_major;
  const int64_t lda = maps.lda;
  const int64_t ldb = maps.ldb;
  // Rank 3 maps (column, row, matrix of the batch); an operand broadcast
  // over the batch (batch stride 0) is a batch of one, always matrix 0.
  auto matrices = [&](int64_t stride) { return stride != 0 ? p.batch : 1; };
  const int64_t a_batch = matrices(p.a.strides.batch);
  const int64_t b_batch = matrices(p.b.strides.batch);
  CUtensorMap a_map, b_map, c_map;
  absl::Status encoded =
      a_mn_major ? tma::EncodeBatchedMatrixMap(&a_map, DType::kBF16, p.a.data,
                                               p.m, p.k, lda, a_batch,
                                               p.a.strides.batch, kBlockK)
                 : tma::EncodeBatchedMatrixMap(&a_map, DType::kBF16, p.a.data,
                                               p.k, p.m, lda, a_batch,
                                               p.a.strides.batch, c.BlockM());
  if (!encoded.ok()) return encoded;
  encoded = b_mn_major
                ? tma::EncodeBatchedMatrixMap(&b_map, DType::kBF16, p.b.data,
                                              p.n, p.k, ldb, b_batch,
                                              p.b.strides.batch, kBlockK)
                : tma::EncodeBatchedMatrixMap(
                      &b_map, DType::kBF16, p.b.data, p.k, p.n, ldb, b_batch,
                      p.b.strides.batch, c.BlockN() / c.cluster);
  if (!encoded.ok()) return encoded;
  encoded =
      tma::EncodeBatchedMatrixMap(&c_map, p.c_dtype, p.c.data, p.n, p.m,
                                  maps.ldc, p.batch, p.c.strides.batch, 64);
  if (!encoded.ok()) return encoded;
  internal::GemmParams params;
  params.m = static_cast<int>(p.m);
  params.n = static_cast<int>(p.n);
  params.k = static_cast<int>(p.k);
  params.batch = static_cast<int>(p.batch);
  params.a_batch_step = a_batch > 1 ? 1 : 0;
  params.b_batch_step = b_batch > 1 ? 1 : 0;
  params.alpha = p.alpha;
  params.beta = p.beta;
  const size_t needed = plan->partial_bytes + plan->arrival_bytes;
  int blocks = plan->unsplit_blocks;
  if (needed > 0 && workspace != nullptr && workspace_bytes >= needed) {
    blocks = plan->blocks;
    params.partials = static_cast<float*>(workspace);
    params.arrivals = reinterpret_cast<int*>(static_cast<char*>(workspace) +
                                             plan->partial_bytes);
    if (cudaError_t e =
            cudaMemsetAsync(params.arrivals, 0, plan->arrival_bytes, stream);
        e != cudaSuccess) {
      return CudaError(e, "cudaMemsetAsync(arrivals)");
    }
  }
  const bool fp32_out = p.c_dtype == DType::kFP32;
  if (cudaError_t e =
          c.pingpong ? internal::LaunchPingPongGemm(
                           a_mn_major, b_mn_major, fp32_out, a_map, b_map,
                           c_map, params, blocks, stream)
                     : internal::LaunchGemm(c.cluster, a_mn_major, b_mn_major,
                                            fp32_out, a_map, b_map, c_map,
                                            params, blocks, stream);
      e != cudaSuccess) {
    return CudaError(e, "launching the Hopper kernel");
  }
  return absl::OkStatus();
}

}  // namespace matmul::hopper
