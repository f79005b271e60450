// Tests of the Hopper GEMM. The CanImplement tests need no device and always
// run; the GPU tests check every config in every operand layout against the
// FP64 reference on fresh random operands and a NaN-poisoned C, and skip
// (with the reason) without a device of compute capability 9.0.
#include "kernels/hopper/hopper_gemm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/reference_gemm.h"
#include "gtest/gtest.h"

namespace matmul::hopper {
namespace {

constexpr uint16_t kPoisonBf16 = 0x7fc1;      // a quiet NaN
constexpr uint32_t kPoisonFp32 = 0x7fc00bad;  // a quiet NaN

// Empty when device 0 can run the kernel, else why not.
std::string NoHopperReason() {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("no CUDA device: ", cudaGetErrorString(e));
  }
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    return "cannot read device 0";
  }
  if (prop.major != 9 || prop.minor != 0) {
    return absl::StrCat("device 0 (", prop.name, ") is not sm_90");
  }
  return "";
}

// A well-formed NT problem on made-up, aligned addresses: what CanImplement
// looks at before it asks the device.
GemmProblem FakeNt(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a.data = reinterpret_cast<const void*>(uintptr_t{0x10000});
  p.a.strides = {0, k, 1};
  p.b.data = reinterpret_cast<const void*>(uintptr_t{0x20000});
  p.b.strides = {0, 1, k};
  p.c.data = reinterpret_cast<void*>(uintptr_t{0x30000});
  p.c.strides = {0, n, 1};
  return p;
}

TEST(HopperCanImplementTest, RejectsWhatTheKernelDoesNotTake) {
  const Config config = AllConfigs()[0];
  auto code = [&](const GemmProblem& p) {
    return CanImplement(p, config, 0).code();
  };
  GemmProblem p = FakeNt(0, 64, 64);
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = FakeNt(64, 64, 64);
  p.a.strides = {0, 128, 2};  // A strided
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p = FakeNt(64, 64, 64);
  p.c.strides = {0, 1, 64};  // C column-major
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p = FakeNt(64, 64, 64);
  p.batch = 2;
  p.a.strides.batch = p.b.strides.batch = p.c.strides.batch = 64 * 64;
  const void* const entries[2] = {p.a.data, p.a.data};
  p.a.pointers = entries;  // pointer arrays
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p.a.pointers = nullptr;
  p.c.strides.batch = 64 * 64 + 4;  // C's matrices 8 bytes off 16
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p.c.strides.batch = 0;  // every product writing one C
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = FakeNt(64, 64, 64);
  p.c_dtype = DType::kFP32;
  p.c.strides = {0, 66, 1};  // FP32 rows 264 bytes apart
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p = FakeNt(64, 64, 60);
  p.a.strides = {0, 60, 1};  // leading dimension not a multiple of 8
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p = FakeNt(64, 64, 64);
  p.b.data = reinterpret_cast<const void*>(uintptr_t{0x20008});
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
  p = FakeNt(64, 63, 64);
  p.c.strides = {0, 64, 1};  // a row of C ends inside a 16-byte piece
  EXPECT_EQ(code(p), absl::StatusCode::kFailedPrecondition);
}

// A single row's pitch is never used, so it need not be a multiple of 16
// bytes (the pitch of a 1 x 63 A taken as row-major is 63 elements).
TEST(HopperCanImplementTest, SingleRowsNeedNoAlignedPitch) {
  GemmProblem p = FakeNt(1, 64, 63);
  p.a.strides = {0, 63, 1};
  p.b.strides = {0, 1, 64};
  // Without a device it is refused later, for that.
  const absl::Status s = CanImplement(p, AllConfigs()[0], 0);
  EXPECT_EQ(std::string(s.message()).find("16 bytes"), std::string::npos) << s;
}

TEST(HopperCanImplementTest, NamesAreStable) {
  ASSERT_EQ(AllConfigs().size(), 3u);
  EXPECT_EQ(AllConfigs()[0].Name(), "wgmma_128x256x64_s4");
  EXPECT_EQ(AllConfigs()[1].Name(), "wgmma_128x256x64_s4_c2");
  EXPECT_EQ(AllConfigs()[2].Name(), "wgmma_128x128x64_s6_pp");
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceBuffer = std::unique_ptr<void, CudaFree>;

DeviceBuffer DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess);
  return DeviceBuffer(p);
}

