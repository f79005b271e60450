// A daemon and client built with MATMUL_CUDA=OFF (the arm64 cross build):
// --backend=auto runs on the CPU, and everything that needs CUDA answers
// FAILED_PRECONDITION saying the build has none, rather than crashing or
// pretending. Built only in that configuration.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/regions/cuda_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backends/backend_factory.h"
#include "server/metrics/metrics.h"
#include "server/regions/region_opener.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

TEST(BuiltWithoutCudaTest, AutoPicksTheCpuBackend) {
  absl::StatusOr<std::vector<std::unique_ptr<GemmBackend>>> backends =
      CreateBackends(BackendOptions{.kind = "auto"});
  ASSERT_TRUE(backends.ok()) << backends.status();
  ASSERT_EQ(backends->size(), 1u);
  EXPECT_EQ(backends->front()->name(), "cpu");
  EXPECT_EQ(backends->front()->cuda_device(), -1);
}

TEST(BuiltWithoutCudaTest, TheCudaBackendIsRefused) {
  absl::StatusOr<std::unique_ptr<GemmBackend>> backend =
      CreateBackend(BackendOptions{.kind = "cuda"});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(backend.status().message()),
              HasSubstr("built without CUDA"));
  // No GPU is ever seen, so "all" names none.
  absl::StatusOr<std::vector<std::unique_ptr<GemmBackend>>> all =
      CreateBackends(BackendOptions{.kind = "auto", .cuda_devices = "all"});
  EXPECT_EQ(all.status().code(), absl::StatusCode::kUnavailable);
}

TEST(BuiltWithoutCudaTest, CudaRegionsAreRefused) {
  RegionOpener opener(RegionOpenOptions{});
  const PeerCredentials caller = {getpid(), getuid(), getgid()};
  v1::RegisterRegionRequest ipc;
  ipc.mutable_cuda_ipc()->set_handle(std::string(64, '\x01'));
  ipc.mutable_cuda_ipc()->set_size_bytes(4096);
  absl::StatusOr<std::unique_ptr<Region>> region = opener.Open(ipc, caller);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr("built without CUDA"));
  // A malformed handle is still malformed.
  ipc.mutable_cuda_ipc()->set_handle("short");
  EXPECT_EQ(opener.Open(ipc, caller).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterRegionRequest vmm;
  vmm.mutable_cuda_vmm()->set_pid(getpid());
  vmm.mutable_cuda_vmm()->set_fd(3);
  vmm.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  region = opener.Open(vmm, caller);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr("built without CUDA"));
}

TEST(BuiltWithoutCudaTest, ClientGpuMemoryIsRefused) {
  for (CudaMemory::Kind kind :
       {CudaMemory::Kind::kIpc, CudaMemory::Kind::kVmm}) {
    absl::StatusOr<std::unique_ptr<CudaMemory>> memory =
        CudaMemory::Create(kind, 1 << 20);
    ASSERT_FALSE(memory.ok());
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(memory.status().message()),
                HasSubstr("built without CUDA"));
  }
}

TEST(BuiltWithoutCudaTest, BuildInfoNamesNoCudaLibraries) {
  const BuildInfo build = CurrentBuildInfo();
  EXPECT_EQ(build.cuda_runtime, "none");
  EXPECT_EQ(build.cublas, "none");
}

}  // namespace
}  // namespace matmul
