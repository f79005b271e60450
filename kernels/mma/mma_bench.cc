// Tuning tool: times every config of the mma.sync GEMM against cuBLASLt
// (heuristic's first pick, 32 MiB workspace) on the same data in the same
// process. CUDA events, median of --iters runs after warm-up.
//   mma_bench [--iters N] [--configs substr] [--shapes MxNxK,...]
//   mma_bench --peak_only   (just the mma.sync ceiling and its clock)
//   mma_bench --host_overhead [--configs substr]   (host time per Run call)
// Prints one line per (shape, layout, config) and a summary table.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/mma/mma_gemm.h"
#include "kernels/mma/mma_peak.h"

namespace {

using matmul::GemmProblem;
using matmul::mma::TileConfig;

#define CHECK_CUDA(x)                                                \
  do {                                                               \
    cudaError_t e_ = (x);                                            \
    if (e_ != cudaSuccess) {                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
                   cudaGetErrorString(e_));                          \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)
#define CHECK_LT(x)                                                  \
  do {                                                               \
    cublasStatus_t s_ = (x);                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                               \
      std::fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, \
                   static_cast<int>(s_));                            \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)

struct Shape {
  int64_t m, n, k;
};

// Median over `iters` samples of the time per call, each sample timing
// kBatch back-to-back calls so host-side launch overhead overlaps the GPU.
constexpr int kBatch = 10;
template <typename F>
double MedianMs(F&& f, int iters) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) f();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    for (int j = 0; j < kBatch; ++j) f();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / kBatch);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// cuBLASLt row-major C[m,n] = A[m,k] * B[k,n] (B "N" or "T"), BF16 out.
struct LtGemm {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  void* workspace = nullptr;
  size_t workspace_bytes = 32 << 20;

  LtGemm(const Shape& s, bool b_t) {
    CHECK_LT(cublasLtCreate(&lt));
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: C^T[n,m] = B^T[n,k] * A^T[k,m].
    cublasOperation_t op_b = b_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                            &op_b, sizeof(op_b)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                            &op_a, sizeof(op_a)));
    if (b_t) {
      CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.n, s.k));
    } else {
      CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.n, s.k, s.n));
    }
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.m, s.k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.m, s.n));
    CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
        sizeof(workspace_bytes)));
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, lb, la, lc, lc, pref, 1,
                                            &heur, &found));
    if (found == 0) {
      std::fprintf(stderr, "no cuBLASLt algorithm\n");
      std::exit(1);
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ~LtGemm() {
    cudaFree(workspace);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
  }
  void Run(const void* a, const void* b, void* c) {
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_LT(cublasLtMatmul(lt, desc, &alpha, b, lb, a, la, &beta, c, lc, c, lc,
                            &heur.algo, workspace, workspace_bytes, nullptr));
  }
};

}  // namespace

