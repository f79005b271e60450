#include "kernels/cuda/backend/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/bf16.h"
#include "common/gemm/reference_gemm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/families/gemm_family_registry.h"
#include "kernels/cuda/testing/gpu_test_util.h"
#include "kernels/launch_stages.h"

namespace matmul::cuda {
namespace {

using ::matmul::cuda::testing::MakeHostProblem;
using ::matmul::cuda::testing::OperandLayout;
using ::matmul::cuda::testing::ProblemSpec;

TEST(CudaBackendNoGpu, DeviceCountNeverCrashes) {
  const int count = CudaDeviceCount();
  EXPECT_GE(count, 0);
  if (count == 0) {
    auto backend = CreateCudaBackend({});
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  }
}

TEST(CudaBackendValidation, RejectsBadProblems) {
  GemmProblem p;
  p.m = 4;
  p.n = 4;
  p.k = 0;
  EXPECT_EQ(ValidateForCuda(p).code(), absl::StatusCode::kInvalidArgument);
  uint16_t a[16] = {}, b[16] = {}, c[16] = {};
  p.k = 4;
  p.a = {a, {0, 4, 1}};
  p.b = {b, {0, 4, 1}};
  p.c = {c, {0, 4, 1}};
  EXPECT_TRUE(ValidateForCuda(p).ok());
  p.batch = 2;  // C with batch stride 0: every entry writes the same matrix
  EXPECT_EQ(ValidateForCuda(p).code(), absl::StatusCode::kInvalidArgument);
  p.batch = 1;
  p.b.strides.row = -4;
  EXPECT_EQ(ValidateForCuda(p).code(), absl::StatusCode::kInvalidArgument);
  p.b.strides.row = 4;
  p.a.data = nullptr;
  EXPECT_EQ(ValidateForCuda(p).code(), absl::StatusCode::kInvalidArgument);
}

// Checked before any device is touched: runs without a GPU too.
TEST(CudaBackendValidation, RejectsBadOptions) {
  CudaBackendOptions options;
  options.streams = 0;
  EXPECT_EQ(CudaBackend::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.streams = 2;
  options.completion_threads = 0;
  EXPECT_EQ(CudaBackend::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.completion_threads = 1;
  for (double gflop : {0.0, -1.0, std::nan("")}) {
    options.serial_min_gflop_per_sm = gflop;
    EXPECT_EQ(CudaBackend::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << gflop;
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MATMUL_SKIP_WITHOUT_GPU();
    CudaBackendOptions options;
    options.selector.background_tuning =
        false;  // heuristic picks: deterministic
    auto backend = CudaBackend::Create(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  // `count` products of `spec` on the device, with poisoned outputs;
  // with `shared_b` every one reads the first one's B (and its reference
  // uses that B).
  struct DeviceBatch {
    std::vector<::matmul::cuda::testing::HostProblem> hosts;
    std::vector<::matmul::cuda::testing::DeviceProblem> devices;
    std::vector<const GemmProblem*> problems;
  };
  void MakeDeviceBatch(const ProblemSpec& spec, int count, bool shared_b,
                       DeviceBatch& batch) {
    batch.hosts.reserve(count);
    batch.devices.reserve(count);
    for (int i = 0; i < count; ++i) {
      batch.hosts.push_back(MakeHostProblem(spec, rng_));
      if (shared_b) {
        std::copy(batch.hosts.front().b.begin(), batch.hosts.front().b.end(),
                  batch.hosts.back().b.begin());
      }
      auto device = ::matmul::cuda::testing::Upload(batch.hosts.back());
      ASSERT_TRUE(device.ok()) << device.status();
      batch.devices.push_back(*std::move(device));
      if (shared_b) {
        batch.devices.back().problem.b.data =
            batch.devices.front().problem.b.data;
      }
      batch.problems.push_back(&batch.devices.back().problem);
    }
  }
  // Every product's output against its FP64 reference, and nothing
  // written outside it.
  void CheckDeviceBatch(DeviceBatch& batch, const std::string& kernel) {
    for (size_t i = 0; i < batch.hosts.size(); ++i) {
      ASSERT_TRUE(
          ::matmul::cuda::testing::Download(batch.devices[i], batch.hosts[i])
              .ok());
      EXPECT_LT(::matmul::cuda::testing::CheckError(batch.hosts[i]), 1e-2)
          << "product " << i << ", " << kernel;
      EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(batch.hosts[i]));
    }
  }

  void CheckHost(const ProblemSpec& spec) {
    SCOPED_TRACE(spec.Name());
    auto host = MakeHostProblem(spec, rng_);
    auto info = backend_->RunHost(host.problem);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->kernel.empty());
    EXPECT_GT(info->kernel_seconds, 0.0);
    EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2) << info->kernel;
    EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host)) << info->kernel;
  }

  void CheckDevice(const ProblemSpec& spec) {
    SCOPED_TRACE(spec.Name());
    auto host = MakeHostProblem(spec, rng_);
    auto device = ::matmul::cuda::testing::Upload(host);
    ASSERT_TRUE(device.ok()) << device.status();
    auto info = backend_->RunDevice(device->problem);
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
    EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2) << info->kernel;
    EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host)) << info->kernel;
  }

  std::unique_ptr<CudaBackend> backend_;
  std::mt19937_64 rng_{42};
};

