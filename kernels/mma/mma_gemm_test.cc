// GPU tests of the mma.sync GEMM against the FP64 reference and cuBLAS.
// Without a CUDA device every GPU test is skipped with the CUDA error; the
// CanImplement tests need no device and always run.
#include "kernels/mma/mma_gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
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

namespace matmul::mma {
namespace {

constexpr int kSparkSharedBytes = 101376;
constexpr uint16_t kPoisonBf16 = 0x7fc1;      // a quiet NaN
constexpr uint32_t kPoisonFp32 = 0x7fc00bad;  // a quiet NaN

// Empty when a device is usable, else why not.
std::string NoDeviceReason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::StrCat("no CUDA device: ", cudaGetErrorString(err));
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
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

struct CublasDestroy {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
using CublasHandle = std::unique_ptr<cublasContext, CublasDestroy>;

// One randomly drawn test case and its host and device storage. Host
// vectors mirror the device buffers byte for byte, so the same GemmProblem
// with host pointers feeds the reference.
struct Case {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  char la = 'N', lb = 'N';
  bool a_broadcast = false, b_broadcast = false;
  bool pointer_arrays = false;
  bool misaligned = false;  // odd leading dims / bases
  DType c_dtype = DType::kBF16;
  float alpha = 1.0f, beta = 0.0f;

  std::string Describe() const {
    return absl::StrCat(batch, "x", m, "x", n, "x", k, " ", std::string(1, la),
                        std::string(1, lb), a_broadcast ? " bcastA" : "",
                        b_broadcast ? " bcastB" : "",
                        pointer_arrays ? " ptrarray" : "",
                        misaligned ? " misaligned" : "", " ",
                        DTypeName(c_dtype), " alpha=", alpha, " beta=", beta);
  }
};

int64_t PickDim(std::mt19937_64& rng) {
  static const int64_t kEdges[] = {1,   7,   8,   15,  16,  17,  33,  64,
                                   127, 128, 129, 200, 255, 256, 257, 1000};
  if (rng() % 3 == 0) return 1 + static_cast<int64_t>(rng() % 300);
  return kEdges[rng() % (sizeof(kEdges) / sizeof(kEdges[0]))];
}

Case DrawCase(std::mt19937_64& rng, int index) {
  Case c;
  // Keep the FP64 reference cheap: shrink until batch*m*n*k <= 4e7.
  do {
    c.m = PickDim(rng);
    c.n = PickDim(rng);
    c.k = PickDim(rng);
    c.batch = rng() % 2 ? 1 : 2 + static_cast<int64_t>(rng() % 3);
  } while (c.batch * c.m * c.n * c.k > 40'000'000);
  c.la = (index & 1) ? 'T' : 'N';
  c.lb = (index & 2) ? 'T' : 'N';
  if (c.batch > 1) {
    c.a_broadcast = rng() % 4 == 0;
    c.b_broadcast = !c.a_broadcast && rng() % 4 == 0;
    c.pointer_arrays = rng() % 3 == 0;
  }
  c.misaligned = rng() % 5 == 0;
  c.c_dtype = rng() % 2 ? DType::kFP32 : DType::kBF16;
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  c.alpha = rng() % 2 ? 1.0f : scale(rng);
  c.beta = rng() % 2 ? 0.0f : scale(rng);
  return c;
}

// An operand (or C) laid out per the case, with random padding.
struct Layout {
  Strides strides;
  int64_t base_offset = 0;  // elements from the buffer start to entry 0
  int64_t elements = 0;     // buffer size
  std::vector<int64_t> entry_offsets;  // start of each batch entry
};

Layout MakeLayout(std::mt19937_64& rng, int64_t rows, int64_t cols,
                  bool row_unit, int64_t batch, bool broadcast, bool misaligned,
                  bool pointer_arrays) {
  Layout l;
  const int64_t contiguous = row_unit ? rows : cols;
  const int64_t other = row_unit ? cols : rows;
  int64_t ld = contiguous;
  if (misaligned) {
    ld += 1 + static_cast<int64_t>(rng() % 7);
    if (ld % 8 == 0) ++ld;
  } else {
    ld = (ld + 7) / 8 * 8 + 8 * static_cast<int64_t>(rng() % 2);
  }
  if (row_unit) {
    l.strides.row = 1;
    l.strides.col = ld;
  } else {
    l.strides.row = ld;
    l.strides.col = 1;
  }
  int64_t matrix = other * ld;
  // The +8 keeps entries apart when pointer arrays shift some by one.
  int64_t stride =
      (matrix + 7) / 8 * 8 + 8 + 8 * static_cast<int64_t>(rng() % 2);
  if (misaligned) stride += 3;
  l.strides.batch = broadcast ? 0 : stride;
  l.base_offset = misaligned ? 1 : 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t offset = l.base_offset + b * l.strides.batch;
    // Pointer arrays: some entries shifted by one element, so a single
    // launch mixes aligned and misaligned entries.
    if (pointer_arrays && !broadcast && rng() % 3 == 0) offset += 1;
    l.entry_offsets.push_back(offset);
  }
  l.elements = l.base_offset + (batch + 1) * stride + 16;
  return l;
}

void FillRandom(std::mt19937_64& rng, std::vector<uint16_t>& v) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& x : v) x = FloatToBf16(dist(rng));
}

