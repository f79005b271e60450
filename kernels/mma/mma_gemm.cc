#include "kernels/mma/mma_gemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gemm/matrix_layout.h"
#include "common/gemm/shape_name.h"
#include "kernels/mma/internal/configs.h"
#include "kernels/mma/internal/launch.h"
#include "kernels/mma/internal/params.h"
#include "kernels/tma/tensor_maps.h"

namespace matmul::mma {
namespace {

using internal::KernelParams;
using internal::kNumConfigs;
using internal::LaunchFn;

// The grid's y dimension carries the batch.
constexpr int64_t kMaxBatch = 65535;

// The compiled tiles, in the kernel tables' order.
const TileConfig* KernelTiles() {
  static constexpr TileConfig kTiles[kNumConfigs] = {
#define MATMUL_MMA_TILE(bm, bn, bk, st, wm, wn, gm, mb, tmb) \
  TileConfig{bm, bn, bk, st, wm, wn, gm},
      MATMUL_MMA_CONFIGS(MATMUL_MMA_TILE)
#undef MATMUL_MMA_TILE
  };
  return kTiles;
}

bool IsKnown(const TileConfig& c) {
  const auto& all = AllConfigs();
  return std::find(all.begin(), all.end(), c) != all.end();
}

// Index of c's tile into the kernel tables (MATMUL_MMA_CONFIGS order),
// or -1.
int KernelIndex(const TileConfig& c) {
  TileConfig plain = c;
  plain.tma = false;
  const TileConfig* tiles = KernelTiles();
  for (int i = 0; i < kNumConfigs; ++i) {
    if (tiles[i] == plain) return i;
  }
  return -1;
}

// The one of four per-layout kernels (or tables) that serves A and B as
// 'N' or 'T'.
template <typename T>
T ForLayout(char la, char lb, T nn, T nt, T tn, T tt) {
  return la == 'N' ? (lb == 'N' ? nn : nt) : (lb == 'N' ? tn : tt);
}

// The cp.async kernels of one operand layout.
const LaunchFn* LaunchTable(char la, char lb) {
  return ForLayout<const LaunchFn*>(la, lb, internal::kLaunchNN,
                                    internal::kLaunchNT, internal::kLaunchTN,
                                    internal::kLaunchTT);
}

// The TMA kernels of one operand layout.
const LaunchFn* TmaTable(char la, char lb) {
  return ForLayout<const LaunchFn*>(la, lb, internal::kTmaNN, internal::kTmaNT,
                                    internal::kTmaTN, internal::kTmaTT);
}

// Configs with a TMA kernel for the NN and NT layouts (what the service
// runs) get a `_tma` entry; TN and TT may lack one (TmaTable).
bool HasTmaKernel(int kernel_index) {
  return internal::kTmaNN[kernel_index] != nullptr &&
         internal::kTmaNT[kernel_index] != nullptr;
}

// Attribute kAttr of `device`, cached per device (attributes do not
// change), or 0 when it cannot be read.
template <cudaDeviceAttr kAttr>
int CachedAttribute(int device) {
  static std::array<std::atomic<int>, 64> cache{};
  if (device >= 0 && device < 64) {
    if (int v = cache[device].load(std::memory_order_relaxed); v > 0) return v;
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, kAttr, device) != cudaSuccess) {
    cudaGetLastError();  // do not leave the failure for the next caller
    return 0;
  }
  if (device >= 0 && device < 64) cache[device].store(value);
  return value;
}

// An operand's layout by the project's one rule (common/gemm/matrix_layout.h).
struct OperandLayout {
  char tag;    // 'N' (row-major), 'T' (column-major) or 0 (strided)
  int64_t ld;  // its leading dimension
};

OperandLayout LayoutOf(const Strides& s, int64_t rows, int64_t cols) {
  const MatrixLayout layout = ClassifyLayout(s, rows, cols);
  if (layout.order == MatrixOrder::kStrided) return {0, 0};
  return {LayoutTag(layout.order), layout.ld};
}
OperandLayout LayoutA(const GemmProblem& p) {
  return LayoutOf(p.a.strides, p.m, p.k);
}
OperandLayout LayoutB(const GemmProblem& p) {
  return LayoutOf(p.b.strides, p.k, p.n);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status CheckOperand(const char* name, const InputMatrix& x,
                          OperandLayout layout, int64_t batch) {
  if (x.pointers == nullptr && x.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": null data pointer and no pointer array"));
  }
  if (layout.tag == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, ": strides (row ", x.strides.row, ", col ", x.strides.col,
        ") unsupported; expected row == 1 or col == 1 (pack the operand)"));
  }
  // The kernel's full-tile loads address a tile's rows with 32-bit byte
  // offsets (up to 64 rows apart).
  if (layout.ld >= (int64_t{1} << 24)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": leading dimension ", layout.ld,
                     " too large; expected < 2^24 elements"));
  }
  if (layout.ld < 0 ||
      (x.pointers == nullptr && batch > 1 && x.strides.batch < 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": negative strides unsupported"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TileConfig::Name() const {
  return absl::StrCat("mma_", block_m, "x", block_n, "x", block_k, "_s", stages,
                      "_w", warps_m, "x", warps_n, tma ? "_tma" : "");
}

int TileConfig::SharedBytes() const {
  const int stages_bytes = (block_m + block_n) * block_k * 2 * stages;
  return tma ? stages_bytes + internal::TmaExtraSharedBytes(stages)
             : stages_bytes;
}

const std::vector<TileConfig>& AllConfigs() {
  static const std::vector<TileConfig> configs = [] {
    std::vector<TileConfig> list;
    const TileConfig* tiles = KernelTiles();
    for (int i = 0; i < kNumConfigs; ++i) {
      list.push_back(tiles[i]);
      if (HasTmaKernel(i)) {
        TileConfig tma = tiles[i];
        tma.tma = true;
        list.push_back(tma);
      }
    }
    return list;
  }();
  return configs;
}

absl::Status CanImplement(const GemmProblem& p, const TileConfig& c,
                          int max_shared_bytes) {
  if (!IsKnown(c)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tile config ", c.Name()));
  }
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("m, n, k and batch must be >= 1; got m=", p.m, " n=", p.n,
                     " k=", p.k, " batch=", p.batch));
  }
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat("m, n and k must be < 2^31; got ", ShapeName(p)));
  }
  if (p.batch > kMaxBatch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batch ", p.batch, " exceeds ", kMaxBatch, " (split the batch)"));
  }
  if (CeilDiv(p.m, c.block_m) * CeilDiv(p.n, c.block_n) > INT_MAX) {
    return absl::FailedPreconditionError("too many tiles for one grid");
  }
  if (c.SharedBytes() > max_shared_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(c.Name(), " needs ", c.SharedBytes(),
                     " bytes of shared memory per block; the device allows ",
                     max_shared_bytes));
  }
  if (auto s = CheckOperand("A", p.a, LayoutA(p), p.batch); !s.ok()) return s;
  if (auto s = CheckOperand("B", p.b, LayoutB(p), p.batch); !s.ok()) return s;
  const char la = LayoutA(p).tag;
  const char lb = LayoutB(p).tag;
  if (LaunchTable(la, lb)[KernelIndex(c)] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        c.Name(), " has no kernel for ", std::string{la, lb}, " operands: its ",
        la == 'T' ? c.block_m : c.block_n,
        "-element edge of an MN-major operand makes no whole shared row"));
  }
  if (p.c.pointers == nullptr && p.c.data == nullptr) {
    return absl::InvalidArgumentError(
        "C: null data pointer and no pointer array");
  }
  if (p.c.strides.col != 1 || p.c.strides.row < 0 ||
      (p.c.pointers == nullptr && p.batch > 1 && p.c.strides.batch < 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "C: strides (row ", p.c.strides.row, ", col ", p.c.strides.col,
        ") unsupported; expected col == 1 and row >= 0"));
  }
  return absl::OkStatus();
}