TEST_F(CudaBackendTest, ReportsTheDevice) {
  auto devices = backend_->devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_FALSE(devices[0].name.empty());
  EXPECT_FALSE(devices[0].compute_capability.empty());
  EXPECT_GT(devices[0].multiprocessors, 0);
  EXPECT_EQ(backend_->name(), "cuda");
}

TEST_F(CudaBackendTest, AllLayoutsBothDtypesAlphaBeta) {
  const OperandLayout layouts[] = {OperandLayout::kRowMajor,
                                   OperandLayout::kColMajor};
  for (OperandLayout a : layouts) {
    for (OperandLayout b : layouts) {
      for (DType dtype : {DType::kBF16, DType::kFP32}) {
        for (float beta : {0.0f, 0.5f}) {
          ProblemSpec spec;
          spec.m = 77;
          spec.n = 64;
          spec.k = 120;
          spec.a = a;
          spec.b = b;
          spec.c_dtype = dtype;
          spec.alpha = -1.5f;
          spec.beta = beta;
          CheckHost(spec);
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, BatchBroadcastStridedAndPointerArrays) {
  ProblemSpec spec;
  spec.batch = 3;
  spec.m = 48;
  spec.n = 40;
  spec.k = 72;
  CheckHost(spec);
  spec.broadcast_a = true;
  CheckHost(spec);
  spec.broadcast_a = false;
  spec.broadcast_b = true;
  spec.b = OperandLayout::kColMajor;
  CheckHost(spec);
  spec.broadcast_b = false;
  spec.a = OperandLayout::kStrided;
  spec.c = OperandLayout::kStrided;
  spec.beta = 1.0f;
  CheckHost(spec);
  spec.a = OperandLayout::kRowMajor;
  spec.c = OperandLayout::kColMajor;
  spec.pointer_arrays = true;
  CheckHost(spec);
}

// The batcher's launch: several products of one BatchKey (different data,
// different batch sizes) as one pointer-array product, on device memory
// and staged from the host.
TEST_F(CudaBackendTest, BatchedLaunchesGiveEveryProductItsOwnResult) {
  for (bool on_device : {true, false}) {
    for (OperandLayout b :
         {OperandLayout::kColMajor, OperandLayout::kRowMajor}) {
      for (DType dtype : {DType::kBF16, DType::kFP32}) {
        ProblemSpec spec;
        spec.m = 40;
        spec.n = 56;
        spec.k = 72;
        spec.b = b;
        spec.c_dtype = dtype;
        spec.beta = dtype == DType::kFP32 ? 0.5f : 0.0f;
        SCOPED_TRACE(spec.Name() + (on_device ? " on device" : " staged"));
        std::vector<::matmul::cuda::testing::HostProblem> hosts;
        std::vector<::matmul::cuda::testing::DeviceProblem> devices;
        hosts.reserve(5);
        devices.reserve(5);
        std::vector<const GemmProblem*> problems;
        for (int i = 0; i < 5; ++i) {
          spec.batch = i == 3 ? 2 : 1;  // a bmm request joins as 2 entries
          hosts.push_back(MakeHostProblem(spec, rng_));
          if (on_device) {
            auto device = ::matmul::cuda::testing::Upload(hosts.back());
            ASSERT_TRUE(device.ok()) << device.status();
            devices.push_back(*std::move(device));
            problems.push_back(&devices.back().problem);
          } else {
            problems.push_back(&hosts.back().problem);
          }
        }
        auto info = backend_->RunBatch(problems, on_device);
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_GT(info->kernel_seconds, 0.0);
        for (int i = 0; i < 5; ++i) {
          if (on_device) {
            ASSERT_TRUE(
                ::matmul::cuda::testing::Download(devices[i], hosts[i]).ok());
          }
          EXPECT_LT(::matmul::cuda::testing::CheckError(hosts[i]), 1e-2)
              << "product " << i << ", " << info->kernel;
          EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(hosts[i]));
        }
      }
    }
  }
}

// Products that read one B (clients calling one layer) run as one stacked
// product: their A's gathered row-wise, C scattered back. Rows of 200 bytes
// take the element-wise copy, rows of 256 bytes the 16-byte one.
TEST_F(CudaBackendTest, ProductsSharingBRunStacked) {
  for (OperandLayout a : {OperandLayout::kRowMajor, OperandLayout::kColMajor}) {
    for (int64_t k : {100, 128}) {
      for (DType dtype : {DType::kBF16, DType::kFP32}) {
        ProblemSpec spec;
        spec.m = 24;
        spec.n = 136;
        spec.k = k;
        spec.a = a;
        spec.b = OperandLayout::kColMajor;  // nn.Linear's W
        spec.c_dtype = dtype;
        spec.beta = dtype == DType::kFP32 ? 0.5f : 0.0f;
        SCOPED_TRACE(spec.Name());
        DeviceBatch batch;
        ASSERT_NO_FATAL_FAILURE(
            MakeDeviceBatch(spec, /*count=*/7, /*shared_b=*/true, batch));
        auto info = backend_->RunBatch(batch.problems, /*on_device=*/true);
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_NE(info->kernel.find("+stacked"), std::string::npos)
            << info->kernel;
        CheckDeviceBatch(batch, info->kernel);
      }
    }
  }
}

// Products that fill the GPU from eight threads at once, through RunDevice
// and RunHost: four on stream slots (they overlap) and four on the stream
// all slots share (a tiny serial_min_gflop_per_sm: one after another, timed by
// one mark between consecutive products). Each caller must still get its
// own complete output and a kernel time of its own.
TEST_F(CudaBackendTest, ProductsThatFillTheDeviceFromSeveralThreads) {
  const int sms = backend_->devices()[0].multiprocessors;
  // A wave of 128x128 tiles: what makes a product fill the device.
  const int64_t side = 128 * static_cast<int64_t>(std::ceil(std::sqrt(sms)));
  constexpr int kThreads = 4;
  constexpr int kEach = 4;
  CudaBackendOptions options;
  options.selector.background_tuning = false;
  options.streams = kThreads;
  // These products are far below the default serial_min_gflop_per_sm.
  auto slots = CudaBackend::Create(options);
  ASSERT_TRUE(slots.ok()) << slots.status();
  options.serial_min_gflop_per_sm = 1e-6;
  auto serial = CudaBackend::Create(options);
  ASSERT_TRUE(serial.ok()) << serial.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreads; ++t) {
    CudaBackend* backend = t < kThreads ? slots->get() : serial->get();
    threads.emplace_back([backend, t, side] {
      std::mt19937_64 rng(1000 + t);
      for (int i = 0; i < kEach; ++i) {
        ProblemSpec spec;
        spec.m = side;
        spec.n = side + 8 * (t % kThreads);
        spec.k = 40;
        spec.b = OperandLayout::kColMajor;
        SCOPED_TRACE(absl::StrCat(spec.Name(), " thread ", t, " run ", i));
        auto host = MakeHostProblem(spec, rng);
        absl::StatusOr<GemmRunInfo> info;
        if (i % 2 == 0) {
          auto device = ::matmul::cuda::testing::Upload(host);
          ASSERT_TRUE(device.ok()) << device.status();
          info = backend->RunDevice(device->problem);
          ASSERT_TRUE(info.ok()) << info.status();
          ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
        } else {
          info = backend->RunHost(host.problem);
          ASSERT_TRUE(info.ok()) << info.status();
        }
        EXPECT_GT(info->kernel_seconds, 0.0);
        EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2)
            << info->kernel;
        EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// A request that mixes inline operands with operands in GPU regions runs
// through RunHost: device operands are copied device to device (a strided
// one gathered by a kernel), host ones staged.
TEST_F(CudaBackendTest, HostAndDeviceOperandsMixInOneProduct) {
  for (OperandLayout a : {OperandLayout::kRowMajor, OperandLayout::kStrided}) {
    for (bool c_on_device : {false, true}) {
      ProblemSpec spec;
      spec.m = 50;
      spec.n = 33;
      spec.k = 64;
      spec.a = a;
      spec.b = OperandLayout::kColMajor;
      spec.c = c_on_device ? OperandLayout::kStrided : OperandLayout::kRowMajor;
      spec.beta = 0.25f;
      SCOPED_TRACE(spec.Name());
      auto host = MakeHostProblem(spec, rng_);
      auto device = ::matmul::cuda::testing::Upload(host);
      ASSERT_TRUE(device.ok()) << device.status();
      GemmProblem mixed = host.problem;  // B from the host
      mixed.a = device->problem.a;       // A from the device
      if (c_on_device) mixed.c = device->problem.c;
      auto info = backend_->RunHost(mixed);
      ASSERT_TRUE(info.ok()) << info.status();
      if (c_on_device) {
        ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
      }
      EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2)
          << info->kernel;
      EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host));
    }
  }
}

TEST_F(CudaBackendTest, RandomHostCases) {
  for (int i = 0; i < 150; ++i) {
    CheckHost(::matmul::cuda::testing::RandomSpec(rng_, 160, true, true));
    if (HasFatalFailure()) return;
  }
}

TEST_F(CudaBackendTest, RandomDeviceCases) {
  for (int i = 0; i < 60; ++i) {
    CheckDevice(::matmul::cuda::testing::RandomSpec(rng_, 160, true, true));
    if (HasFatalFailure()) return;
  }
}

// The names of a launch's timed steps; each step's time is >= 0.
std::vector<std::string> StageNames(const GemmRunInfo& run) {
  std::vector<std::string> names;
  for (const LaunchStage& stage : run.launch_stages) {
    EXPECT_GE(stage.seconds, 0.0) << stage.name;
    names.emplace_back(stage.name);
  }
  return names;
}

// StartBatch's pipeline: single device products queued back to back from
// one thread, more of them than there are slots, each answered on the
// completion poller's thread once its output is complete, and so are
// batches of one launch; a staged product completes on the calling
// thread. Their ends noticed either way (--completion_poll).
TEST_F(CudaBackendTest, StartBatchCompletesQueuedProductsOffTheCaller) {
  for (bool by_word : {false, true}) {
    SCOPED_TRACE(by_word ? "ends read from a mapped word"
                         : "ends asked of the stream");
    CudaBackendOptions options;
    options.selector.background_tuning = false;
    options.streams = 3;
    options.completion_by_word = by_word;
    // Two threads complete them too.
    options.completion_threads = by_word ? 2 : 1;
    auto backend = CudaBackend::Create(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    constexpr int kProducts = 24;
    std::vector<::matmul::cuda::testing::HostProblem> hosts;
    std::vector<::matmul::cuda::testing::DeviceProblem> devices;
    for (int i = 0; i < kProducts; ++i) {
      hosts.push_back(MakeHostProblem(
          ::matmul::cuda::testing::RandomSpec(rng_, 300, true, false), rng_));
      auto device = ::matmul::cuda::testing::Upload(hosts.back());
      ASSERT_TRUE(device.ok()) << device.status();
      devices.push_back(*std::move(device));
    }
    const std::thread::id caller = std::this_thread::get_id();
    absl::Mutex mu;
    int answered = 0;
    int on_caller = 0;
    std::vector<absl::StatusOr<GemmRunInfo>> runs(kProducts);
    for (int i = 0; i < kProducts; ++i) {
      const GemmProblem* one[] = {&devices[i].problem};
      (*backend)->StartBatch(one, /*on_device=*/true,
                             [&, i](absl::StatusOr<GemmRunInfo> run) {
                               absl::MutexLock lock(&mu);
                               runs[i] = std::move(run);
                               if (std::this_thread::get_id() == caller)
                                 ++on_caller;
                               ++answered;
                             });
    }
    {
      absl::MutexLock lock(&mu);
      ASSERT_TRUE(mu.AwaitWithTimeout(
          absl::Condition(
              +[](int* n) { return *n == kProducts; }, &answered),
          absl::Seconds(60)));
      // A product strided on every operand is gathered and scattered on
      // the slot's stream, and queued all the same.
      EXPECT_EQ(on_caller, 0);
    }
    for (int i = 0; i < kProducts; ++i) {
      SCOPED_TRACE(hosts[i].spec.Name());
      ASSERT_TRUE(runs[i].ok()) << runs[i].status();
      EXPECT_GT(runs[i]->kernel_seconds, 0.0);
      // The launch's steps on the caller, timed in order.
      std::vector<std::string> steps = {
          "validate", "await_stream", "slot",          "gather",
          "kernel",   "scatter",      "restore_device"};
      // The end mark is queued where ends are read from the word.
      if (by_word) steps.insert(steps.end() - 1, "end_mark");
      EXPECT_EQ(StageNames(*runs[i]), steps);
      ASSERT_TRUE(::matmul::cuda::testing::Download(devices[i], hosts[i]).ok());
      EXPECT_LT(::matmul::cuda::testing::CheckError(hosts[i]), 1e-2);
      EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(hosts[i]));
    }

    // Batches of one shape: one launch each (pointer arrays; stacked where
    // they share B), queued and answered off the caller as well.
    ProblemSpec spec;
    spec.m = 16;
    spec.n = 512;
    spec.k = 512;
    spec.b = OperandLayout::kColMajor;
    for (bool shared_b : {false, true}) {
      SCOPED_TRACE(shared_b ? "sharing B" : "own B's");
      DeviceBatch batch;
      ASSERT_NO_FATAL_FAILURE(
          MakeDeviceBatch(spec, /*count=*/3, shared_b, batch));
      absl::Notification batch_answered;
      absl::StatusOr<GemmRunInfo> run;
      bool ran_here = true;
      (*backend)->StartBatch(batch.problems, /*on_device=*/true,
                             [&](absl::StatusOr<GemmRunInfo> result) {
                               run = std::move(result);
                               ran_here = std::this_thread::get_id() == caller;
                               batch_answered.Notify();
                             });
      ASSERT_TRUE(
          batch_answered.WaitForNotificationWithTimeout(absl::Seconds(60)));
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_FALSE(ran_here);
      EXPECT_GT(run->kernel_seconds, 0.0);
      EXPECT_EQ(run->kernel.find("+stacked") != std::string::npos, shared_b)
          << run->kernel;
      EXPECT_THAT(StageNames(*run), ::testing::Contains("pointer_arrays"));
      EXPECT_THAT(StageNames(*run),
                  ::testing::Contains("stack_in").Times(shared_b ? 1 : 0));
      CheckDeviceBatch(batch, run->kernel);
    }

    bool ran_here = false;
    auto staged = MakeHostProblem(spec, rng_);
    const GemmProblem* host_one[] = {&staged.problem};
    (*backend)->StartBatch(host_one, /*on_device=*/false,
                           [&](absl::StatusOr<GemmRunInfo> run) {
                             EXPECT_TRUE(run.ok()) << run.status();
                             ran_here = std::this_thread::get_id() == caller;
                           });
    EXPECT_TRUE(ran_here);
    EXPECT_LT(::matmul::cuda::testing::CheckError(staged), 1e-2);
  }
}

TEST_F(CudaBackendTest, SeedShapeThroughRunHost) {
  // The MLP gate/up product end to end, NT as nn.Linear gives it.
  ProblemSpec spec;
  spec.m = 512;  // a slice of 5120 rows keeps the FP64 reference quick
  spec.n = 1024;
  spec.k = 2048;
  spec.b = OperandLayout::kColMajor;
  CheckHost(spec);
}

// The own kernels alone behind the backend (cuBLASLt off), with the GB10's
// shared-memory limit imposed: RunHost and RunDevice must still be right.
TEST(CudaBackendOwnKernels, RandomCasesWithSparkLimit) {
  MATMUL_SKIP_WITHOUT_GPU();
  if (!cuda::HasBuiltInFamily("mma")) {
    GTEST_SKIP() << "the mma library is not part of this build";
  }
  CudaBackendOptions options;
  options.selector.background_tuning = false;
  options.selector.use_cublaslt = false;
  options.selector.max_shared_bytes = cuda::kSparkSharedBytes;
  auto backend = CudaBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::mt19937_64 rng(99);
  for (int i = 0; i < 60; ++i) {
    ProblemSpec spec =
        ::matmul::cuda::testing::RandomSpec(rng, 200, true, true);
    // The own kernels write row-major C only; the backend packs A and B.
    spec.c = OperandLayout::kRowMajor;
    SCOPED_TRACE(spec.Name());
    auto host = MakeHostProblem(spec, rng);
    auto info = i % 2 == 0 ? (*backend)->RunHost(host.problem)
                           : absl::StatusOr<GemmRunInfo>(
                                 absl::UnknownError("device path below"));
    if (i % 2 == 1) {
      auto device = ::matmul::cuda::testing::Upload(host);
      ASSERT_TRUE(device.ok());
      info = (*backend)->RunDevice(device->problem);
      ASSERT_TRUE(info.ok()) << info.status();
      ASSERT_TRUE(::matmul::cuda::testing::Download(*device, host).ok());
    }
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->kernel.rfind("mma_", 0), 0u) << info->kernel;
    EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2) << info->kernel;
    EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host)) << info->kernel;
  }
}