int64_t RoundUp8(int64_t x) { return (x + 7) / 8 * 8; }

// C = alpha * op(A) * op(B): A "N" stored [m, k] or "T" stored [k, m], B
// "N" stored [k, n] or "T" stored [n, k], leading dimensions padded by the
// given multiples of 8 elements.
struct Case {
  int64_t m, n, k;
  char la = 'N', lb = 'T';
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType c_dtype = DType::kBF16;
  // A strided batch: matrices 8 elements (16 or 32 bytes) apart beyond
  // their size; with shared_b one B for all.
  int64_t batch = 1;
  bool shared_b = false;

  int64_t a_rows() const { return la == 'N' ? m : k; }
  int64_t b_rows() const { return lb == 'T' ? n : k; }
  int64_t a_stride() const { return batch > 1 ? a_rows() * lda() + 8 : 0; }
  int64_t b_stride() const {
    return batch > 1 && !shared_b ? b_rows() * ldb() + 8 : 0;
  }
  int64_t c_stride() const { return batch > 1 ? m * ldc() + 8 : 0; }
  // Elements each buffer holds.
  int64_t a_size() const {
    return batch > 1 ? batch * a_stride() : a_rows() * lda();
  }
  int64_t b_size() const {
    return b_stride() > 0 ? batch * b_stride() : b_rows() * ldb();
  }
  int64_t c_size() const { return batch > 1 ? batch * c_stride() : m * ldc(); }
  int64_t lda() const { return RoundUp8(la == 'N' ? k : m) + pad_a; }
  int64_t ldb() const { return RoundUp8(lb == 'T' ? k : n) + pad_b; }
  int64_t ldc() const { return RoundUp8(n) + pad_c; }
  std::string Describe() const {
    return absl::StrCat(
        m, "x", n, "x", k, " ", std::string{la, lb}, " lda=", lda(),
        " ldb=", ldb(), " ldc=", ldc(), " alpha=", alpha, " beta=", beta, " ",
        DTypeName(c_dtype), " batch=", batch, shared_b ? " (one B)" : "");
  }
};

GemmProblem Problem(const Case& c, const void* a, const void* b, void* out) {
  GemmProblem p;
  p.batch = c.batch;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.a.data = a;
  p.a.strides = c.la == 'N' ? Strides{c.a_stride(), c.lda(), 1}
                            : Strides{c.a_stride(), 1, c.lda()};
  p.b.data = b;
  p.b.strides = c.lb == 'N' ? Strides{c.b_stride(), c.ldb(), 1}
                            : Strides{c.b_stride(), 1, c.ldb()};
  p.c.data = out;
  p.c.strides = {c.c_stride(), c.ldc(), 1};
  p.alpha = c.alpha;
  p.beta = c.beta;
  p.c_dtype = c.c_dtype;
  return p;
}

// The reference of rows [row0, row0 + rows) of `p` (host pointers) against
// the same rows of its output, as a relative error.
// Rows [row0, row0 + rows) of `p`.
GemmProblem Band(const GemmProblem& p, int64_t row0, int64_t rows) {
  GemmProblem band = p;
  band.m = rows;
  // Row i of A starts i * strides.row elements in, either layout.
  band.a.data = static_cast<const uint16_t*>(p.a.data) + row0 * p.a.strides.row;
  band.c.data = static_cast<char*>(p.c.data) +
                row0 * p.c.strides.row * DTypeSize(p.c_dtype);
  return band;
}

// The relative error of those rows of `result` (host pointers, C as the
// kernel left it) against the reference of `before` (C as it was).
double BandError(const GemmProblem& result, const GemmProblem& before,
                 int64_t row0, int64_t rows) {
  return RelativeError(ReadOutput(Band(result, row0, rows)),
                       ReferenceGemm(Band(before, row0, rows)));
}