size_t WorkspaceBytes(const GemmProblem&, const TileConfig&) { return 0; }

int MaxSharedBytesOptin(int device) {
  return CachedAttribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);
}

bool TakesTmaPath(const GemmProblem& p, const TileConfig& c, int device) {
  if (!c.tma || p.batch != 1 || p.a.pointers != nullptr ||
      p.b.pointers != nullptr || p.c.pointers != nullptr) {
    return false;
  }
  const char la = LayoutA(p).tag;
  const char lb = LayoutB(p).tag;
  if (la == 0 || lb == 0 || LayoutA(p).ld % 8 != 0 || LayoutB(p).ld % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.a.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.b.data) % 16 != 0) {
    return false;
  }
  const int index = KernelIndex(c);
  return index >= 0 && TmaTable(la, lb)[index] != nullptr &&
         CachedAttribute<cudaDevAttrComputeCapabilityMajor>(device) >= 9 &&
         tma::HaveTensorMapEncoder();
}

namespace {

// The copy-engine launch of a single product: both operands' maps, one
// block per tile.
absl::Status RunTma(const GemmProblem& p, const TileConfig& c, KernelParams* k,
                    cudaStream_t stream) {
  const char la = LayoutA(p).tag;
  const char lb = LayoutB(p).tag;
  // A "N" is stored as m rows of k; "T" as k rows of m. B "T" is stored as
  // n rows of k; "N" as k rows of n. Boxes cover a block's rows of a
  // K-major operand and block_k rows of an MN-major one.
  absl::Status s = la == 'N' ? tma::EncodeOperandMap(&k->tma_a, p.a.data, p.k,
                                                     p.m, k->lda, c.block_m)
                             : tma::EncodeOperandMap(&k->tma_a, p.a.data, p.m,
                                                     p.k, k->lda, c.block_k);
  if (!s.ok()) return s;
  s = lb == 'T' ? tma::EncodeOperandMap(&k->tma_b, p.b.data, p.k, p.n, k->ldb,
                                        c.block_n)
                : tma::EncodeOperandMap(&k->tma_b, p.b.data, p.n, p.k, k->ldb,
                                        c.block_k);
  if (!s.ok()) return s;
  const dim3 grid(k->tiles_m * k->tiles_n, 1);
  if (cudaError_t err = TmaTable(la, lb)[KernelIndex(c)](*k, grid, stream);
      err != cudaSuccess) {
    return absl::InternalError(absl::StrCat("launch of ", c.Name(), " for ",
                                            ShapeName(p), ": ",
                                            cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Run(const GemmProblem& p, const TileConfig& c, cudaStream_t stream,
                 void* /*workspace*/) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cudaGetDevice: ", cudaGetErrorString(err)));
  }
  if (auto s = CanImplement(p, c, MaxSharedBytesOptin(device)); !s.ok()) {
    return s;
  }
  const char la = LayoutA(p).tag;
  const char lb = LayoutB(p).tag;
  KernelParams k{};
  k.a = static_cast<const uint16_t*>(p.a.data);
  k.b = static_cast<const uint16_t*>(p.b.data);
  k.c = p.c.data;
  k.a_ptrs = p.a.pointers;
  k.b_ptrs = p.b.pointers;
  k.c_ptrs = p.c.pointers;
  // A broadcast (or single) operand has batch stride 0 either way.
  k.a_batch = p.batch > 1 ? p.a.strides.batch : 0;
  k.b_batch = p.batch > 1 ? p.b.strides.batch : 0;
  k.c_batch = p.batch > 1 ? p.c.strides.batch : 0;
  k.lda = LayoutA(p).ld;
  k.ldb = LayoutB(p).ld;
  k.ldc = p.c.strides.row;
  k.m = static_cast<int>(p.m);
  k.n = static_cast<int>(p.n);
  k.k = static_cast<int>(p.k);
  k.tiles_m = static_cast<int>(CeilDiv(p.m, c.block_m));
  k.tiles_n = static_cast<int>(CeilDiv(p.n, c.block_n));
  k.alpha = p.alpha;
  k.beta = p.beta;
  k.c_fp32 = p.c_dtype == DType::kFP32;
  // 16-byte chunks of a row stay aligned only if every row start is: the
  // leading dimension and (strided mode) the batch stride are multiples of
  // 8 elements. Base pointers are checked per block on the device.
  k.ld_aligned = k.lda % 8 == 0 && k.ldb % 8 == 0 && k.a_batch % 8 == 0 &&
                 k.b_batch % 8 == 0;

  if (TakesTmaPath(p, c, device)) return RunTma(p, c, &k, stream);

  const LaunchFn* table = LaunchTable(la, lb);
  const LaunchFn fallback =
      ForLayout(la, lb, internal::kFallbackNN, internal::kFallbackNT,
                internal::kFallbackTN, internal::kFallbackTT);
  const unsigned batch = static_cast<unsigned>(p.batch);
  // Pointer arrays whose entries the caller vouches for (16-byte aligned)
  // need no fix-up launch.
  auto unverified = [](const InputMatrix& x) {
    return x.pointers != nullptr && x.pointer_alignment < 16;
  };
  const bool pointer_arrays = unverified(p.a) || unverified(p.b);
  const bool bases_aligned =
      (p.a.pointers != nullptr ||
       reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0) &&
      (p.b.pointers != nullptr ||
       reinterpret_cast<uintptr_t>(p.b.data) % 16 == 0);

  auto launch_error = [&](const char* what, cudaError_t err) {
    return absl::InternalError(absl::StrCat("launch of ", what, " for ",
                                            ShapeName(p), ": ",
                                            cudaGetErrorString(err)));
  };
  // The fast kernel, unless the host can already see that no batch entry is
  // aligned.
  if (k.ld_aligned && bases_aligned) {
    const LaunchFn fast = table[KernelIndex(c)];
    const dim3 grid(k.tiles_m * k.tiles_n, batch);
    if (cudaError_t err = fast(k, grid, stream); err != cudaSuccess) {
      return launch_error(c.Name().c_str(), err);
    }
    // With pointer arrays, entries whose bases turn out misaligned were
    // skipped by the fast kernel: a small fix-up launch (a few blocks per
    // entry, each returning at once for aligned entries) covers them.
    if (!pointer_arrays) return absl::OkStatus();
  }
  k.tiles_m = static_cast<int>(CeilDiv(p.m, internal::kFallbackBlockM));
  k.tiles_n = static_cast<int>(CeilDiv(p.n, internal::kFallbackBlockN));
  if (!bases_aligned) k.ld_aligned = 0;  // every entry takes the slow path
  const int tiles = k.tiles_m * k.tiles_n;
  const dim3 grid(k.ld_aligned ? std::min(tiles, 4) : tiles, batch);
  if (cudaError_t err = fallback(k, grid, stream); err != cudaSuccess) {
    return launch_error("the unaligned fallback kernel", err);
  }
  return absl::OkStatus();
}

}  // namespace matmul::mma