// Operands at every element-aligned address the daemon admits (BoundOperands
// refuses the rest): 2, 4 and 8 bytes past a 256-byte boundary, on the
// device and from the host, with cuBLASLt alone, the own kernels alone and
// both. Each family either runs them right or declines them for another.
TEST(CudaBackendAlignment, ElementAlignedOperandsGiveRightAnswers) {
  MATMUL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  struct Families {
    const char* name;
    bool own, cublaslt;
  };
  for (Families families :
       {Families{"both", true, true}, Families{"cublaslt", false, true},
        Families{"own", true, false}}) {
    CudaBackendOptions options;
    options.selector.background_tuning = false;
    options.selector.use_own_kernels = families.own;
    options.selector.use_cublaslt = families.cublaslt;
    auto backend = CudaBackend::Create(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    for (int64_t offset : {2, 4, 8}) {
      for (DType c_dtype : {DType::kBF16, DType::kFP32}) {
        ProblemSpec spec;
        spec.m = 192 + static_cast<int64_t>(rng() % 64);
        spec.n = 256;
        spec.k = 320;
        spec.b = OperandLayout::kColMajor;
        spec.c_dtype = c_dtype;
        const int64_t c_offset =
            c_dtype == DType::kFP32 ? std::max<int64_t>(offset, 4) : offset;
        SCOPED_TRACE(
            absl::StrCat(families.name, " offset ", offset, " ", spec.Name()));
        auto host = MakeHostProblem(spec, rng);
        // Device copies `offset` bytes into buffers cudaMalloc aligned.
        auto a = DeviceBuffer::Create(host.a.size() * 2 + 64);
        auto b = DeviceBuffer::Create(host.b.size() * 2 + 64);
        auto c = DeviceBuffer::Create(host.c.size() + 64);
        ASSERT_TRUE(a.ok() && b.ok() && c.ok());
        char* a_at = static_cast<char*>(a->data()) + offset;
        char* b_at = static_cast<char*>(b->data()) + offset;
        char* c_at = static_cast<char*>(c->data()) + c_offset;
        ASSERT_EQ(cudaMemcpy(a_at, host.a.data(), host.a.size() * 2,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(b_at, host.b.data(), host.b.size() * 2,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(c_at, host.c.data(), host.c.size(),
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        // The copies' DMA may still be under way (pageable sources), and the
        // backend's streams do not wait for the default stream.
        ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
        GemmProblem on_device = host.problem;
        on_device.a.data = a_at;
        on_device.b.data = b_at;
        on_device.c.data = c_at;
        auto info = (*backend)->RunDevice(on_device);
        ASSERT_TRUE(info.ok()) << info.status();
        ASSERT_EQ(cudaMemcpy(host.c.data(), c_at, host.c.size(),
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_LT(::matmul::cuda::testing::CheckError(host), 1e-2)
            << info->kernel;
        EXPECT_FALSE(::matmul::cuda::testing::OutsideWritten(host))
            << info->kernel;

        // The same operands from host memory at the same offsets.
        auto from_host = MakeHostProblem(spec, rng);
        std::vector<char> a_bytes(from_host.a.size() * 2 + 16);
        std::vector<char> b_bytes(from_host.b.size() * 2 + 16);
        const auto aligned = [](std::vector<char>& bytes, int64_t at) {
          const uintptr_t base = reinterpret_cast<uintptr_t>(bytes.data());
          return bytes.data() + ((16 - base % 16) % 16) + at;
        };
        char* ha = aligned(a_bytes, offset % 16);
        char* hb = aligned(b_bytes, offset % 16);
        std::memcpy(ha, from_host.a.data(), from_host.a.size() * 2);
        std::memcpy(hb, from_host.b.data(), from_host.b.size() * 2);
        GemmProblem staged = from_host.problem;
        staged.a.data = ha;
        staged.b.data = hb;
        info = (*backend)->RunHost(staged);
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_LT(::matmul::cuda::testing::CheckError(from_host), 1e-2)
            << info->kernel;
      }
    }
  }
}

// A product list: S = A B into scratch, C = S D, then C += 2 A E (beta 1),
// on random shapes, in place on the device and staged from host memory;
// against FP64 with S rounded to BF16 as the daemon stores it.
TEST_F(CudaBackendTest, ListChainsThroughScratchAndAccumulates) {
  std::mt19937_64 rng(46);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  auto random = [&](int64_t size) {
    std::vector<uint16_t> v(size);
    for (uint16_t& x : v) x = FloatToBf16(value(rng));
    return v;
  };
  auto widen = [](const std::vector<uint16_t>& v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
    return out;
  };
  for (int round = 0; round < 6; ++round) {
    const bool on_device = round % 2 == 0;
    const int64_t m = 1 + rng() % 300, k = 1 + rng() % 300, n = 1 + rng() % 300,
                  q = 1 + rng() % 300;
    SCOPED_TRACE(absl::StrCat(on_device ? "device " : "host ", m, "x", k, "x",
                              n, "x", q));
    const std::vector<uint16_t> a = random(m * k), b = random(k * n),
                                d = random(n * q), e = random(k * q);
    std::vector<uint16_t> c(m * q, 0x7fc1);  // NaN poison
    // The operands where the backend reads them.
    std::vector<DeviceBuffer> buffers(5);
    const std::vector<uint16_t>* host[] = {&a, &b, &d, &e, &c};
    std::vector<void*> at(5);
    for (int i = 0; i < 5; ++i) {
      const size_t bytes = host[i]->size() * 2;
      if (on_device) {
        ASSERT_TRUE(buffers[i].Reserve(bytes).ok());
        ASSERT_EQ(cudaMemcpy(buffers[i].data(), host[i]->data(), bytes,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        at[i] = buffers[i].data();
      } else {
        at[i] = const_cast<uint16_t*>(host[i]->data());
      }
    }
    GemmList list;
    GemmProblem p0{.m = m, .n = n, .k = k};
    p0.a = {at[0], {0, k, 1}};
    p0.b = {at[1], {0, n, 1}};
    p0.c = {nullptr, {0, n, 1}};
    GemmProblem p1{.m = m, .n = q, .k = n};
    p1.a = {nullptr, {0, n, 1}};
    p1.b = {at[2], {0, q, 1}};
    p1.c = {at[4], {0, q, 1}};
    GemmProblem p2{.m = m, .n = q, .k = k, .alpha = 2.0f, .beta = 1.0f};
    p2.a = {at[0], {0, k, 1}};
    p2.b = {at[3], {0, q, 1}};
    p2.c = {at[4], {0, q, 1}};
    list.products = {p0, p1, p2};
    list.scratch = {{0, ScratchOperand::Which::kC, 0},
                    {1, ScratchOperand::Which::kA, 0}};
    list.scratch_bytes = m * n * 2;
    absl::StatusOr<std::vector<GemmRunInfo>> runs =
        backend_->RunList(list, on_device);
    ASSERT_TRUE(runs.ok()) << runs.status();
    ASSERT_EQ(runs->size(), 3u);
    for (const GemmRunInfo& run : *runs) EXPECT_FALSE(run.kernel.empty());
    if (on_device) {
      ASSERT_EQ(
          cudaMemcpy(c.data(), at[4], c.size() * 2, cudaMemcpyDeviceToHost),
          cudaSuccess);
    }
    // FP64: S rounded to BF16, then C = S D + 2 A E.
    const std::vector<double> ad = widen(a), bd = widen(b), dd = widen(d),
                              ed = widen(e);
    std::vector<double> sd(m * n), expected(m * q);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l) sum += ad[i * k + l] * bd[l * n + j];
        sd[i * n + j] = Bf16ToFloat(FloatToBf16(static_cast<float>(sum)));
      }
      for (int64_t j = 0; j < q; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < n; ++l) sum += sd[i * n + l] * dd[l * q + j];
        double extra = 0;
        for (int64_t l = 0; l < k; ++l) extra += ad[i * k + l] * ed[l * q + j];
        expected[i * q + j] = sum + 2 * extra;
      }
    }
    EXPECT_LT(RelativeError(widen(c), expected), 1e-2);
  }
}

}  // namespace
}  // namespace matmul::cuda