struct RunResult {
  double error = 0.0;
  double cublas_error = 0.0;
  bool tma = false;  // ran the copy-engine kernel
};

// Runs `c` with `config` (and cuBLAS on a copy), checks all invariants with
// gtest assertions and returns both errors.
RunResult RunCase(std::mt19937_64& rng, const Case& tc,
                  const TileConfig& config, cublasHandle_t cublas) {
  RunResult result;
  SCOPED_TRACE(tc.Describe() + " with " + config.Name());
  const Layout la =
      MakeLayout(rng, tc.m, tc.k, tc.la == 'T', tc.batch, tc.a_broadcast,
                 tc.misaligned, tc.pointer_arrays);
  const Layout lb =
      MakeLayout(rng, tc.k, tc.n, tc.lb == 'T', tc.batch, tc.b_broadcast,
                 tc.misaligned, tc.pointer_arrays);
  // C: row-major, padded rows (odd padding when misaligned: scalar stores).
  const Layout lc = MakeLayout(rng, tc.m, tc.n, false, tc.batch, false,
                               tc.misaligned, tc.pointer_arrays);
  const size_t c_size = DTypeSize(tc.c_dtype);

  std::vector<uint16_t> a(la.elements), b(lb.elements);
  FillRandom(rng, a);
  FillRandom(rng, b);
  // C starts poisoned everywhere; with beta != 0 its in-range elements get
  // random values (they are an input then). Padding stays poisoned and must
  // come back untouched.
  std::vector<uint8_t> c_init(lc.elements * c_size);
  for (int64_t i = 0; i < lc.elements; ++i) {
    if (tc.c_dtype == DType::kBF16) {
      std::memcpy(&c_init[i * 2], &kPoisonBf16, 2);
    } else {
      std::memcpy(&c_init[i * 4], &kPoisonFp32, 4);
    }
  }
  std::vector<bool> in_range(lc.elements, false);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t bi = 0; bi < tc.batch; ++bi) {
    for (int64_t i = 0; i < tc.m; ++i) {
      for (int64_t j = 0; j < tc.n; ++j) {
        const int64_t e = lc.entry_offsets[bi] + i * lc.strides.row + j;
        in_range[e] = true;
        if (tc.beta == 0.0f) continue;
        if (tc.c_dtype == DType::kBF16) {
          const uint16_t v = FloatToBf16(dist(rng));
          std::memcpy(&c_init[e * 2], &v, 2);
        } else {
          const float v = dist(rng);
          std::memcpy(&c_init[e * 4], &v, 4);
        }
      }
    }
  }

  DeviceBuffer da = DeviceAlloc(a.size() * 2);
  DeviceBuffer db = DeviceAlloc(b.size() * 2);
  DeviceBuffer dc = DeviceAlloc(c_init.size());
  DeviceBuffer dc_cublas = DeviceAlloc(c_init.size());
  EXPECT_EQ(
      cudaMemcpy(da.get(), a.data(), a.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(db.get(), b.data(), b.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dc.get(), c_init.data(), c_init.size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dc_cublas.get(), c_init.data(), c_init.size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);

  auto dptr = [](const DeviceBuffer& buf, int64_t offset, size_t esize) {
    return static_cast<char*>(buf.get()) + offset * esize;
  };
  // Device and host pointer arrays (one entry per batch element).
  std::vector<const void*> pa(tc.batch), pb(tc.batch), ha(tc.batch),
      hb(tc.batch);
  std::vector<void*> pc(tc.batch), pc_cublas(tc.batch), hc(tc.batch);
  std::vector<uint8_t> c_out(c_init.size());
  for (int64_t bi = 0; bi < tc.batch; ++bi) {
    pa[bi] = dptr(da, la.entry_offsets[bi], 2);
    pb[bi] = dptr(db, lb.entry_offsets[bi], 2);
    pc[bi] = dptr(dc, lc.entry_offsets[bi], c_size);
    pc_cublas[bi] = dptr(dc_cublas, lc.entry_offsets[bi], c_size);
    ha[bi] = a.data() + la.entry_offsets[bi];
    hb[bi] = b.data() + lb.entry_offsets[bi];
    hc[bi] = c_out.data() + lc.entry_offsets[bi] * c_size;
  }
  const size_t parray_bytes = tc.batch * sizeof(void*);
  DeviceBuffer dpa = DeviceAlloc(parray_bytes), dpb = DeviceAlloc(parray_bytes),
               dpc = DeviceAlloc(parray_bytes),
               dpc_cublas = DeviceAlloc(parray_bytes);
  EXPECT_EQ(
      cudaMemcpy(dpa.get(), pa.data(), parray_bytes, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(dpb.get(), pb.data(), parray_bytes, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(dpc.get(), pc.data(), parray_bytes, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dpc_cublas.get(), pc_cublas.data(), parray_bytes,
                       cudaMemcpyHostToDevice),
            cudaSuccess);

  GemmProblem p;
  p.batch = tc.batch;
  p.m = tc.m;
  p.n = tc.n;
  p.k = tc.k;
  p.c_dtype = tc.c_dtype;
  p.alpha = tc.alpha;
  p.beta = tc.beta;
  p.a.strides = la.strides;
  p.b.strides = lb.strides;
  p.c.strides = lc.strides;
  if (tc.pointer_arrays) {
    p.a.pointers = static_cast<const void* const*>(dpa.get());
    p.b.pointers = static_cast<const void* const*>(dpb.get());
    p.c.pointers = static_cast<void* const*>(dpc.get());
  } else {
    p.a.data = pa[0];
    p.b.data = pb[0];
    p.c.data = pc[0];
  }
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  result.tma = TakesTmaPath(p, config, device);
  const absl::Status status = Run(p, config, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(c_out.data(), dc.get(), c_out.size(), cudaMemcpyDeviceToHost),
      cudaSuccess);

  // cuBLAS, column-major: C^T[n,m] = B^T[n,k] * A^T[k,m].
  const cudaDataType c_type =
      tc.c_dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasOperation_t op_b = tc.lb == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = tc.la == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int64_t ldb_c = tc.lb == 'N' ? lb.strides.row : lb.strides.col;
  const int64_t lda_c = tc.la == 'N' ? la.strides.row : la.strides.col;
  cublasStatus_t cs;
  if (tc.pointer_arrays) {
    // One cublasGemmEx per entry: cublasGemmBatchedEx assumes aligned
    // entries and faults (cudaErrorMisalignedAddress) on the shifted ones.
    cs = CUBLAS_STATUS_SUCCESS;
    for (int64_t bi = 0; bi < tc.batch && cs == CUBLAS_STATUS_SUCCESS; ++bi) {
      cs = cublasGemmEx(cublas, op_b, op_a, tc.n, tc.m, tc.k, &tc.alpha, pb[bi],
                        CUDA_R_16BF, ldb_c, pa[bi], CUDA_R_16BF, lda_c,
                        &tc.beta, pc_cublas[bi], c_type, lc.strides.row,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
  } else {
    cs = cublasGemmStridedBatchedEx(
        cublas, op_b, op_a, tc.n, tc.m, tc.k, &tc.alpha, pb[0], CUDA_R_16BF,
        ldb_c, lb.strides.batch, pa[0], CUDA_R_16BF, lda_c, la.strides.batch,
        &tc.beta, pc_cublas[0], c_type, lc.strides.row, lc.strides.batch,
        tc.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  EXPECT_EQ(cs, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> c_cublas(c_init.size());
  EXPECT_EQ(cudaMemcpy(c_cublas.data(), dc_cublas.get(), c_cublas.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);

  // Reference from the host mirror (C's initial values for beta != 0).
  GemmProblem hp = p;
  hp.a.pointers = ha.data();
  hp.b.pointers = hb.data();
  std::vector<uint8_t> c_ref_in = c_init;
  std::vector<void*> hc_in(tc.batch);
  for (int64_t bi = 0; bi < tc.batch; ++bi) {
    hc_in[bi] = c_ref_in.data() + lc.entry_offsets[bi] * c_size;
  }
  hp.c.pointers = hc_in.data();
  const std::vector<double> expected = ReferenceGemm(hp);
  hp.c.pointers = hc.data();
  const std::vector<double> actual = ReadOutput(hp);
  std::vector<void*> hc_cublas(tc.batch);
  for (int64_t bi = 0; bi < tc.batch; ++bi) {
    hc_cublas[bi] = c_cublas.data() + lc.entry_offsets[bi] * c_size;
  }
  hp.c.pointers = hc_cublas.data();
  const std::vector<double> cublas_actual = ReadOutput(hp);

  result.error = RelativeError(actual, expected);
  result.cublas_error = RelativeError(cublas_actual, expected);
  EXPECT_LT(result.error, 1e-2);
  // Twice cuBLAS's error, with a floor for cases both compute (nearly)
  // exactly, e.g. k = 1 into FP32.
  EXPECT_LE(result.error, 2.0 * result.cublas_error + 1e-6)
      << "cuBLAS error " << result.cublas_error;

  // Every element written and close to the reference (an unwritten element
  // keeps its poison or, with beta != 0, its stale input and fails here).
  double rms = 0.0;
  for (double e : expected) rms += e * e;
  rms = std::sqrt(rms / std::max<size_t>(expected.size(), 1));
  int64_t bad = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double tol = 1e-2 * (std::abs(expected[i]) + rms) + 1e-6;
    if (!(std::abs(actual[i] - expected[i]) <= tol)) ++bad;
  }
  EXPECT_EQ(bad, 0) << "elements off the reference (or unwritten)";
  // Nothing outside C's elements changed (padding still poisoned).
  int64_t clobbered = 0;
  for (int64_t i = 0; i < lc.elements; ++i) {
    if (in_range[i]) continue;
    if (std::memcmp(&c_out[i * c_size], &c_init[i * c_size], c_size) != 0) {
      ++clobbered;
    }
  }
  EXPECT_EQ(clobbered, 0) << "writes outside C";
  return result;
}

GemmProblem ValidProblem() {
  GemmProblem p;
  p.m = 64;
  p.n = 64;
  p.k = 64;
  p.a.data = p.b.data = reinterpret_cast<const void*>(256);
  p.c.data = reinterpret_cast<void*>(256);
  p.a.strides = {0, 64, 1};
  p.b.strides = {0, 1, 64};
  p.c.strides = {0, 64, 1};
  return p;
}

// The operand layouts ("NN", "NT", "TN", "TT") `c` accepts; every config
// must accept NN and NT (what the service runs), and refuse the others
// with FAILED_PRECONDITION before any GPU work.
std::vector<std::string> Layouts(const TileConfig& c) {
  std::vector<std::string> accepted;
  for (const char* layout : {"NN", "NT", "TN", "TT"}) {
    GemmProblem p = ValidProblem();
    p.a.strides = layout[0] == 'N' ? Strides{0, 64, 1} : Strides{0, 1, 64};
    p.b.strides = layout[1] == 'N' ? Strides{0, 64, 1} : Strides{0, 1, 64};
    const absl::Status s = CanImplement(p, c, 1 << 20);
    if (s.ok()) {
      accepted.push_back(layout);
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition)
          << c.Name() << " " << layout << ": " << s;
      EXPECT_EQ(Run(p, c, nullptr).code(), s.code()) << c.Name();
    }
  }
  EXPECT_TRUE(accepted.size() >= 2 && accepted[0] == "NN" &&
              accepted[1] == "NT")
      << c.Name();
  return accepted;
}

class MmaConfigTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    const std::string reason = NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    cublas_.reset(h);
    config_ = AllConfigs()[GetParam()];
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    device_shared_ = MaxSharedBytesOptin(device);
    ASSERT_EQ(cudaDeviceGetAttribute(&compute_major_,
                                     cudaDevAttrComputeCapabilityMajor, device),
              cudaSuccess);
    layouts_ = Layouts(config_);
  }

  // Runs `cases` random cases (cycling through the layouts it accepts) and
  // prints the worst errors.
  void RunCases(int cases, uint64_t seed) {
    std::mt19937_64 rng(seed);
    double worst = 0.0, worst_ratio = 0.0;
    int tma_cases = 0;
    for (int i = 0; i < cases; ++i) {
      Case tc = DrawCase(rng, i);
      tc.la = layouts_[i % layouts_.size()][0];
      tc.lb = layouts_[i % layouts_.size()][1];
      const RunResult r = RunCase(rng, tc, config_, cublas_.get());
      tma_cases += r.tma;
      worst = std::max(worst, r.error);
      if (r.cublas_error > 0) {
        worst_ratio = std::max(worst_ratio, r.error / r.cublas_error);
      }
      if (HasFailure()) return;
    }
    std::printf(
        "  %s: %d cases (%d through the copy engine), worst rel error %.3g, "
        "worst ratio to cuBLAS %.3g\n",
        config_.Name().c_str(), cases, tma_cases, worst, worst_ratio);
    // A TMA config must take its own path where the device has one (about
    // 2 in 5 cases are single aligned products), and no other may.
    if (config_.tma && compute_major_ >= 9) {
      EXPECT_GT(tma_cases, 0) << "the copy-engine kernel never ran";
    } else {
      EXPECT_EQ(tma_cases, 0);
    }
  }

  CublasHandle cublas_;
  TileConfig config_;
  std::vector<std::string> layouts_;  // the ones config_ has kernels for
  int device_shared_ = 0;
  int compute_major_ = 0;
};

TEST_P(MmaConfigTest, RandomCasesMatchReferenceAndCublas) {
  if (config_.SharedBytes() > device_shared_) {
    GTEST_SKIP() << config_.Name() << " needs " << config_.SharedBytes()
                 << " bytes of shared memory; this device has "
                 << device_shared_;
  }
  RunCases(24, 0x5eed0000 + GetParam());
}

// The GB10's limit imposed on whatever device runs the test: configs over
// it must be refused before any GPU work, the rest must still be right.
TEST_P(MmaConfigTest, SparkSharedMemoryLimit) {
  GemmProblem p;
  p.m = p.n = p.k = 256;
  p.a.data = p.b.data = reinterpret_cast<const void*>(256);
  p.c.data = reinterpret_cast<void*>(256);
  p.a.strides = {0, 256, 1};
  p.b.strides = {0, 256, 1};
  p.c.strides = {0, 256, 1};
  const absl::Status s = CanImplement(p, config_, kSparkSharedBytes);
  if (config_.SharedBytes() > kSparkSharedBytes) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    std::printf("  %s: %d bytes, refused under the GB10 limit: %s\n",
                config_.Name().c_str(), config_.SharedBytes(),
                std::string(s.message()).c_str());
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  RunCases(8, 0xb10c0000 + GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, MmaConfigTest,
                         ::testing::Range<size_t>(0, AllConfigs().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return AllConfigs()[info.param].Name();
                         });

// ---- CanImplement: host-only, no device needed ----

TEST(MmaCanImplement, AcceptsValidProblem) {
  for (const TileConfig& c : AllConfigs()) {
    EXPECT_TRUE(CanImplement(ValidProblem(), c, 1 << 20).ok()) << c.Name();
  }
}

TEST(MmaCanImplement, RejectsWithReasons) {
  const TileConfig c = AllConfigs().back();
  GemmProblem p = ValidProblem();
  p.k = 0;
  EXPECT_EQ(CanImplement(p, c, 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
  p = ValidProblem();
  p.a.strides = {0, 128, 2};  // neither unit stride
  EXPECT_EQ(CanImplement(p, c, 1 << 20).code(),
            absl::StatusCode::kFailedPrecondition);
  p = ValidProblem();
  p.c.strides = {0, 1, 64};  // column-major C
  EXPECT_EQ(CanImplement(p, c, 1 << 20).code(),
            absl::StatusCode::kFailedPrecondition);
  p = ValidProblem();
  p.b.data = nullptr;
  EXPECT_EQ(CanImplement(p, c, 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
  p = ValidProblem();
  p.batch = 70000;
  EXPECT_EQ(CanImplement(p, c, 1 << 20).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CanImplement(ValidProblem(), c, c.SharedBytes() - 1).code(),
            absl::StatusCode::kFailedPrecondition);
  TileConfig unknown = c;
  unknown.block_k = 8;
  EXPECT_EQ(CanImplement(ValidProblem(), unknown, 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
}

// 160x64's A edge makes 320-byte rows when A is MN-major: only NN and NT.
TEST(MmaConfigs, LayoutsOfEachConfig) {
  for (const TileConfig& c : AllConfigs()) {
    const std::vector<std::string> layouts = Layouts(c);
    EXPECT_EQ(layouts.size(), c.block_m == 160 ? 2u : 4u) << c.Name();
  }
}

TEST(MmaConfigs, NamesAndSharedBytes) {
  const TileConfig c{128, 256, 32, 4, 2, 4, 8};
  EXPECT_EQ(c.Name(), "mma_128x256x32_s4_w2x4");
  EXPECT_EQ(c.SharedBytes(), 98304);
  const TileConfig t{128, 128, 64, 3, 2, 2, 8, true};
  EXPECT_EQ(t.Name(), "mma_128x128x64_s3_w2x2_tma");
  EXPECT_EQ(t.SharedBytes(), 98304 + 1024 + 48);
  // Each TMA config follows its cp.async twin; block_k 32 has none.
  int tma = 0;
  const auto& all = AllConfigs();
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].tma) continue;
    ++tma;
    ASSERT_GT(i, 0u);
    TileConfig twin = all[i];
    twin.tma = false;
    EXPECT_EQ(all[i - 1], twin) << all[i].Name();
    EXPECT_EQ(all[i].block_k % 64, 0) << all[i].Name();
  }
  EXPECT_EQ(tma, 11);
  int fit = 0;
  for (const TileConfig& x : AllConfigs())
    fit += x.SharedBytes() <= kSparkSharedBytes;
  EXPECT_GE(fit, 5);
}

}  // namespace
}  // namespace matmul::mma