// Host time per Run call (CanImplement, for TMA configs the two tensor
// maps, the launch) on a 256x256x256 NT product, per config: the median of
// 5 rounds of 400 calls, each round timed on the host clock without
// waiting for the GPU (400 stays under the launch queue's depth, so the
// host never blocks on it).
void HostOverhead(const std::string& filter) {
  constexpr int64_t kN = 256;
  constexpr int kCalls = 400;
  void *a, *b, *c;
  CHECK_CUDA(cudaMalloc(&a, kN * kN * 2));
  CHECK_CUDA(cudaMalloc(&b, kN * kN * 2));
  CHECK_CUDA(cudaMalloc(&c, kN * kN * 2));
  CHECK_CUDA(cudaMemset(a, 0x3c, kN * kN * 2));  // BF16 0x3c3c, about 0.011
  CHECK_CUDA(cudaMemset(b, 0x3c, kN * kN * 2));
  GemmProblem p;
  p.m = p.n = p.k = kN;
  p.a.data = a;
  p.a.strides = {0, kN, 1};
  p.b.data = b;
  p.b.strides = {0, 1, kN};
  p.c.data = c;
  p.c.strides = {0, kN, 1};
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  for (const TileConfig& cfg : matmul::mma::AllConfigs()) {
    if (!filter.empty() && cfg.Name().find(filter) == std::string::npos) {
      continue;
    }
    if (!matmul::mma::CanImplement(p, cfg,
                                   matmul::mma::MaxSharedBytesOptin(device))
             .ok()) {
      continue;
    }
    std::vector<double> us;
    for (int round = 0; round < 6; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) {
        if (!matmul::mma::Run(p, cfg, nullptr).ok()) std::exit(1);
      }
      const auto t1 = std::chrono::steady_clock::now();
      CHECK_CUDA(cudaDeviceSynchronize());
      // Round 0 is the warm-up.
      if (round > 0) {
        us.push_back(
            std::chrono::duration<double, std::micro>(t1 - t0).count() /
            kCalls);
      }
    }
    std::sort(us.begin(), us.end());
    std::printf("host time per Run call  %-28s %6.2f us  %s\n",
                cfg.Name().c_str(), us[us.size() / 2],
                matmul::mma::TakesTmaPath(p, cfg, device) ? "(copy engine)"
                                                          : "(cp.async)");
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

int main(int argc, char** argv) {
  int iters = 30;
  bool peak_only = false;
  bool host_overhead = false;
  std::string filter;
  std::vector<Shape> shapes = {{5120, 11008, 2048},
                               {5120, 2048, 11008},
                               {5120, 2048, 2048},
                               {5120, 512, 2048}};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--peak_only")) {
      peak_only = true;
    } else if (!std::strcmp(argv[i], "--host_overhead")) {
      host_overhead = true;
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--configs") && i + 1 < argc) {
      filter = argv[++i];
    } else if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) {
      shapes.clear();
      for (absl::string_view s : absl::StrSplit(argv[++i], ',')) {
        std::vector<std::string> d = absl::StrSplit(s, 'x');
        shapes.push_back({std::atoll(d[0].c_str()), std::atoll(d[1].c_str()),
                          std::atoll(d[2].c_str())});
      }
    }
  }
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device %s, %d SMs, smem optin %d\n", prop.name,
              prop.multiProcessorCount,
              matmul::mma::MaxSharedBytesOptin(device));
  if (host_overhead) {
    HostOverhead(filter);
    return 0;
  }

  for (int blocks : {1, 2, 4}) {
    const matmul::mma::MmaPeak peak = matmul::mma::MeasureMmaPeak(blocks);
    std::printf("mma.sync m16n8k16 BF16 ceiling, %d x 8 warps/SM: %.1f TFLOP/s",
                blocks, peak.tflops);
    if (peak.clock_mhz > 0) {
      std::printf(", %.0f FLOP per SM cycle at %.0f MHz",
                  peak.flop_per_sm_cycle, peak.clock_mhz);
    }
    std::printf("\n");
  }
  if (peak_only) return 0;

  struct Row {
    std::string shape;
    double cublas;
    double best_spark;
    std::string best_spark_name;
    double best_any;
  };
  std::vector<Row> rows;
  std::mt19937 rng(1);
  for (const Shape& s : shapes) {
    const size_t a_n = s.m * s.k, b_n = s.k * s.n, c_n = s.m * s.n;
    std::vector<uint16_t> host(std::max({a_n, b_n}));
    std::uniform_int_distribution<int> dist(-1000, 1000);
    auto fill = [&](void* dst, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        float f = dist(rng) / 1000.0f;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        host[i] = static_cast<uint16_t>(bits >> 16);
      }
      CHECK_CUDA(cudaMemcpy(dst, host.data(), n * 2, cudaMemcpyHostToDevice));
    };
    void *a, *b, *c, *c_ref;
    CHECK_CUDA(cudaMalloc(&a, a_n * 2));
    CHECK_CUDA(cudaMalloc(&b, b_n * 2));
    CHECK_CUDA(cudaMalloc(&c, c_n * 2));
    CHECK_CUDA(cudaMalloc(&c_ref, c_n * 2));
    fill(a, a_n);
    fill(b, b_n);
    const double flop = 2.0 * s.m * s.n * s.k;
    for (bool b_t : {false, true}) {
      const std::string name =
          absl::StrCat(s.m, "x", s.n, "x", s.k, b_t ? ":NT" : ":NN");
      LtGemm lt(s, b_t);
      const double lt_ms = MedianMs([&] { lt.Run(a, b, c_ref); }, iters);
      const double lt_tf = flop / lt_ms / 1e9;
      std::printf("%-22s cuBLASLt                 %8.3f ms %7.1f TFLOP/s\n",
                  name.c_str(), lt_ms, lt_tf);
      Row row{name, lt_tf, 0, "", 0};
      GemmProblem p;
      p.m = s.m;
      p.n = s.n;
      p.k = s.k;
      p.a.data = a;
      p.a.strides = {0, s.k, 1};
      p.b.data = b;
      p.b.strides =
          b_t ? matmul::Strides{0, 1, s.k} : matmul::Strides{0, s.n, 1};
      p.c.data = c;
      p.c.strides = {0, s.n, 1};
      // Reference output for a quick agreement check (max abs diff).
      std::vector<uint16_t> ref(c_n), out(c_n);
      CHECK_CUDA(
          cudaMemcpy(ref.data(), c_ref, c_n * 2, cudaMemcpyDeviceToHost));
      for (const TileConfig& cfg : matmul::mma::AllConfigs()) {
        if (!filter.empty() && cfg.Name().find(filter) == std::string::npos) {
          continue;
        }
        if (!matmul::mma::CanImplement(p, cfg,
                                       matmul::mma::MaxSharedBytesOptin(device))
                 .ok())
          continue;
        CHECK_CUDA(cudaMemset(c, 0xff, c_n * 2));
        auto st = matmul::mma::Run(p, cfg, nullptr);
        if (!st.ok()) {
          std::printf("%s %s: %s\n", name.c_str(), cfg.Name().c_str(),
                      st.ToString().c_str());
          continue;
        }
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(out.data(), c, c_n * 2, cudaMemcpyDeviceToHost));
        double max_diff = 0, max_ref = 0;
        for (size_t i = 0; i < c_n; i += 7) {
          auto f = [](uint16_t h) {
            uint32_t bits = static_cast<uint32_t>(h) << 16;
            float v;
            std::memcpy(&v, &bits, 4);
            return static_cast<double>(v);
          };
          double d = std::abs(f(out[i]) - f(ref[i]));
          if (!(d == d)) d = 1e30;
          max_diff = std::max(max_diff, d);
          max_ref = std::max(max_ref, std::abs(f(ref[i])));
        }
        const double ms =
            MedianMs([&] { (void)matmul::mma::Run(p, cfg, nullptr); }, iters);
        const double tf = flop / ms / 1e9;
        const bool spark = cfg.SharedBytes() <= 101376;
        std::printf(
            "%-22s %-24s %8.3f ms %7.1f TFLOP/s  %.3fx  %s maxdiff %.2g/%.2g\n",
            name.c_str(), cfg.Name().c_str(), ms, tf, tf / lt_tf,
            spark ? "spark" : "     ", max_diff, max_ref);
        if (spark && tf > row.best_spark) {
          row.best_spark = tf;
          row.best_spark_name = cfg.Name();
        }
        row.best_any = std::max(row.best_any, tf);
      }
      rows.push_back(row);
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(c_ref);
  }
  std::printf("\n%-22s %9s %9s %6s  %-24s %9s\n", "shape", "cuBLASLt",
              "best<=99K", "ratio", "config", "best any");
  for (const Row& r : rows) {
    std::printf("%-22s %9.1f %9.1f %6.3f  %-24s %9.1f\n", r.shape.c_str(),
                r.cublas, r.best_spark, r.best_spark / r.cublas,
                r.best_spark_name.c_str(), r.best_any);
  }
  return 0;
}