// Runs `c` with `config` on fresh random operands and a C that is poisoned
// (random within the matrix when beta reads it), with or without the
// workspace that splits the last round, and checks C (bands of rows where
// the whole reference would be slow) and that nothing outside it was
// written.
void RunAndCheck(const Case& c, const Config& config, bool workspace) {
  SCOPED_TRACE(absl::StrCat(c.Describe(), " ", config.Name(),
                            workspace ? " with workspace" : " no workspace"));
  std::random_device seed_source;
  const uint64_t seed = (uint64_t{seed_source()} << 32) | seed_source();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<uint16_t> a(c.a_size()), b(c.b_size());
  for (auto& x : a) x = FloatToBf16(value(rng));
  for (auto& x : b) x = FloatToBf16(value(rng));
  // C in its type, poisoned; random within the matrix where beta reads it.
  const bool fp32 = c.c_dtype == DType::kFP32;
  const size_t element = DTypeSize(c.c_dtype);
  std::vector<char> out(c.c_size() * element);
  auto set = [&](int64_t at, float x, bool poison) {
    if (fp32) {
      const uint32_t bits = poison ? kPoisonFp32 : std::bit_cast<uint32_t>(x);
      std::memcpy(&out[at * 4], &bits, 4);
    } else {
      const uint16_t bits = poison ? kPoisonBf16 : FloatToBf16(x);
      std::memcpy(&out[at * 2], &bits, 2);
    }
  };
  auto poisoned = [&](int64_t at) {
    return fp32 ? std::memcmp(&out[at * 4], &kPoisonFp32, 4) == 0
                : std::memcmp(&out[at * 2], &kPoisonBf16, 2) == 0;
  };
  // Element at of C is row (at % c_stride) / ldc of its matrix, column
  // at % ldc; past m * ldc lies the gap to the next matrix.
  auto in_matrix = [&](int64_t at) {
    const int64_t in = c.batch > 1 ? at % c.c_stride() : at;
    return in < c.m * c.ldc() && in % c.ldc() < c.n;
  };
  for (int64_t at = 0; at < c.c_size(); ++at) {
    set(at, value(rng), c.beta == 0.0f || !in_matrix(at));
  }
  const std::vector<char> before = out;

  DeviceBuffer da = DeviceAlloc(a.size() * 2), db = DeviceAlloc(b.size() * 2);
  DeviceBuffer dc = DeviceAlloc(out.size());
  ASSERT_EQ(
      cudaMemcpy(da.get(), a.data(), a.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(db.get(), b.data(), b.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  const GemmProblem device = Problem(c, da.get(), db.get(), dc.get());
  ASSERT_TRUE(CanImplement(device, config, 0).ok());
  const size_t bytes = workspace ? WorkspaceBytes(device, config, 0) : 0;
  DeviceBuffer dw = DeviceAlloc(bytes);
  // Garbage, as a workspace another kernel used last would hold.
  ASSERT_EQ(cudaMemset(dw.get(), 0x5A, std::max<size_t>(bytes, 16)),
            cudaSuccess);
  // Twice, from the same C: the second launch finds the arrival counts the
  // first left.
  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_EQ(cudaMemcpy(dc.get(), before.data(), before.size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(Run(device, config, 0, nullptr, dw.get(), bytes).ok());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(out.data(), dc.get(), out.size(), cudaMemcpyDeviceToHost),
      cudaSuccess);

  for (int64_t at = 0; at < c.c_size(); ++at) {
    if (in_matrix(at)) continue;
    ASSERT_TRUE(poisoned(at))
        << "padding written at element " << at << " (row " << at / c.ldc()
        << ", column " << at % c.ldc() << " counted through the whole buffer)";
  }
  const GemmProblem result = Problem(c, a.data(), b.data(), out.data());
  const GemmProblem reference =
      Problem(c, a.data(), b.data(), const_cast<char*>(before.data()));
  if (c.batch * c.m * c.n * c.k <= 40'000'000) {
    EXPECT_LT(BandError(result, reference, 0, c.m), 1e-2);
    return;
  }
  // The first, a middle and the last rows (the tail tiles).
  const int64_t rows = std::min<int64_t>(16, c.m);
  for (const int64_t row0 : {int64_t{0}, (c.m / 2) / 8 * 8, c.m - rows}) {
    EXPECT_LT(BandError(result, reference, row0, rows), 1e-2)
        << "rows from " << row0;
  }
}

class HopperGemmTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (const std::string why = NoHopperReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
  const Config& config() const { return AllConfigs()[GetParam()]; }
};

TEST_P(HopperGemmTest, SmallAndRaggedShapes) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t kEdges[] = {1,   7,   8,   63,  64,  65,  127,
                            128, 129, 255, 256, 257, 300, 1000};
  // n too, where a row of C stays whole 16-byte pieces (CanImplement).
  const int64_t kNEdges[] = {8,   16,  56,  64,  72,  120, 128,
                             136, 248, 256, 264, 304, 1000};
  auto pick = [&](const auto& edges) {
    return edges[rng() % std::size(edges)];
  };
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  for (int i = 0; i < 16; ++i) {
    Case c{pick(kEdges), pick(kNEdges), pick(kEdges)};
    c.la = (i & 1) ? 'T' : 'N';
    c.lb = (i & 2) ? 'N' : 'T';
    c.pad_a = 8 * static_cast<int64_t>(rng() % 3);
    c.pad_b = 8 * static_cast<int64_t>(rng() % 3);
    c.pad_c = 8 * static_cast<int64_t>(rng() % 3);
    if (i % 8 >= 4) c.alpha = scale(rng);
    if (i % 4 >= 2) c.beta = scale(rng);
    if (i >= 8) c.c_dtype = DType::kFP32;
    RunAndCheck(c, config(), /*workspace=*/true);
  }
}

// Enough tiles for several rounds of the persistent grid, whose last one is
// split along K (with a workspace) or not (without).
TEST_P(HopperGemmTest, PersistentGridWithAndWithoutASplitLastRound) {
  for (const Case& c : {Case{1100, 4000, 1024}, Case{2000, 3000, 4096},
                        Case{5120, 2048, 2048}, Case{5120, 512, 2048}}) {
    RunAndCheck(c, config(), /*workspace=*/true);
    RunAndCheck(c, config(), /*workspace=*/false);
  }
}

// Each layout through the persistent grid and its split last round.
TEST_P(HopperGemmTest, EveryLayoutOnAManyTileShape) {
  for (const char la : {'N', 'T'}) {
    for (const char lb : {'N', 'T'}) {
      RunAndCheck({1100, 4000, 1024, la, lb, 8, 16, 8}, config(),
                  /*workspace=*/true);
    }
  }
}

// C read back in: beta through the split last round and the tail tiles.
TEST_P(HopperGemmTest, BetaReadsC) {
  Case c{1100, 4000, 1024};
  c.alpha = 0.75f;
  c.beta = -1.5f;
  RunAndCheck(c, config(), /*workspace=*/true);
  c = {300, 264, 129, 'T', 'N', 8, 0, 16, 1.0f, 0.5f};
  RunAndCheck(c, config(), /*workspace=*/true);
  c.c_dtype = DType::kFP32;
  RunAndCheck(c, config(), /*workspace=*/true);
}

TEST_P(HopperGemmTest, Fp32Output) {
  Case c{1100, 4000, 1024};
  c.c_dtype = DType::kFP32;
  RunAndCheck(c, config(), /*workspace=*/true);
  c.lb = 'N';
  RunAndCheck(c, config(), /*workspace=*/false);
}

// Strided batches through the third coordinate of the maps: every
// layout, a shared B, beta, FP32 C, and enough tiles for the split round.
TEST_P(HopperGemmTest, StridedBatches) {
  for (const char la : {'N', 'T'}) {
    for (const char lb : {'N', 'T'}) {
      Case c{200, 136, 300, la, lb, 8, 0, 8};
      c.batch = 3;
      RunAndCheck(c, config(), /*workspace=*/true);
    }
  }
  Case c{257, 264, 129, 'N', 'T', 0, 8, 0, 1.5f, -0.5f};
  c.batch = 4;
  c.shared_b = true;
  RunAndCheck(c, config(), /*workspace=*/true);
  c.c_dtype = DType::kFP32;
  RunAndCheck(c, config(), /*workspace=*/false);
  // 7 x 3 x 4 tiles: several rounds of the grid and a split last one.
  c = {900, 1000, 1024};
  c.batch = 4;
  RunAndCheck(c, config(), /*workspace=*/true);
}

TEST_P(HopperGemmTest, SeedShapes) {
  for (const char lb : {'T', 'N'}) {
    RunAndCheck({5120, 11008, 2048, 'N', lb}, config(), /*workspace=*/true);
    RunAndCheck({5120, 2048, 11008, 'N', lb}, config(), /*workspace=*/true);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, HopperGemmTest,
    ::testing::Range(0, static_cast<int>(AllConfigs().size())),
    [](const ::testing::TestParamInfo<int>& info) {
      const Config& config = AllConfigs()[info.param];
      if (config.pingpong) return std::string("PingPong");
      return config.cluster == 1 ? std::string("Plain")
                                 : std::string("Cluster2");
    });

}  // namespace
}  // namespace matmul::hopper
