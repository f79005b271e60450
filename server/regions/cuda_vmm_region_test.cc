// OpenCudaVmmRegion's own checks for the caller the transport names: the
// pid check comes before any CUDA call (tested without a GPU), and the
// caller's pidfd is what descriptors are taken through (with one).
#include "server/regions/cuda_vmm_region.h"

#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

PeerCredentials Caller(uid_t uid) { return {getpid(), uid, getgid()}; }

v1::RegisterRegionRequest VmmRequest(int32_t pid) {
  v1::RegisterRegionRequest request;
  request.mutable_cuda_vmm()->set_pid(pid);
  request.mutable_cuda_vmm()->set_fd(3);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  return request;
}

TEST(CudaVmmCallerTest, OpenRefusesBeforeAnyCudaCall) {
  // A driver table of null entry points: any CUDA driver call would crash.
  const CudaDriverApi no_driver;
  absl::StatusOr<std::unique_ptr<Region>> region = OpenCudaVmmRegion(
      VmmRequest(1).cuda_vmm(), /*device=*/0, no_driver, Caller(getuid()));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()), HasSubstr("names pid 1"));
  // A caller the transport could not identify (pid 0) is refused too.
  region = OpenCudaVmmRegion(VmmRequest(getpid()).cuda_vmm(), 0, no_driver,
                             PeerCredentials{});
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr("a caller the daemon can identify"));
}

TEST(CudaVmmCallerTest, TheCallersPidfdIsUsed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "needs a CUDA GPU (the pid check passes, then CUDA runs)";
  }
  absl::StatusOr<CudaDriverApi> driver = LoadCudaDriverApi();
  ASSERT_TRUE(driver.ok()) << driver.status();
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0)));
  ASSERT_TRUE(pidfd.valid()) << strerror(errno);
  PeerCredentials peer = Caller(getuid());
  peer.pidfd = pidfd.get();
  // A descriptor this process does not have: pidfd_getfd through the
  // caller's pidfd says so (not a permission problem).
  v1::RegisterRegionRequest request = VmmRequest(getpid());
  request.mutable_cuda_vmm()->set_fd(100000);
  absl::StatusOr<std::unique_ptr<Region>> region =
      OpenCudaVmmRegion(request.cuda_vmm(), 0, *driver, peer);
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr("No such descriptor"));
}

}  // namespace
}  // namespace matmul
